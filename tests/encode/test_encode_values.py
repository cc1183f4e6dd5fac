"""`shardcook encode` values: equal to a direct diffusers/transformers computation on the same
pixels; docs/FORMAT.md §3 shapes, dtypes and part order; each .pth holds only its own tensor; the
manifest (§6); the empty-caption encodings; read back through shardcook.energon."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import torch

from tests.helpers.encode import TINY, encode_args, load_tensor, run_in_process, samples
from tests.helpers.raw import make_folder, manifest, report

N = 7


@pytest.fixture(scope="module")
def encoded(tiny_flux, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("encode_values")
    src = make_folder(tmp / "in", N, photos=4)
    (src / "captions" / "0003.txt").write_text("", encoding="utf-8")  # an empty caption, kept
    out = tmp / "out"
    threads = torch.get_num_threads()
    run_in_process(encode_args(tiny_flux, src, out, "--latent-mode", "mode", "--shard-size", "3",
                               "--batch-size", "2"))
    assert torch.get_num_threads() == threads  # the CPU split is undone for the caller
    return src, out


def _direct(model, src, key_index):
    """The reference: diffusers/transformers called directly on the pixels shardcook's image
    core gives for this input (same options)."""
    from diffusers import AutoencoderKL
    from shardcook.imaging import preprocess
    from transformers import AutoTokenizer, CLIPTextModel, T5EncoderModel

    img = next((src / "images").glob(f"{key_index:04d}.*"))
    caption = (src / "captions" / f"{key_index:04d}.txt").read_text(encoding="utf-8").strip()
    pixels = preprocess([img.read_bytes()], size=TINY["image_size"], mode="crop")[0].pixels
    vae = AutoencoderKL.from_pretrained(model / "vae").eval()
    x = torch.from_numpy(pixels).permute(2, 0, 1)[None].float() / 127.5 - 1.0
    with torch.no_grad():
        z = vae.encode(x).latent_dist.mode()[0]
        lat = (z - vae.config.shift_factor) * vae.config.scaling_factor
        t5_tok = AutoTokenizer.from_pretrained(model / "tokenizer_2")
        t5 = T5EncoderModel.from_pretrained(model / "text_encoder_2").eval()
        ids = t5_tok([caption], padding="max_length", max_length=TINY["t5_max_length"],
                     truncation=True, return_tensors="pt").input_ids
        prompt = t5(ids).last_hidden_state[0]
        clip_tok = AutoTokenizer.from_pretrained(model / "tokenizer")
        clip = CLIPTextModel.from_pretrained(model / "text_encoder").eval()
        cids = clip_tok([caption], padding="max_length", max_length=77, truncation=True,
                        return_tensors="pt").input_ids
        pooled = clip(cids).pooler_output[0]
    return caption, pixels, lat, prompt, pooled


def test_values_equal_direct_computation(encoded, tiny_flux):
    src, out = encoded
    got = samples(out)
    assert sorted(got) == [f"{i:010d}" for i in range(N)]
    for i in (0, 1, 3, 5):  # photos (jpg, png, webp) and a generated image; 3 has no caption
        parts = got[f"{i:010d}"]
        caption, _pixels, lat, prompt, pooled = _direct(tiny_flux, src, i)
        assert list(parts) == ["latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth",
                               "caption.txt", "meta.json"]
        assert parts["caption.txt"].decode() == caption
        ours = [load_tensor(parts[p]) for p in
                ("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth")]
        assert [tuple(t.shape) for t in ours] == [(4, 8, 8), (32, 32), (24,)]
        assert all(t.dtype == torch.float32 for t in ours)
        torch.testing.assert_close(ours[0], lat, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ours[1], prompt, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(ours[2], pooled, atol=1e-4, rtol=1e-4)
        assert lat.abs().mean() > 1e-3  # not a degenerate all-zero comparison
        meta = json.loads(parts["meta.json"])
        assert meta["size"] == [64, 64] and meta["source"].endswith(f"{i:04d}" + img_ext(src, i))
    assert caption_of(got, 3) == ""
    assert report(out)["empty_captions"] == 1


def img_ext(src, i):
    return next((src / "images").glob(f"{i:04d}.*")).suffix


def caption_of(got, i):
    return got[f"{i:010d}"]["caption.txt"].decode()


def test_each_pth_holds_only_its_own_tensor(encoded):
    _, out = encoded
    for parts in samples(out).values():
        for name in ("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth"):
            t = load_tensor(parts[name])
            assert t.is_contiguous()
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), name
            # the file's one stored storage (zip member .../data/0) is exactly this tensor
            with zipfile.ZipFile(io.BytesIO(parts[name])) as z:
                data = [i for i in z.infolist() if "/data/" in i.filename]
            assert [d.file_size for d in data] == [t.numel() * t.element_size()], name


def test_manifest_report_and_empty_encodings(encoded, tiny_flux):
    from transformers import AutoTokenizer, CLIPTextModel, T5EncoderModel

    _, out = encoded
    m = manifest(out)
    assert m["format_version"] == 1 and m["encoding"] == "preencoded"
    assert (m["scaling_factor"], m["shift_factor"], m["latent_channels"]) == (0.5, 0.25, 4)
    assert m["t5_max_length"] == 32 and m["stored_dtype"] == "fp32"
    assert m["latent_mode"] == "mode" and m["num_samples"] == N
    assert m["encoders"]["vae"] == {"source": str(tiny_flux.resolve()), "local": True,
                                    "subfolder": "vae", "tokenizer_subfolder": None,
                                    "revision": None}
    assert m["encoders"]["t5"]["subfolder"] == "text_encoder_2"
    assert m["config"]["model"]["precision"] == "fp32"
    assert m["shards"] == {"000000.tar": 3, "000001.tar": 3, "000002.tar": 1}
    stages = report(out)["stage_seconds"]
    for stage in ("input_wait", "load_encoders", "encode", "serialize", "preprocess", "write",
                  "read"):
        assert stage in stages
    assert stages["encode"] > 0
    t5_empty = np.load(out / "empty_encodings" / "t5_empty.npy")
    clip_empty = np.load(out / "empty_encodings" / "clip_empty.npy")
    assert t5_empty.shape == (1, 32, 32) and clip_empty.shape == (1, 24)
    assert t5_empty.dtype == np.float32 and clip_empty.dtype == np.float32
    with torch.no_grad():
        ids = AutoTokenizer.from_pretrained(tiny_flux / "tokenizer_2")(
            [""], padding="max_length", max_length=32, return_tensors="pt").input_ids
        ref = T5EncoderModel.from_pretrained(tiny_flux / "text_encoder_2")(ids).last_hidden_state
        cids = AutoTokenizer.from_pretrained(tiny_flux / "tokenizer")(
            [""], padding="max_length", max_length=77, return_tensors="pt").input_ids
        cref = CLIPTextModel.from_pretrained(tiny_flux / "text_encoder")(cids).pooler_output
    np.testing.assert_allclose(t5_empty, ref.numpy(), atol=1e-4)
    np.testing.assert_allclose(clip_empty, cref.numpy(), atol=1e-4)


def test_reads_back_through_shardcook_energon(encoded):
    from shardcook import validate
    from shardcook.energon import get_diffusion_loader

    _, out = encoded
    assert validate(out, deep=True).ok
    loader = get_diffusion_loader(out, batch_size=2, num_workers=0, shuffle_buffer_size=None,
                                  max_samples_per_sequence=None)
    batch = next(iter(loader))
    assert tuple(batch.latents.shape) == (2, 4, 8, 8)
    assert tuple(batch.prompt_embeds.shape) == (2, 32, 32)
    assert tuple(batch.pooled_prompt_embeds.shape) == (2, 24)


def test_default_precision_stores_bf16(tiny_flux, tmp_path):
    src = make_folder(tmp_path / "in", 2, photos=1)
    out = tmp_path / "out"
    args = [a for a in encode_args(tiny_flux, src, out) if a not in ("--precision", "fp32")]
    run_in_process([*args, "--no-finalize"])
    parts = samples(out)["0000000000"]
    for name in ("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth"):
        assert load_tensor(parts[name]).dtype == torch.bfloat16
    assert manifest(out)["stored_dtype"] == "bf16"
    # --overwrite replaces an earlier encode run (empty_encodings/ included) with another one
    run_in_process(encode_args(tiny_flux, src, out, "--no-finalize", "--overwrite"))
    assert manifest(out)["stored_dtype"] == "fp32"
    assert load_tensor(samples(out)["0000000000"]["latents.pth"]).dtype == torch.float32
    run_in_process(encode_args(tiny_flux, src, tmp_path / "o2", "--stored-dtype", "fp16",
                               "--no-finalize"))
    assert load_tensor(samples(tmp_path / "o2")["0000000001"]["latents.pth"]).dtype == torch.float16
