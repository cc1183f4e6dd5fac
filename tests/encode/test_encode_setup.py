"""`shardcook encode` setup: every source kind, single-encoder overrides, the token (file mode,
order, never written or printed), and model paths that are missing or incomplete."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.encode import encode_args, load_tensor, run_in_process, samples
from tests.helpers.raw import encode, generated, make_folder, photo, run_cli

SECRET = "hf_shardcookTESTtoken0123456789abcdef"
SECRET_ENV = "hf_shardcookENVtoken9876543210fedcba"


def _flat(model, out, *extra):
    """encode args without a source (the caller adds one)."""
    args = encode_args(model, "X", out, "--no-finalize", "--latent-mode", "mode", *extra)
    i = args.index("--input-dir")
    return args[:i] + args[i + 2:]


def test_huggingface_and_webdataset_sources(tiny_flux, tmp_path):
    import datasets
    from shardcook import ShardWriter

    datasets.Dataset.from_dict({
        "image": [{"bytes": encode(photo(i), "png"), "path": None} for i in range(3)],
        "text": [f"hf caption {i}" for i in range(3)],
    }).cast_column("image", datasets.Image()).save_to_disk(str(tmp_path / "hf"))
    run_in_process(_flat(tiny_flux, tmp_path / "o_hf", "--source-type", "huggingface",
                         "--hf-dataset", str(tmp_path / "hf")))
    with ShardWriter(tmp_path / "wds", shard_size=2) as w:
        for i in range(3):
            w.write(f"k{i}", {"jpg": encode(generated(i), "jpg"),
                              "json": json.dumps({"caption": f"wds caption {i}"}).encode()})
    run_in_process(_flat(tiny_flux, tmp_path / "o_wds", "--source-type", "webdataset",
                         "--input-path", str(tmp_path / "wds"), "--caption-column",
                         "json.caption"))
    for out, prefix in ((tmp_path / "o_hf", "hf caption"), (tmp_path / "o_wds", "wds caption")):
        got = samples(out)
        assert sorted(got) == [f"{i:010d}" for i in range(3)]
        for i, key in enumerate(sorted(got)):
            assert got[key]["caption.txt"].decode() == f"{prefix} {i}"
            assert tuple(load_tensor(got[key]["latents.pth"]).shape) == (4, 8, 8)


def _split_layout(model, root):
    """Each encoder in a folder of its own (the model itself; tokenizer beside it or in
    tokenizer/)."""
    shutil.copytree(model / "vae", root / "vae_only")
    shutil.copytree(model / "text_encoder", root / "clip_only")
    for f in (model / "tokenizer").iterdir():
        shutil.copy(f, root / "clip_only" / f.name)
    shutil.copytree(model / "text_encoder_2", root / "t5_only")
    shutil.copytree(model / "tokenizer_2", root / "t5_only" / "tokenizer")
    return root / "vae_only", root / "clip_only", root / "t5_only"


def test_single_encoder_overrides(tiny_flux, tmp_path):
    from diffusers import AutoencoderKL

    src = make_folder(tmp_path / "in", 3, photos=2)
    base = tmp_path / "base"
    run_in_process(encode_args(tiny_flux, src, base, "--latent-mode", "mode", "--no-finalize"))
    vae, clip, t5 = _split_layout(tiny_flux, tmp_path)
    # all three overridden: --model-path is never looked at, and the results are the same
    every = tmp_path / "every"
    run_in_process(encode_args(tmp_path / "no-such-model", src, every, "--latent-mode", "mode",
                               "--no-finalize", "--vae-path", str(vae), "--clip-path", str(clip),
                               "--t5-path", str(t5)))
    a, b = samples(base), samples(every)
    for key in a:
        for part in ("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth"):
            assert torch.equal(load_tensor(a[key][part]), load_tensor(b[key][part])), (key, part)
    m = json.loads((every / ".shardcook" / "manifest.json").read_text())
    assert m["encoders"]["t5"]["source"] == str(t5) and m["encoders"]["t5"]["subfolder"] is None
    assert m["encoders"]["t5"]["tokenizer_subfolder"] == "tokenizer"
    # one encoder replaced by a different VAE: only the latents change; its factors are used
    torch.manual_seed(7)
    other = AutoencoderKL(latent_channels=4, block_out_channels=(8, 8, 16, 16),
                          down_block_types=("DownEncoderBlock2D",) * 4,
                          up_block_types=("UpDecoderBlock2D",) * 4, norm_num_groups=4,
                          scaling_factor=1.0, shift_factor=None)
    other.save_pretrained(tmp_path / "other_vae")
    swapped = tmp_path / "swapped"
    run_in_process(encode_args(tiny_flux, src, swapped, "--latent-mode", "mode", "--no-finalize",
                               "--vae-path", str(tmp_path / "other_vae")))
    c = samples(swapped)
    m = json.loads((swapped / ".shardcook" / "manifest.json").read_text())
    assert (m["scaling_factor"], m["shift_factor"]) == (1.0, 0.0)
    with torch.no_grad():
        x = torch.from_numpy(__import__("shardcook.imaging", fromlist=["x"]).preprocess(
            [next((src / "images").glob("0000.*")).read_bytes()], size=64)[0].pixels)
        x = x.permute(2, 0, 1)[None].float() / 127.5 - 1
        want = other.eval().encode(x).latent_dist.mode()[0]
    torch.testing.assert_close(load_tensor(c["0000000000"]["latents.pth"]), want, atol=1e-4,
                               rtol=1e-4)
    for key in a:
        assert not torch.equal(load_tensor(a[key]["latents.pth"]),
                               load_tensor(c[key]["latents.pth"]))
        assert a[key]["prompt_embeds.pth"] == c[key]["prompt_embeds.pth"]


def test_token_file_with_loose_mode_is_refused(tiny_flux, tmp_path):
    src = make_folder(tmp_path / "in", 1, photos=1)
    token = tmp_path / "token"
    token.write_text(SECRET)
    token.chmod(0o644)
    r = run_in_process(encode_args(tiny_flux, src, tmp_path / "out", "--hf-token-file",
                                   str(token)), expect=2)
    assert f"chmod 600 {token}" in r.output and "mode 644" in r.output
    assert SECRET not in r.output
    assert not list((tmp_path / "out").glob("*.tar"))


def test_token_never_written_or_printed(tiny_flux, tmp_path):
    src = make_folder(tmp_path / "in", 2, photos=1)
    token = tmp_path / "token"
    token.write_text(SECRET + "\n")
    token.chmod(0o600)
    out = tmp_path / "out"
    r = run_cli(*[a for a in encode_args(tiny_flux, src, out) if a != "--quiet"],
                "--hf-token-file", str(token), env_extra={"HF_TOKEN": SECRET_ENV})
    assert "preencoded dataset in" in r.stderr  # the summary was printed (not --quiet)
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 10
    for text in [r.stdout, r.stderr] + [p.read_bytes().decode("latin-1") for p in files]:
        assert SECRET not in text and SECRET_ENV not in text


def test_token_order(tmp_path, monkeypatch):
    import huggingface_hub.constants as hc
    from shardcook.hftoken import resolve_token

    saved = tmp_path / "saved_token"
    saved.write_text("hf_saved")
    monkeypatch.setattr(hc, "HF_TOKEN_PATH", str(saved))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert resolve_token(None) == ("hf_saved", "saved login")
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    assert resolve_token(None) == ("hf_env", "HF_TOKEN")
    f = tmp_path / "tok"
    f.write_text("hf_file\n")
    f.chmod(0o400)
    assert resolve_token(f) == ("hf_file", "file")
    saved.unlink()
    monkeypatch.delenv("HF_TOKEN")
    assert resolve_token(None) == (None, "none")


def test_missing_model_paths_are_named(tiny_flux, tmp_path, monkeypatch):
    src = make_folder(tmp_path / "in", 1, photos=1)
    missing = tmp_path / "models" / "flux-dev"
    r = run_in_process(encode_args(missing, src, tmp_path / "o1"), expect=2)
    assert f"--model-path {str(missing)!r} does not exist" in r.output
    partial = tmp_path / "partial"
    shutil.copytree(tiny_flux, partial, ignore=shutil.ignore_patterns("text_encoder_2"))
    r = run_in_process(encode_args(partial, src, tmp_path / "o2"), expect=2)
    assert "has no text_encoder_2/ folder" in r.output and "--t5-path" in r.output
    r = run_in_process(encode_args(tiny_flux, src, tmp_path / "o3", "--clip-path",
                                   str(tmp_path / "nope" / "clip")), expect=2)
    assert "--clip-path" in r.output and "nope/clip" in r.output
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = run_in_process(encode_args(tiny_flux, src, tmp_path / "o4", "--vae-path",
                                   "shardcook-tests/no-such-vae"), expect=2)
    assert "vae encoder" in r.output and "HF_HUB_OFFLINE" in r.output
    assert "shardcook-tests/no-such-vae" in r.output


def test_failed_download_message_names_encoder_and_token_ways(monkeypatch):
    from shardcook.encoders.loading import _failed, resolve_sources

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    src = resolve_sources("black-forest-labs/FLUX.1-dev")["t5"]
    e = OSError(f"401 Client Error: access to model is restricted (token {SECRET})")
    msg = str(_failed(src, e, SECRET))
    assert "t5 encoder" in msg and "black-forest-labs/FLUX.1-dev" in msg
    for way in ("--hf-token-file", "HF_TOKEN", "huggingface-cli login"):
        assert way in msg
    assert SECRET not in msg and "***" in msg


def test_bad_model_options_stop_before_work(tiny_flux, tmp_path):
    src = make_folder(tmp_path / "in", 1, photos=1)
    for extra, words in ((["--latent-mode", "median"], "--latent-mode"),
                         (["--precision", "fp8"], "--precision"),
                         (["--image-size", "72"], "multiple of 16")):
        r = run_in_process(encode_args(tiny_flux, src, tmp_path / "o", *extra), expect=2)
        assert words in r.output
    assert not (tmp_path / "o").exists()


def test_variable_sizes_broken_images_and_groups_of_one_shape(tiny_flux, tmp_path):
    """variable mode: each latent matches its own image size (batches grouped by shape, values
    equal to encoding the image alone); a broken image is skipped with its reason."""
    import numpy as np
    from diffusers import AutoencoderKL
    from shardcook.imaging import preprocess

    src = make_folder(tmp_path / "in", 6, photos=0)
    sizes = [(96, 128), (128, 96), (96, 128), (80, 80), (128, 96), (96, 128)]
    for i, hw in enumerate(sizes):
        fmt = ("jpg", "png", "webp")[i % 3]
        (src / "images" / f"{i:04d}.{fmt}").write_bytes(encode(generated(i, hw), fmt))
    (src / "images" / "0003.jpg").write_bytes(b"not an image")
    out = tmp_path / "out"
    run_in_process(encode_args(tiny_flux, src, out, "--resize-mode", "variable", "--max-size",
                               "64", "--batch-size", "8", "--latent-mode", "mode"))
    rep = json.loads((out / ".shardcook" / "report.json").read_text())
    assert rep["skipped_by_reason"] == {"decode_error": 1}
    assert [s["key"] for s in rep["skipped"]] == ["0000000003"]
    got = samples(out)
    assert sorted(got) == ["0000000000", "0000000001", "0000000002", "0000000004", "0000000005"]
    vae = AutoencoderKL.from_pretrained(tiny_flux / "vae").eval()
    shapes = set()
    for key, parts in got.items():
        meta = json.loads(parts["meta.json"])
        lat = load_tensor(parts["latents.pth"])
        assert list(lat.shape) == [4, meta["size"][0] // 8, meta["size"][1] // 8]
        shapes.add(tuple(lat.shape))
        img = next((src / "images").glob(f"{int(key):04d}.*")).read_bytes()
        px = preprocess([img], mode="variable", max_size=64)[0].pixels
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(px)).permute(2, 0, 1)[None].float()
            x = x / 127.5 - 1
            want = (vae.encode(x).latent_dist.mode()[0] - 0.25) * 0.5
        torch.testing.assert_close(lat, want, atol=1e-4, rtol=1e-4)
    assert shapes == {(4, 6, 8), (4, 8, 6)}


def test_the_encoders_take_the_cpu_cores_and_the_image_threads_half(monkeypatch):
    from shardcook.jobs.encode.job import cpu_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert cpu_threads(None, 1) == (16, 8)
    assert cpu_threads(12, 1) == (4, 12)  # --workers splits the cores
    assert cpu_threads(20, 1) == (1, 20)  # --workers is the user's; torch keeps one thread
    assert cpu_threads(None, 4) == (4, 2)  # torchrun: four processes share the cores
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert cpu_threads(None, 4) == (1, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's torch threads are kept
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    assert cpu_threads(None, 1) == (torch.get_num_threads(), 8)


def test_a_worker_takes_its_share_of_the_cores_from_the_place_the_engine_hands_it(
        tiny_flux, tmp_path, monkeypatch):
    """The engine reads where a worker stands once (`workers.where`) and hands it to the job:
    encode's threads come from that place, not from the environment read again."""
    from shardcook.config import resolve
    from shardcook.jobs.encode.job import EncodeJob
    from shardcook.runtime.workers import Place

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")  # what the place says wins
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    v = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"),
         "model_path": str(tiny_flux), "device": "cpu"}
    job = EncodeJob(resolve(v, set(v), encode=True))
    callers = torch.get_num_threads()
    with job.running(Place("torchrun", 1, 4, local_rank=1, local_count=4, collective=True)):
        assert (torch.get_num_threads(), job.workers, job.device) == (4, 2, "cpu")
    assert torch.get_num_threads() == callers


