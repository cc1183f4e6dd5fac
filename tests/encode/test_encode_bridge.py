"""`shardcook encode --layout megatron-bridge`: samples Megatron-Bridge's FLUX recipe reads.

The reference computation and the task encoder below replicate Megatron-Bridge's own code:
`examples/diffusion/recipes/flux/prepare_energon_dataset_flux.py` (`_encode_image_latents`,
`_encode_text_flux`, the sample dict it writes) and
`src/megatron/bridge/diffusion/data/flux/flux_taskencoder.py` (`cook`, `encode_sample`, `batch`).
"""

from __future__ import annotations

import io
import json
import pickle
import tarfile
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import shardcook
import torch
import torch.nn.functional as F
from shardcook.energon import UnsafeSampleError, cook_bridge_crude, load_pickled_tensors

from tests.helpers.encode import TINY, encode_args, load_tensor, run_in_process, samples
from tests.helpers.energon import Evil
from tests.helpers.raw import make_folder, manifest

N = 5
BRIDGE = ("--layout", "megatron-bridge")


@pytest.fixture(scope="module")
def bridge_encoded(tiny_flux, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("encode_bridge")
    src = make_folder(tmp / "in", N, photos=3)
    out = tmp / "out"
    run_in_process(encode_args(tiny_flux, src, out, *BRIDGE, "--shard-size", "3",
                               "--batch-size", "2"))
    return src, out


# ---- Bridge's script, replicated (prepare_energon_dataset_flux.py) ---------------------------


def _bridge_reference(model: Path, pixels: np.ndarray, caption: str, *, mask: bool = True):
    """`_encode_image_latents(deterministic_latents=True)` and `_encode_text_flux` as Bridge
    writes them: fp32 encoders, pixels / 255 * 2 - 1, `latent_dist.mode()` unscaled, T5 with
    the attention mask (`mask=False` only to show the mask matters), CLIP pooled at 77."""
    from diffusers import AutoencoderKL
    from transformers import AutoTokenizer, CLIPTextModel, T5EncoderModel

    vae = AutoencoderKL.from_pretrained(model / "vae", torch_dtype=torch.float32).eval()
    t5_tok = AutoTokenizer.from_pretrained(model / "tokenizer_2")
    t5 = T5EncoderModel.from_pretrained(model / "text_encoder_2", dtype=torch.float32).eval()
    clip_tok = AutoTokenizer.from_pretrained(model / "tokenizer")
    clip = CLIPTextModel.from_pretrained(model / "text_encoder", dtype=torch.float32).eval()
    with torch.no_grad():
        image = pixels.astype(np.float32) / 255.0
        image = image * 2.0 - 1.0
        x = torch.from_numpy(image).permute(2, 0, 1).unsqueeze(0).to(dtype=vae.dtype)
        latents = vae.encode(x).latent_dist.mode()[0]
        caption = caption.strip()
        t5_inputs = t5_tok(caption, max_length=TINY["t5_max_length"], padding="max_length",
                           truncation=True, return_tensors="pt", return_attention_mask=True)
        t5_embeds = t5(input_ids=t5_inputs["input_ids"],
                       attention_mask=t5_inputs["attention_mask"] if mask else None
                       ).last_hidden_state[0]
        clip_inputs = clip_tok(caption, max_length=77, padding="max_length", truncation=True,
                               return_tensors="pt")
        pooled = clip(input_ids=clip_inputs["input_ids"]).pooler_output[0]
    return latents, t5_embeds, pooled


def _our_pixels(src: Path, i: int) -> np.ndarray:
    """The pixels shardcook's image core gives this input (the encoders' input on both sides)."""
    from shardcook.imaging import preprocess

    img = next((src / "images").glob(f"{i:04d}.*"))
    return preprocess([img.read_bytes()], size=TINY["image_size"], mode="crop")[0].pixels


def test_tensors_equal_bridges_own_computation(bridge_encoded, tiny_flux):
    src, out = bridge_encoded
    got = samples(out)
    assert sorted(got) == [f"{i:010d}" for i in range(N)]
    for i in (0, 2, 4):  # photos (jpg, webp) and a generated image
        key = f"{i:010d}"
        parts = got[key]
        assert list(parts) == ["pth", "pickle", "json"]
        caption = (src / "captions" / f"{i:04d}.txt").read_text(encoding="utf-8").strip()
        lat, t5, pooled = _bridge_reference(tiny_flux, _our_pixels(src, i), caption)
        ours_lat = load_tensor(parts["pth"])
        emb = load_pickled_tensors(parts["pickle"], key=key, part="pickle")
        assert sorted(emb) == ["pooled_prompt_embeds", "prompt_embeds"]
        ours = (ours_lat, emb["prompt_embeds"], emb["pooled_prompt_embeds"])
        assert [tuple(t.shape) for t in ours] == [(4, 8, 8), (32, 32), (24,)]
        assert all(t.dtype == torch.float32 for t in ours)
        for mine, theirs in zip(ours, (lat, t5, pooled), strict=True):
            torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=1e-5)
        # the comparison can fail: without the mask T5 differs, and scaling changes latents
        _, t5_unmasked, _ = _bridge_reference(tiny_flux, _our_pixels(src, i), caption,
                                              mask=False)
        assert (t5_unmasked - t5).abs().max() > 1e-3
        assert lat.abs().mean() > 1e-3
        meta = json.loads(parts["json"])
        assert {k: meta[k] for k in ("processed_height", "processed_width", "caption",
                                     "deterministic_latents", "model_version",
                                     "vae_normalization")} == {
            "processed_height": 64, "processed_width": 64, "caption": caption,
            "deterministic_latents": True, "model_version": "flux", "vae_normalization": "[-1, 1]"}
        assert meta["resize_settings"]["target_size"] == [64, 64]
        assert meta["image_path"] == meta["source"] and meta["source"].startswith(str(src))
        assert (meta["scaling_factor"], meta["shift_factor"]) == (0.5, 0.25)
        assert meta["latent_mode"] == "mode" and meta["orig_size"] and meta["crop"] is not None


