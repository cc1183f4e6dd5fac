"""`shardcook chatml` with videos and audio: generated MP4/WebM clips and WAV/FLAC files, each
layout finalized, validated and read back through Energon with Bridge's decoding; bad media are
skipped with their reasons."""

from __future__ import annotations

import json

import pytest
import yaml
from shardcook import validate
from shardcook.jobs.chatml.media import bounded_size

from tests.helpers.chatml import (
    SPLIT_ARGS,
    energon_samples,
    energon_twin,
    media_of,
    read_all,
    turns,
    turns_of,
    write_images,
    write_jsonl,
)
from tests.helpers.chatml_media import (
    bridge_decode_videos,
    expected_timestamps,
    write_audio,
    write_clip,
)
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import manifest, report, run_cli
from tests.helpers.shards import energon_prepare


def video_turns(n_videos: int, n_images: int = 0) -> list[dict]:
    return [{"from": "human",
             "value": "<image>" * n_images + "<video>" * n_videos + "Was passiert?"},
            {"from": "gpt", "value": "Ein Film."}]


def through_energon(out, tmp_path) -> dict:
    """Every sample through Energon's own loader; equal to what our reader sees."""
    theirs = energon_twin(out, tmp_path / "energon")
    ref = energon_prepare(theirs, *SPLIT_ARGS)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    samples = energon_samples(theirs)
    assert samples == read_all(out)
    return samples


