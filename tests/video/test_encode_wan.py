"""`shardcook encode --layout wan`: the issue's two command lines, finalized, read back through
Megatron-Bridge's `WanTaskEncoder` and real Energon, every tensor against Bridge's own prep
script on the same clips (both re-typed in tests/helpers/bridge_wan.py, sources named there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.helpers import bridge_wan
from tests.helpers.encode import load_tensor, run_in_process, samples
from tests.helpers.video import video_folder, write_clip

COMMON = ("--height", "48", "--width", "80", "--resize-mode", "bilinear", "--latent-mode",
          "mode", "--device", "cpu", "--precision", "fp32", "--batch-size", "2",
          "--shard-size", "3", "--quiet")
#: A clip shorter than --num-frames: encoded whole in video mode, skipped in frames mode.
SHORT = "w_short.mp4"
#: Inputs that are skipped, sorted after the good clips so Bridge's indices match ours.
BAD = {"x_corrupt.mp4": "video_decode_error", "x_empty.mp4": "video_decode_error",
       "x_nocaption.mp4": "missing_caption"}


def _command(videos: Path, out: Path, model: Path, *mode: str) -> list[str]:
    return ["encode", "--layout", "wan", "--input-dir", str(videos), "--output-dir", str(out),
            "--model-path", str(model), *COMMON[:4], "--video-mode", *mode, *COMMON[4:]]


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> tuple[Path, list[tuple[str, str]]]:
    root = tmp_path_factory.mktemp("wan_videos") / "videos"
    good = video_folder(root)
    (root / "x_corrupt.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 not really a video")
    write_clip(root / "x_empty.mp4", 0)
    write_clip(root / "x_nocaption.mp4", 3)
    for name in ("x_corrupt.json", "x_empty.json"):
        (root / name).write_text(json.dumps({"caption": "never encoded"}), encoding="utf-8")
    write_clip(root / "w_short.mp4", 3, seed=9)  # fewer frames than --num-frames 4
    (root / "w_short.json").write_text(json.dumps({"caption": "short"}), encoding="utf-8")
    return root, good


@pytest.fixture(scope="module")
def video_run(clips, tiny_wan, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wan_video") / "out"
    run_in_process(_command(clips[0], out, tiny_wan, "video"))
    return out


@pytest.fixture(scope="module")
def frames_run(clips, tiny_wan, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wan_frames") / "out"
    run_in_process(_command(clips[0], out, tiny_wan, "frames", "--num-frames", "4"))
    return out


def _assert_loads_as_bridge_wrote(out: Path, reference: dict[str, dict]) -> None:
    """Every sample through Energon and Bridge's task encoder equals what it gives for Bridge's
    own script's sample: patchified latent, padded context, grid, and the json's fields."""
    batches = bridge_wan.wan_batches(out)
    assert sorted(b["__key__"] for b in batches) == sorted(reference)
    for got in batches:
        ref = reference[got["__key__"]]
        want = bridge_wan.expected_sample(ref)
        torch.testing.assert_close(got["video"], want["video"], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got["context_embeddings"], want["context_embeddings"],
                                   atol=1e-5, rtol=1e-5)
        assert torch.equal(got["latent_shape"], want["latent_shape"])
        assert got["video"].dtype == torch.float32
        meta = got["video_metadata"]
        expected = json.loads(json.dumps(ref["json"]))  # target_size: a tuple there
        # we do not slice or tile the VAE, and say so
        assert meta.pop("memory_optimization") is False
        expected.pop("memory_optimization")
        assert {k: meta[k] for k in expected} == expected
        assert meta["latent_mode"] == "mode"


def test_video_mode_loads_through_bridges_task_encoder_as_its_script_wrote(
        video_run, clips, tiny_wan):
    short = (str(clips[0] / SHORT), "short")
    reference = bridge_wan.prepare(tiny_wan, [*clips[1], short], mode="video")
    _assert_loads_as_bridge_wrote(video_run, reference)
    # the clips' own lengths: 1 + (T - 1) // 4 latent frames
    lengths = {k: load_tensor(p["pth"]).shape for k, p in samples(video_run).items()}
    assert lengths["000000"] == (16, 3, 6, 10) and lengths["000001"] == (16, 2, 6, 10)
    assert lengths["000005"] == (16, 1, 6, 10)
    # the comparison can fail: the latents are normalised by the VAE config, not left raw
    raw = reference["000000"]["pth"] * torch.tensor(
        json.loads((tiny_wan / "vae" / "config.json").read_text())["latents_std"]).view(
        -1, 1, 1, 1)
    assert (raw - reference["000000"]["pth"]).abs().max() > 1e-2


def test_frames_mode_keys_and_tensors_are_bridges(frames_run, clips, tiny_wan):
    reference = bridge_wan.prepare(tiny_wan, clips[1], mode="frames", num_frames=4)
    assert "000000_01" in reference and "000004_04" in reference
    _assert_loads_as_bridge_wrote(frames_run, reference)
    meta = json.loads(samples(frames_run)["000001_03"]["json"])
    assert (meta["frame_index"], meta["total_frames_in_video"], meta["processed_frames"]) == (
        3, 4, 1)


def test_bad_videos_are_skipped_with_their_reason(video_run, frames_run):
    for out, short, written in ((video_run, {}, 6), (frames_run, {SHORT: "too_few_frames"}, 20)):
        report = json.loads((out / ".shardcook" / "report.json").read_text())
        reasons = {Path(s["source"]).name: s["reason"] for s in report["skipped"]}
        assert reasons == {**BAD, **short}
        # a video gives several samples in frames mode: inputs and samples are counted apart
        assert (report["num_inputs"], report["num_written"], report["num_skipped"]) == (
            9, written, len(reasons))
        yaml = (out / ".nv-meta" / "dataset.yaml").read_text()
        assert "CrudeWebdataset" in yaml and "encoding: wan" in yaml


def test_the_manifest_records_the_vae_and_its_normalisation(video_run, tiny_wan):
    manifest = json.loads((video_run / ".shardcook" / "manifest.json").read_text())
    config = json.loads((tiny_wan / "vae" / "config.json").read_text())
    text = json.dumps(manifest)
    assert '"normalisation"' in text
    found = [v for v in _walk(manifest) if isinstance(v, dict) and "latents_mean" in v]
    assert found and found[0]["latents_mean"] == config["latents_mean"]
    assert found[0]["latents_std"] == config["latents_std"]


def test_info_shows_the_latent_and_the_embedding_shapes(video_run):
    import pickle

    text = pickle.loads(samples(video_run)["000000"]["pickle"])  # our own run's embedding
    r = run_in_process(["info", str(video_run)])
    assert "float32[16, 3, 6, 10]" in r.output  # pth: the first clip's latent
    assert f"float32{list(text.shape)}" in r.output, r.output  # pickle: the UMT5 embedding


def _walk(obj):
    yield obj
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk(v)


def test_validate_refuses_a_normalisation_that_is_not_wans(video_run, tmp_path):
    import shutil

    import shardcook

    assert shardcook.validate(video_run, deep=True).ok
    other = tmp_path / "other"
    shutil.copytree(video_run, other)
    manifest = other / ".shardcook" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["normalisation"] = {"kind": "scaling_shift", "scaling_factor": 0.36,
                             "shift_factor": 0.11}
    manifest.write_text(json.dumps(data))
    report = shardcook.validate(other)
    assert not report.ok
    assert any("normalisation scaling_shift" in p for p in report.problems), report.problems


def test_sigkill_then_resume_writes_the_same_bytes(video_run, clips, tiny_wan, tmp_path):
    """A run killed after its first unit, then run again, ends with the shards of the run that
    was never interrupted."""
    from tests.helpers.raw import killed_after

    out = tmp_path / "out"
    args = _command(clips[0], out, tiny_wan, "video")
    assert 1 <= len(killed_after(args, out, 1)) < 3
    run_in_process(args)
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert report["units"]["resumed"] >= 1
    assert {p.name: p.read_bytes() for p in out.glob("*.tar")} == {
        p.name: p.read_bytes() for p in video_run.glob("*.tar")}


def test_into_a_bucket_the_same_shards_finalized_there(video_run, clips, tiny_wan, s3_store,
                                                       tmp_path):
    import shardcook

    run_in_process([*_command(clips[0], s3_store.url("wan"), tiny_wan, "video"),
                    "--scratch-dir", str(tmp_path / "scratch")])
    copy = tmp_path / "copy"
    s3_store.download_folder("wan", copy)
    assert {p.name: p.read_bytes() for p in copy.glob("*.tar")} == {
        p.name: p.read_bytes() for p in video_run.glob("*.tar")}
    assert (copy / ".nv-meta" / "dataset.yaml").read_text() == (
        video_run / ".nv-meta" / "dataset.yaml").read_text()
    assert shardcook.validate(s3_store.url("wan")).ok


def test_mp4_members_of_webdataset_tars_give_the_folders_tensors(video_run, clips, tiny_wan,
                                                                  tmp_path):
    import io
    import tarfile

    tar = tmp_path / "clips.tar"
    with tarfile.open(tar, "w") as t:
        for path, caption in clips[1]:
            stem = Path(path).stem
            for name, data in ((f"{stem}.{Path(path).suffix[1:]}", Path(path).read_bytes()),
                               (f"{stem}.json", json.dumps({"caption": caption}).encode())):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    out = tmp_path / "out"
    args = _command(clips[0], out, tiny_wan, "video")
    at = args.index("--input-dir")
    args[at:at + 2] = ["--source-type", "webdataset", "--input-path", str(tar)]
    run_in_process(args)
    ours, folder = samples(out), samples(video_run)
    assert sorted(ours) == [f"{i:06}" for i in range(len(clips[1]))]
    for key, parts in ours.items():
        assert parts["pth"] == folder[key]["pth"] and parts["pickle"] == folder[key]["pickle"]


def test_preview_shows_each_clips_first_frame_decoded_by_the_wan_vae(video_run, tiny_wan,
                                                                     tmp_path):
    import numpy as np
    from PIL import Image
    from shardcook.encoders.wan import WanDecoder
    from shardcook.preview import preview

    plain = preview(video_run, tmp_path / "plain.png", count=1)
    decoded = preview(video_run, tmp_path / "decoded.png", count=1, model_path=str(tiny_wan))
    a, b = (np.asarray(Image.open(p).convert("RGB")) for p in (plain, decoded))
    assert a.shape == b.shape and not np.array_equal(a, b)  # false colour vs decoded pixels
    latent = load_tensor(samples(video_run)["000000"]["pth"])
    manifest = json.loads((video_run / ".shardcook" / "manifest.json").read_text())
    frame = WanDecoder(str(tiny_wan), manifest)(latent[:, 0])
    assert frame.shape == (48, 80, 3) and frame.dtype == np.uint8


def test_a_hugging_face_video_column_gives_the_folders_tensors(video_run, clips, tiny_wan,
                                                              tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict({"video": [Path(p).read_bytes() for p, _ in clips[1]],
                                     "caption": [c for _, c in clips[1]]})
    ds.save_to_disk(str(tmp_path / "ds"))
    out = tmp_path / "out"
    args = _command(clips[0], out, tiny_wan, "video")
    at = args.index("--input-dir")
    args[at:at + 2] = ["--source-type", "huggingface", "--hf-dataset", str(tmp_path / "ds"),
                       "--image-column", "video"]
    run_in_process(args)
    ours, folder = samples(out), samples(video_run)
    assert sorted(ours) == [f"{i:06}" for i in range(len(clips[1]))]
    for key, parts in ours.items():
        assert parts["pth"] == folder[key]["pth"] and parts["pickle"] == folder[key]["pickle"]


@pytest.mark.parametrize("stored", ["saved", "parquet"])
def test_a_hugging_face_video_feature_is_read_undecoded(video_run, clips, tiny_wan, tmp_path,
                                                        stored):
    """A `datasets.Video` column (decoding it needs torchcodec, not installed here) is read
    as the `{"bytes", "path"}` it stores, found without --image-column; saved to disk, and as
    parquet files read with --hf-streaming."""
    import importlib.util

    import datasets

    features = datasets.Features({"clip": datasets.Video(), "caption": datasets.Value("string")})
    # the first row by path (embedded when stored), the rest as bytes
    videos = [clips[1][0][0], *(Path(p).read_bytes() for p, _ in clips[1][1:])]
    ds = datasets.Dataset.from_dict({"clip": videos, "caption": [c for _, c in clips[1]]},
                                    features=features)
    if importlib.util.find_spec("torchcodec") is None:  # decoding would need it
        with pytest.raises(ImportError, match="torchcodec"):
            _ = ds[0]["clip"]
    where, extra = tmp_path / "ds", []
    if stored == "saved":
        ds.save_to_disk(str(where))
    else:
        ds.to_parquet(str(where / "data" / "train-00000-of-00001.parquet"))
        extra = ["--hf-streaming"]
    out = tmp_path / "out"
    args = _command(clips[0], out, tiny_wan, "video")
    at = args.index("--input-dir")
    args[at:at + 2] = ["--source-type", "huggingface", "--hf-dataset", str(where), *extra]
    run_in_process(args)
    ours, folder = samples(out), samples(video_run)
    assert sorted(ours) == [f"{i:06}" for i in range(len(clips[1]))]
    for key, parts in ours.items():
        assert parts["pth"] == folder[key]["pth"] and parts["pickle"] == folder[key]["pickle"]


def test_two_torchrun_workers_write_one_process_bytes(video_run, clips, tiny_wan, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "shardcook", "--nproc-per-node", "2",
                        *_command(clips[0], out, tiny_wan, "video")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((out / ".shardcook" / "report.json").read_text())["world_size"] == 2
    assert {p.name: p.read_bytes() for p in out.glob("*.tar")} == {
        p.name: p.read_bytes() for p in video_run.glob("*.tar")}


def test_clips_kept_at_their_own_size_wait_within_the_byte_budget(tiny_wan, tmp_path,
                                                                   monkeypatch):
    """Without --height/--width the queue's count of batches assumes 480 x 832 clips; the
    decoded frames' bytes bound it whatever their size (the budget lowered to 2 clips here)."""
    from shardcook.jobs.encode.video import VideoEncodeProcessor

    videos = tmp_path / "videos"
    videos.mkdir()
    for i in range(5):
        write_clip(videos / f"big_{i}.mp4", 9, h=96, w=160, seed=i)
        (videos / f"big_{i}.json").write_text(json.dumps({"caption": f"clip {i}"}))
    clip_bytes = 9 * 96 * 160 * 3
    monkeypatch.setattr(VideoEncodeProcessor, "prepared_budget", 2 * clip_bytes + 1)
    out = tmp_path / "out"
    args = _command(videos, out, tiny_wan, "video")
    at = args.index("--height")
    del args[at:at + 4]  # each clip at its own size
    args[args.index("--batch-size") + 1] = "1"
    run_in_process(args)
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert report["num_written"] == 5
    assert clip_bytes <= report["prepared_peak_bytes"] <= 2 * clip_bytes
    latent = load_tensor(samples(out)["000000"]["pth"])
    assert latent.shape == (16, 3, 12, 20)  # 96 x 160 through the VAE's 8x