def test_pickle_holds_only_its_own_tensors(bridge_encoded):
    _, out = bridge_encoded
    for key, parts in samples(out).items():
        emb = load_pickled_tensors(parts["pickle"], key=key, part="pickle")
        for t in emb.values():  # no view into a batch: the pickled storage is this tensor
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size()


def test_the_same_input_gives_the_same_shard_bytes(bridge_encoded, tiny_flux, tmp_path):
    """torch keys a pickled storage by its memory address; the `pickle` part must not depend on
    it, or no two runs (nor a resumed one) write the same shards."""
    src, out = bridge_encoded
    again = tmp_path / "again"
    run_in_process(encode_args(tiny_flux, src, again, *BRIDGE, "--shard-size", "3",
                               "--batch-size", "2"))
    shards = sorted(p.name for p in out.glob("*.tar"))
    assert shards == sorted(p.name for p in again.glob("*.tar"))
    for name in shards:
        assert (out / name).read_bytes() == (again / name).read_bytes(), name


def test_manifest_records_the_layout_and_resume_with_another_is_refused(bridge_encoded,
                                                                        tiny_flux):
    src, out = bridge_encoded
    m = manifest(out)
    assert m["encoding"] == "bridge-flux" and m["config"]["model"]["layout"] == "megatron-bridge"
    assert m["latents_scaled"] is False and m["t5_attention_mask"] is True
    assert m["precision"] == "fp32" and m["latent_mode"] == "mode"
    before = {p.name: p.read_bytes() for p in out.glob("*.tar")}
    r = run_in_process(encode_args(tiny_flux, src, out, "--shard-size", "3", "--batch-size", "2"),
                       expect=2)
    assert "encoding: bridge-flux -> preencoded" in r.output
    assert {p.name: p.read_bytes() for p in out.glob("*.tar")} == before


def test_layout_typo_is_one_sentence(tiny_flux, tmp_path):
    src = make_folder(tmp_path / "in", 1, photos=1)
    r = run_in_process(encode_args(tiny_flux, src, tmp_path / "out", "--layout", "megatron"),
                       expect=2)
    assert r.output.strip() == ("error: --layout must be one of primus, megatron-bridge, "
                                "mlperf, wan, automodel, not 'megatron'.")
    r = run_in_process(encode_args(tiny_flux, src, tmp_path / "out", *BRIDGE, "--latent-mode",
                                   "resample"), expect=2)
    assert r.output.strip() == ("error: --latent-mode resample is for --layout primus; "
                                "megatron-bridge stores one latent: mode or sample.")
    assert not (tmp_path / "out").exists()


# ---- Bridge's task encoder, replicated (flux_taskencoder.py) ---------------------------------


def _bridge_cook(sample: dict) -> dict:
    """Bridge's `cook`: the three decoded parts plus Energon's basic keys."""
    from megatron.energon.task_encoder.cooking import basic_sample_keys

    return dict(**basic_sample_keys(sample), json=sample["json"], pth=sample["pth"],
                pickle=sample["pickle"])