def test_decoded_pixels_waiting_for_the_encoders_are_bounded():
    from shardcook.config import resolve
    from shardcook.jobs.encode.job import PREPARED_BYTES, prefetch_batches

    def depth(**v):
        v = {"input_dir": "photos", "output_dir": "out", **v}
        return prefetch_batches(resolve(v, set(v)), 32)

    assert depth(image_size=256) == 16  # 16 batches of 32 at 256 px: 96 MiB
    assert depth(image_size=1024) == PREPARED_BYTES // (32 * 3 * 1024 * 1024) == 5
    assert depth(image_size=4096) == 2  # never fewer than two
    assert depth(image_size=256, resize_mode="variable", max_size=2048) == 2


@pytest.mark.parametrize("name, value, message", [
    ("LOCAL_RANK", "abc", "LOCAL_RANK='abc' is not an integer"),
    ("LOCAL_RANK", "-1", "LOCAL_RANK=-1 must be 0 or more"),
    ("LOCAL_WORLD_SIZE", "abc", "LOCAL_WORLD_SIZE='abc' is not an integer"),
    ("LOCAL_WORLD_SIZE", "0", "LOCAL_WORLD_SIZE=0 must be at least 1"),
    ("RANK", "1.5", "RANK='1.5' is not an integer"),
    ("WORLD_SIZE", "", "WORLD_SIZE='' is not an integer"),
])
def test_torchrun_variables_that_are_not_counts_stop_encode_before_any_work(
        tiny_flux, tmp_path, monkeypatch, name, value, message):
    src = make_folder(tmp_path / "in", 2, photos=0)
    out = tmp_path / "out"
    monkeypatch.setenv(name, value)
    r = cli(*encode_args(tiny_flux, src, out))
    assert r.code == 2, (r.code, r.stderr, r.escaped)
    assert message in one_error_line(r) and "let torchrun set it" in r.stderr
    assert not out.exists()