def test_video_frames_layout(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    write_clip(src / "long.mp4", seconds=3, fps=30)        # 6 grid frames > --max-frames 4
    write_clip(src / "short.webm", seconds=1, fps=10, fmt="webm")
    write_clip(src / "sparse.mp4", seconds=3, fps=1)       # 3 frames where 6 are asked
    (src / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 4)
    names = write_images(src, 1, photos=1)
    records = [
        {"id": "a", "video": "long.mp4", "conversation": video_turns(1)},
        {"id": "b", "videos": ["short.webm", "long.mp4"], "image": names[0],
         "conversation": video_turns(2, 1)},
        {"id": "c", "video": "sparse.mp4", "conversation": video_turns(1)},
        {"id": "d", "video": "broken.mp4", "conversation": video_turns(1)},
        {"id": "e", "video": "long.mp4", "conversation": video_turns(2)},
        {"id": "f", "video": "short.webm", "conversation": [
            {"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "Und?"}]},
            {"role": "assistant", "content": "Nichts."}]},
    ]
    jsonl = write_jsonl(src / "d.jsonl", records)
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--val-fraction", "0",
            "--max-frames", "4", "--max-pixels", "1200", "--quiet")
    rep = report(out)
    assert rep["skipped_by_reason"] == {"media_count_mismatch": 1, "too_few_frames": 1,
                                        "video_decode_error": 1}
    details = {s["source"].rsplit(":", 1)[1]: s["detail"] for s in rep["skipped"]}
    assert details["3"].startswith("video 0: 3 frame(s)") and "of the 6 frames" in details["3"]
    assert details["5"] == "2 video part(s) in the conversation, 1 video(s)"
    dataset = yaml.safe_load((out / ".nv-meta" / "dataset.yaml").read_text())
    assert dataset["field_map"] == {"imgs": "jpgs", "videos": "videos",
                                    "conversation": "conversation.json"}
    assert validate(out).ok
    samples = through_energon(out, tmp_path)
    assert sorted(samples) == ["train-000000", "train-000001", "train-000005"]
    h, w = bounded_size(48, 64, 1200)
    want = {"long.mp4": expected_timestamps(3, 2, 4), "short.webm": expected_timestamps(1, 2, 4)}
    totals = {"frames": 0, "videos": 0}
    for key, clips in (("train-000000", ["long.mp4"]),
                       ("train-000001", ["short.webm", "long.mp4"]),
                       ("train-000005", ["short.webm"])):
        parts = samples[key]
        assert list(parts)[-2:] == ["videos", "conversation.json"]
        media = media_of(parts["conversation.json"])
        videos = bridge_decode_videos(parts["videos"])
        assert media["num_videos"] == len(videos) == len(clips)
        assert media["num_frames"] == sum(len(v) for v in videos)
        for frames, rec, clip in zip(videos, media["videos"], clips, strict=True):
            assert rec["timestamps"] == want[clip]
            assert rec["frames"] == len(frames) and (rec["height"], rec["width"]) == (h, w)
            assert rec["pixels"] == h * w
            fps = 30 if clip == "long.mp4" else 10
            for frame, t in zip(frames, rec["timestamps"], strict=True):
                assert frame.shape == (h, w, 3)  # decodes to the stored size
                grey = min(4 * round(t * fps), 255)  # the source frame at that time
                assert abs(float(frame.mean()) - grey) < 6, (clip, t, frame.mean(), grey)
        totals["frames"] += media["num_frames"]
        totals["videos"] += media["num_videos"]
    assert turns_of(samples["train-000005"]["conversation.json"])[0]["content"][0] == {
        "type": "video"}
    assert media_of(samples["train-000001"]["conversation.json"])["num_images"] == 1
    m = manifest(out)["media_totals"]
    assert (m["frames"], m["videos"], m["images"]) == (totals["frames"], totals["videos"], 1)
    assert m["frame_pixels"] == totals["frames"] * h * w


def test_mp4_layout_and_audio(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    write_clip(src / "a.mp4", seconds=1, fps=8)
    write_clip(src / "b.webm", seconds=1, fps=8, fmt="webm")
    write_audio(src / "a.wav", seconds=0.5, rate=16000)
    write_audio(src / "b.wav", seconds=1.25, rate=8000)
    write_audio(src / "c.flac", seconds=1, rate=16000)
    write_audio(src / "silent.wav", seconds=0)
    rows = [("a.mp4", "a.wav"), ("a.mp4", "b.wav"), ("b.webm", "a.wav"),
            (["a.mp4", "a.mp4"], "a.wav"), ("a.mp4", "silent.wav"), ("a.mp4", "c.flac")]
    records = [{"id": f"r{i}", "video": v, "audio": a,
                "conversation": video_turns(len(v) if isinstance(v, list) else 1)}
               for i, (v, a) in enumerate(rows)]
    jsonl = write_jsonl(src / "d.jsonl", records)
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--val-fraction", "0",
            "--video-layout", "mp4", "--quiet")
    rep = report(out)
    assert rep["skipped_by_reason"] == {"audio_format": 1, "empty_audio": 1, "not_mp4": 1,
                                        "video_count": 1}
    dataset = yaml.safe_load((out / ".nv-meta" / "dataset.yaml").read_text())
    assert dataset["field_map"] == {"videos": "video.mp4", "audio": "audio.wav",
                                    "conversation": "conversation.json"}
    samples = through_energon(out, tmp_path)
    assert sorted(samples) == ["train-000000", "train-000001"]
    for key, wav, rate, seconds in (("train-000000", "a.wav", 16000, 0.5),
                                    ("train-000001", "b.wav", 8000, 1.25)):
        parts = samples[key]
        assert list(parts) == ["video.mp4", "audio.wav", "conversation.json"]
        assert parts["video.mp4"] == (src / "a.mp4").read_bytes()  # unchanged
        assert parts["audio.wav"] == (src / wav).read_bytes()
        media = media_of(parts["conversation.json"])
        assert media["audio"] == [{"format": "wav", "sample_rate": rate, "duration": seconds}]
        assert media["videos"][0]["frames"] == 8 and media["num_videos"] == 1


def test_flac_dataset(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    names = write_images(src, 1, photos=0)
    write_audio(src / "c.flac", seconds=0.75, rate=16000)
    records = [{"image": names[0], "audio": "c.flac", "conversation": [
        {"role": "user", "content": [{"type": "image"}, {"type": "audio"}, "Hörst du das?"]},
        {"role": "assistant", "content": "Ja."}]}]
    jsonl = write_jsonl(src / "d.jsonl", records)
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--val-fraction", "0",
            "--quiet")
    dataset = yaml.safe_load((out / ".nv-meta" / "dataset.yaml").read_text())
    assert dataset["field_map"] == {"imgs": "image.jpg", "audio": "audio.flac",
                                    "conversation": "conversation.json"}
    (parts,) = through_energon(out, tmp_path).values()
    assert parts["audio.flac"] == (src / "c.flac").read_bytes()
    assert media_of(parts["conversation.json"])["audio"][0]["duration"] == 0.75


def test_question_answer_hf_with_val_split_and_row_slices(tmp_path):
    import datasets

    from tests.helpers.raw import encode, generated

    def split(n, tag):
        return datasets.Dataset.from_dict({
            "image": [{"bytes": encode(generated(i, (40, 56)), "png"), "path": None}
                      for i in range(n)],
            "question": [f"{tag} question {i}?" for i in range(n)],
            "answer": [f"{tag} answer {i}" if i != 2 else "" for i in range(n)],
        }, features=datasets.Features({"image": datasets.Image(),
                                       "question": datasets.Value("string"),
                                       "answer": datasets.Value("string")}))

    folder = tmp_path / "hf"
    datasets.DatasetDict({"train": split(8, "t"), "validation": split(5, "v")}).save_to_disk(
        str(folder))
    out = tmp_path / "out"
    run_cli("chatml", "--hf-dataset", str(folder), "--question-column", "question",
            "--answer-column", "answer", "--image-column", "image", "--system-prompt",
            "Du bist Arzt.", "--hf-val-split", "validation", "--train-rows", "6",
            "--val-rows", "3", "--output-dir", str(out), "--quiet")
    rep = report(out)
    assert rep["num_inputs"] == 9
    assert rep["skipped_by_reason"] == {"bad_conversation": 2}  # row 2 of each: no answer
    samples = read_all(out)
    assert sorted(samples) == [f"train-{i:06d}" for i in (0, 1, 3, 4, 5)] + [
        "val-000000", "val-000001"]
    conv = turns_of(samples["val-000001"]["conversation.json"])
    assert conv == [
        {"role": "system", "content": [{"type": "text", "text": "Du bist Arzt."}]},
        {"role": "user", "content": [{"type": "image"},
                                     {"type": "text", "text": "v question 1?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "v answer 1"}]}]
    m = manifest(out)
    assert m["source"]["rows"] == {"train": 6, "val": 3}
    assert m["source"]["val_split"] == "validation"
    assert m["source"]["split_sizes"] == {"train": 6, "val": 3}
    assert validate(out).ok


def test_config_file_and_print_config(tmp_path):
    src = tmp_path / "in"
    names = write_images(src, 2, photos=0)
    jsonl = write_jsonl(src / "d.jsonl", [{"image": n, "conversation": turns(1)} for n in names])
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({
        "source": {"source_type": "jsonl", "input_path": str(jsonl)},
        "output": {"output_dir": str(tmp_path / "out"), "quiet": True},
        "chatml": {"val_fraction": 0.0, "max_pixels": 1000, "video_fps": 4}}))
    printed = yaml.safe_load(run_cli("chatml", "--config", str(cfg), "--max-frames", "8",
                                     "--print-config").stdout)
    assert printed["chatml"]["max_pixels"] == 1000 and printed["chatml"]["max_frames"] == 8
    assert printed["chatml"]["video_fps"] == 4.0 and printed["image"]["max_pixels"] > 1000
    run_cli("chatml", "--config", str(cfg))
    for parts in read_all(tmp_path / "out").values():
        (size,) = media_of(parts["conversation.json"])["images"]
        assert size["pixels"] <= 1000
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"chatml": {"video_layout": "gif"}}))
    r = run_cli("chatml", "--config", str(bad), "--input", str(jsonl), "--output-dir",
                str(tmp_path / "o2"), check=False)
    assert r.returncode == 2 and "--video-layout must be one of frames, mp4" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "o2").exists()