def _bridge_encode_sample(sample: dict) -> dict:
    """Bridge's `encode_sample` without context parallelism, returning its fields as a dict."""
    image_latent, text_embeddings = sample["pth"], sample["pickle"]
    if torch.isnan(image_latent).any() or torch.isinf(image_latent).any():
        raise AssertionError("Bridge would skip this sample (nan/inf)")
    if torch.max(torch.abs(image_latent)) > 1e3:
        raise AssertionError("Bridge would skip this sample (|latent| > 1e3)")
    _channels, H, W = image_latent.shape
    prompt_embeds = text_embeddings.get("prompt_embeds", text_embeddings.get("t5_embeds"))
    pooled_prompt_embeds = text_embeddings.get("pooled_prompt_embeds",
                                               text_embeddings.get("clip_embeds"))
    text_max_len = 512
    if prompt_embeds.shape[0] < text_max_len:
        prompt_embeds = F.pad(prompt_embeds, (0, 0, 0, text_max_len - prompt_embeds.shape[0]))
    else:
        prompt_embeds = prompt_embeds[:text_max_len]
    seq_len_q = (H // 2) * (W // 2)
    text_ids = torch.zeros(prompt_embeds.shape[0], 3, dtype=torch.bfloat16)
    text_ids[:, 0] = torch.arange(prompt_embeds.shape[0], dtype=torch.bfloat16)
    return {"__key__": sample["__key__"], "video": image_latent,
            "context_embeddings": prompt_embeds, "pooled_prompt_embeds": pooled_prompt_embeds,
            "text_ids": text_ids, "latent_shape": torch.tensor([H, W], dtype=torch.int32),
            "loss_mask": torch.ones(seq_len_q, dtype=torch.bfloat16),
            "original_metadata": sample["json"]}


def _bridge_like_batches(root: Path, *, safe: bool) -> list[dict]:
    """Every batch of 2 through Energon with Bridge's cooker and encode_sample; `safe` swaps
    Energon's default decoder (Bridge's) for shardcook's `cook_bridge_crude` on raw bytes."""
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        WorkerConfig,
        get_loader,
        get_train_dataset,
        stateless,
    )

    class BridgeLikeFluxTaskEncoder(DefaultTaskEncoder):
        cookers: ClassVar = [Cooker(stateless(cook_bridge_crude if safe else _bridge_cook))]
        if safe:
            decoder = None

        @stateless
        def encode_sample(self, sample):
            return _bridge_encode_sample(sample)

        @stateless
        def batch(self, samples):  # Bridge's `batch` without packing
            def stack(name: str) -> torch.Tensor:
                return torch.stack([s[name] for s in samples])

            return {"keys": [s["__key__"] for s in samples], "latents": stack("video"),
                    "prompt_embeds": stack("context_embeddings"),
                    "pooled_prompt_embeds": stack("pooled_prompt_embeds"),
                    "text_ids": stack("text_ids"), "latent_shape": stack("latent_shape"),
                    "image_metadata": [s["original_metadata"] for s in samples]}

    ds = get_train_dataset(root, batch_size=2, shuffle_buffer_size=None,
                           max_samples_per_sequence=None, repeat=False,
                           worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
                           task_encoder=BridgeLikeFluxTaskEncoder())
    return list(get_loader(ds))


def test_loads_through_energon_with_bridges_task_encoder(bridge_encoded):
    _, out = bridge_encoded
    plain = _bridge_like_batches(out, safe=False)
    keys = [k for b in plain for k in b["keys"]]
    assert sorted(keys) == [f"{i:010d}" for i in range(N)]
    b = plain[0]
    assert tuple(b["latents"].shape) == (2, 4, 8, 8) and b["latents"].dtype == torch.float32
    assert tuple(b["prompt_embeds"].shape) == (2, 512, 32)
    assert tuple(b["pooled_prompt_embeds"].shape) == (2, 24)
    assert b["latent_shape"].tolist() == [[8, 8], [8, 8]]
    assert b["image_metadata"][0]["processed_height"] == 64
    # shardcook's safe cooker gives Bridge the very same values
    safe = _bridge_like_batches(out, safe=True)
    for x, y in zip(plain, safe, strict=True):
        assert x["keys"] == y["keys"] and x["image_metadata"] == y["image_metadata"]
        for name in ("latents", "prompt_embeds", "pooled_prompt_embeds", "text_ids"):
            assert torch.equal(x[name], y[name])