def test_encode_checks_and_layout_defaults_come_with_the_config(tmp_path):
    """`resolve(..., encode=True)` fills in the layout's defaults and checks the model options
    with the other checks, before any work; a job refuses a config resolved without them."""
    from shardcook.config import resolve
    from shardcook.errors import ConfigError
    from shardcook.jobs.encode.job import EncodeJob
    from shardcook.layouts import LAYOUTS

    def cfg(encode=True, **v):
        v = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"), **v}
        return resolve(v, set(v), encode=encode)

    primus, bridge = cfg(), cfg(layout="megatron-bridge")
    assert (primus.model.precision, primus.model.latent_mode) == ("bf16", "sample")
    assert (bridge.model.precision, bridge.model.latent_mode) == ("fp32", "mode")
    assert cfg(layout="megatron-bridge", precision="bf16").model.precision == "bf16"  # given wins
    assert cfg(encode=False).model.precision is None  # raw's config: no encode defaults
    # --layout is resolved to its Layout once, here; the config records the name
    assert primus.layout is LAYOUTS["primus"] and bridge.layout is LAYOUTS["megatron-bridge"]
    assert cfg(encode=False).layout is None
    assert set(bridge.to_dict()) == set(cfg(encode=False).to_dict())
    assert bridge.to_dict()["model"]["layout"] == "megatron-bridge"
    for options, message in [({"precision": "fp8"}, "--precision must be one of"),
                             ({"layout": "raw"}, "--layout must be one of"),
                             ({"image_size": 100}, "--image-size must be a multiple of 16"),
                             ({"layout": "megatron-bridge", "latent_mode": "resample"},
                              "--latent-mode resample is for --layout primus")]:
        with pytest.raises(ConfigError, match=message):
            cfg(**options)
    with pytest.raises(ConfigError, match="resolved for encode"):
        EncodeJob(cfg(encode=False))
    assert not (tmp_path / "out").exists()