def test_resume_and_torchrun_are_byte_identical(tmp_path):
    import sys

    from tests.helpers.raw import shard_hashes

    src = tmp_path / "in"
    src.mkdir()
    write_clip(src / "v.mp4", seconds=2, fps=12)
    names = write_images(src, 2, photos=0)
    records = [{"id": f"s{i}", "video": "v.mp4", "image": names[i % 2],
                "conversation": video_turns(1, 1 if i != 5 else 2)} for i in range(12)]
    jsonl = write_jsonl(src / "d.jsonl", records)
    common = ["chatml", "--input", str(jsonl), "--shard-size", "3", "--val-fraction", "0.3",
              "--workers", "1", "--max-frames", "3", "--quiet"]
    one, two, three = tmp_path / "one", tmp_path / "two", tmp_path / "three"
    run_cli(*common, "--output-dir", str(one))
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2")
    run_cli(*common, "--output-dir", str(two), prefix=torchrun)
    assert shard_hashes(two) == shard_hashes(one)
    # resume: a run cut off after its first units finishes with the same bytes
    run_cli(*common, "--output-dir", str(three), "--no-finalize")
    first = max(three.glob("*.tar"))
    first.unlink()
    for marker in sorted((three / ".shardcook" / "progress").glob("*"))[-1:]:
        marker.unlink()
    r = run_cli(*common, "--output-dir", str(three))
    assert report(three)["units"]["resumed"] >= 1, r.stderr
    assert shard_hashes(three) == shard_hashes(one)
    for name in (".info.json", "split.yaml", "dataset.yaml"):
        assert (three / ".nv-meta" / name).read_bytes() == (one / ".nv-meta" / name).read_bytes()
    assert json.loads((one / ".shardcook" / "manifest.json").read_text())["media_totals"] == \
        json.loads((three / ".shardcook" / "manifest.json").read_text())["media_totals"]