def _tars(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in out.glob("*.tar")}


def test_resume_with_other_video_options_is_refused(video_run, clips, tiny_wan, tmp_path):
    """The video section is compared on resume like every other: a run killed mid-way and run
    again in frames mode at another size, or a finished run given another size, is refused in
    one sentence naming the options, and nothing is written (they used to mix [16, T', 6, 10]
    clip latents with [16, 1, 2, 2] frame latents, or say "resumed")."""
    import shutil

    from tests.helpers.raw import killed_after

    out = tmp_path / "partial"
    args = _command(clips[0], out, tiny_wan, "video")
    args[args.index("--shard-size") + 1] = "1"
    assert 1 <= len(killed_after(args, out, 1)) < 9
    before = _tars(out)
    other = _command(clips[0], out, tiny_wan, "frames", "--num-frames", "2")
    other[other.index("--height") + 1], other[other.index("--width") + 1] = "16", "16"
    other[other.index("--shard-size") + 1] = "1"
    r = run_in_process(other, expect=2)
    assert "holds a run made with different options" in r.output, r.output
    for said in ("height: 48 -> 16", "width: 80 -> 16", "video_mode: 'video' -> 'frames'",
                 "num_frames: 10 -> 2"):
        assert said in r.output, r.output
    assert "Traceback" not in r.output and _tars(out) == before

    done = tmp_path / "done"
    shutil.copytree(video_run, done)
    again = _command(clips[0], done, tiny_wan, "video")
    again[again.index("--height") + 1], again[again.index("--width") + 1] = "16", "16"
    r = run_in_process(again, expect=2)
    assert "height: 48 -> 16" in r.output and "resumed" not in r.output, r.output
    assert _tars(done) == _tars(video_run)
    assert (done / ".shardcook" / "manifest.json").read_bytes() == (
        video_run / ".shardcook" / "manifest.json").read_bytes()