def test_shardcook_loader_validate_info_preview(bridge_encoded, tiny_flux, tmp_path):
    from PIL import Image
    from shardcook.energon import get_diffusion_loader

    _, out = bridge_encoded
    assert shardcook.validate(out, deep=True).ok
    w = get_diffusion_loader(out, batch_size=2, num_workers=0, shuffle_buffer_size=None,
                             max_samples_per_sequence=None, repeat=False)
    batch = next(iter(w.loader))
    first = samples(out)[batch.__key__[0]]
    assert torch.equal(batch.latents[0], load_tensor(first["pth"]))
    assert batch.captions[0] == json.loads(first["json"])["caption"]
    r = run_in_process(["info", str(out)])
    assert "float32[4, 8, 8]" in r.output
    assert "prompt_embeds float32[32, 32], pooled_prompt_embeds float32[24]" in r.output
    png = tmp_path / "sheet.png"
    run_in_process(["preview", str(out), "--model-path", str(tiny_flux), "--out", str(png),
                    "--count", "2"])
    assert Image.open(png).size[0] > 0


# ---- a pickle part that would run code -------------------------------------------------------


def _with_evil_pickle(out: Path, dest: Path, target: Path) -> Path:
    """A copy of the dataset whose sample 1 carries a pickle that would create `target`."""
    import shutil

    shutil.copytree(out, dest)
    shard = dest / "000000.tar"
    members = []
    with tarfile.open(shard) as tar:
        for m in tar.getmembers():
            data = tar.extractfile(m).read()
            if m.name == "0000000001.pickle":
                data = pickle.dumps({"prompt_embeds": Evil(target)})
            members.append((m, data))
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tar:
        for m, data in members:
            m.size = len(data)
            tar.addfile(m, io.BytesIO(data))
    shardcook.finalize(dest, force=True)
    return dest


def test_malicious_pickle_is_refused_by_validate_and_the_cooker(bridge_encoded, tmp_path):
    from megatron.energon import WorkerConfig, reraise_exception
    from megatron.energon.errors import FatalSampleError
    from shardcook.energon import get_diffusion_loader

    _, out = bridge_encoded
    target = tmp_path / "pwned"
    evil = _with_evil_pickle(out, tmp_path / "evil", target)
    report = shardcook.validate(evil, deep=True)
    assert not report.ok
    assert any("0000000001 part pickle holds more than tensors" in p and "io.open" in p
               for p in report.problems), report.problems
    strict = WorkerConfig(rank=0, world_size=1, num_workers=0,
                          global_error_handler=reraise_exception)
    w = get_diffusion_loader(evil, batch_size=2, num_workers=0, repeat=False,
                             shuffle_buffer_size=None, max_samples_per_sequence=None,
                             worker_config=strict)
    # refused once, as a FatalSampleError Energon neither retries nor hands to its handler
    with pytest.raises(FatalSampleError, match=r"'0000000001'.*'pickle'.*io\.open") as e:
        list(w.loader)
    assert isinstance(e.value.__context__, UnsafeSampleError)
    assert not target.exists()


def test_masked_t5_equals_running_every_padded_position(tiny_flux):
    """At 512 (Bridge's length) the positions far past the last real token are not run but
    repeated; the result equals T5 run over all 512 positions with the mask, per caption."""
    from shardcook.encoders.flux import FluxEncoders
    from transformers import AutoTokenizer, T5EncoderModel

    enc = FluxEncoders.load(model_path=str(tiny_flux), precision="fp32", device="cpu",
                            t5_max_length=512, latent_mode="mode", t5_attention_mask=True)
    captions = ["a red circle", "a small blue square on a white background " * 5, ""]
    t5 = enc.encode_text(captions)["prompt_embeds"]
    tok = AutoTokenizer.from_pretrained(tiny_flux / "tokenizer_2")
    model = T5EncoderModel.from_pretrained(tiny_flux / "text_encoder_2").eval()
    assert model.config.relative_attention_max_distance < 512  # so the shortcut is exercised
    with torch.no_grad():
        for j, caption in enumerate(captions):
            x = tok(caption, max_length=512, padding="max_length", truncation=True,
                    return_tensors="pt")
            ref = model(input_ids=x["input_ids"], attention_mask=x["attention_mask"])
            torch.testing.assert_close(t5[j], ref.last_hidden_state[0], atol=1e-6, rtol=1e-6)