@pytest.mark.parametrize("fps", ["inf", "-inf", "nan", "0", "-2", "1e308", "5000"])
def test_video_fps_that_cannot_work_is_refused_before_any_work(tmp_path, fps):
    write_clip(tmp_path / "clip.mp4", seconds=1.0, fps=8)
    jsonl = write_jsonl(tmp_path / "data.jsonl",
                        [{"video": "clip.mp4", "conversations": video_turns(1)}])
    out = tmp_path / "out"
    r = cli("chatml", "--input", jsonl, "--output-dir", out, "--video-fps", fps, "--quiet")
    assert r.code == 2, (r.code, r.stderr, r.escaped)
    assert "--video-fps must be above 0 and at most 1000" in one_error_line(r)
    assert not out.exists()
    cfg = tmp_path / "c.yaml"
    yaml_fps = {"inf": ".inf", "-inf": "-.inf", "nan": ".nan"}.get(fps, fps)
    cfg.write_text(f"chatml:\n  video_fps: {yaml_fps}\n")
    r = cli("chatml", "--config", cfg, "--input", jsonl, "--output-dir", out)
    assert r.code == 2 and "--video-fps must be" in one_error_line(r) and not out.exists()


def test_frames_under_bridges_mp4s_part_name(tmp_path):
    """`--video-frames-part mp4s`: the same frames as the `videos` part, under the name
    Megatron-Bridge's VALOR32K recipe maps (`field_map: {videos: mp4s}`); validate and Energon
    read it; a damaged one is a validation problem naming it."""
    src = tmp_path / "in"
    src.mkdir()
    write_clip(src / "clip.mp4", seconds=2, fps=8)
    jsonl = write_jsonl(src / "d.jsonl", [
        {"id": str(i), "video": "clip.mp4", "conversation": video_turns(1)} for i in range(2)])
    outs = {}
    for part in ("videos", "mp4s"):
        outs[part] = tmp_path / part
        run_cli("chatml", "--input", str(jsonl), "--output-dir", str(outs[part]),
                "--val-fraction", "0", "--video-frames-part", part, "--quiet")
    dataset = yaml.safe_load((outs["mp4s"] / ".nv-meta" / "dataset.yaml").read_text())
    assert dataset["field_map"]["videos"] == "mp4s"
    assert validate(outs["mp4s"], deep=True).ok
    theirs, ours = through_energon(outs["mp4s"], tmp_path), read_all(outs["videos"])
    assert sorted(theirs) == sorted(ours) == ["train-000000", "train-000001"]
    for key, parts in theirs.items():
        assert set(parts) == {"mp4s", "conversation.json"}
        assert parts["mp4s"] == ours[key]["videos"]
        assert [len(v) for v in bridge_decode_videos(parts["mp4s"])] == [4]
    from shardcook import ShardWriter, finalize

    broken = tmp_path / "broken"
    with ShardWriter(broken, shard_size=2, prefix="train-shard-") as w:
        w.write("train-000000", {"mp4s": b"not a pickle", "conversation.json": b"[]"})
    finalize(broken, encoding="chatml", validate=False)
    problems = validate(broken).problems
    assert any("part mp4s:" in p for p in problems), problems


@pytest.mark.parametrize("extra, message", [
    (["--video-frames-part", "mkvs"], "--video-frames-part must be one of videos, mp4s"),
    (["--video-frames-part", "mp4s", "--video-layout", "mp4"], "drop it for --video-layout mp4"),
])
def test_video_frames_part_that_cannot_work(tmp_path, extra, message):
    write_clip(tmp_path / "clip.mp4", seconds=1.0, fps=8)
    jsonl = write_jsonl(tmp_path / "data.jsonl",
                        [{"video": "clip.mp4", "conversations": video_turns(1)}])
    r = cli("chatml", "--input", jsonl, "--output-dir", tmp_path / "out", *extra)
    assert r.code == 2 and message in one_error_line(r) and not (tmp_path / "out").exists()