def test_validate_deep_flags_a_split_mixing_clips_and_frames(video_run, frames_run, tmp_path):
    """A split holding both clip samples and frame samples (two runs' shards in one folder) is
    a problem for `validate --deep`, though each sample alone is sound; clips of several
    lengths (one run) are not."""
    import shutil

    import shardcook

    assert shardcook.validate(video_run, deep=True).ok  # T' of 3, 2 and 1: one run's clips
    mixed = tmp_path / "mixed"
    shutil.copytree(video_run, mixed, ignore=shutil.ignore_patterns(".shardcook", ".nv-meta"))
    (second,) = sorted(set(_tars(video_run)) & set(_tars(frames_run)))[1:2]
    shutil.copyfile(frames_run / second, mixed / second)  # the frames of the same videos
    run_in_process(["finalize", "--encoding", "wan", str(mixed)])
    assert shardcook.validate(mixed).ok  # the first sample of the split is a clip, as it was
    report = shardcook.validate(mixed, deep=True)
    assert not report.ok
    mixing = [p for p in report.problems if "does not match sample 000000" in p]
    assert mixing and len(mixing) == len(report.problems), report.problems
    assert "key kind frame, not clip" in mixing[0]
    assert "json's processing_mode frames, not video" in mixing[0]


def test_a_clip_over_the_pixel_bound_is_skipped_as_too_large(tiny_wan, tmp_path):
    """A video whose frames, as the VAE would get them, hold more pixels than `video.max_pixels`
    is skipped as too_large with the advice, and the run goes on (a 4000 x 4000 clip at its own
    size used to end the run in torch's allocator; the bound is lowered here to keep the test
    small)."""
    videos = tmp_path / "videos"
    videos.mkdir()
    for name, h, w in (("a_small", 48, 80), ("b_large", 96, 160)):
        write_clip(videos / f"{name}.mp4", 9, h=h, w=w)
        (videos / f"{name}.json").write_text(json.dumps({"caption": name}), encoding="utf-8")
    config = tmp_path / "config.yaml"
    config.write_text(f"video:\n  max_pixels: {9 * 48 * 80}\n", encoding="utf-8")
    out = tmp_path / "out"
    args = _command(videos, out, tiny_wan, "video")
    at = args.index("--height")
    del args[at:at + 4]  # each clip at its own size
    run_in_process([*args, "--config", str(config)])
    report = json.loads((out / ".shardcook" / "report.json").read_text())
    assert report["num_written"] == 1 and report["skipped_by_reason"] == {"too_large": 1}
    (skip,) = report["skipped"]
    assert Path(skip["source"]).name == "b_large.mp4"
    assert "pass --height and --width" in skip["detail"] and "--max-frames" in skip["detail"]
    # at --height 48 --width 80 the large clip fits
    run_in_process([*_command(videos, tmp_path / "fits", tiny_wan, "video"), "--config",
                    str(config)])
    fits = json.loads((tmp_path / "fits" / ".shardcook" / "report.json").read_text())
    assert fits["num_written"] == 2
