"""Datasets in Primus's documented layout are first-class, Primus's training snippets run
unchanged (real Energon `get_train_dataset` + `get_loader` + the wrapper), and resample mode
draws a fresh latent every epoch that survives save/restore exactly."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from megatron.energon import WorkerConfig, get_loader, get_train_dataset, reraise_exception
from PIL import Image
from shardcook.energon import (
    EncodedDiffusionTaskEncoder,
    MegatronDataloaderWrapper,
    RawDiffusionTaskEncoder,
    get_diffusion_loader,
)

from tests.helpers.encode import (
    TINY,
    encode_args,
    load_tensor,
    run_in_process,
    samples,
)
from tests.helpers.energon import image_bytes, raw_pixels, tensor_bytes
from tests.helpers.shards import tarfile_shard

warnings.filterwarnings("ignore", message=".*pin_memory.*")

C, H, W, L, D_T5, D_CLIP = 16, 8, 6, 12, 32, 24
NO_CAPTION = 3  # this sample of the hand-built dataset has no caption.txt
RAW_FORMATS = ("jpg", "jpeg", "png", "webp")


def _dataset_yaml(root: Path, encoding: str) -> None:
    """dataset.yaml as Primus's templates write it (no .info.json, no index: not finalized)."""
    meta = root / ".nv-meta"
    meta.mkdir(parents=True)
    (meta / "dataset.yaml").write_text(yaml.safe_dump({
        "__module__": "megatron.energon", "__class__": "CrudeWebdataset",
        "subflavors": {"encoding": encoding}}))


def _seed_tensors(i: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    return {"latents": torch.randn(C, H, W, generator=g).bfloat16(),
            "prompt_embeds": torch.randn(L, D_T5, generator=g).bfloat16(),
            "pooled_prompt_embeds": torch.randn(D_CLIP, generator=g).bfloat16(),
            "mean": torch.randn(C, H, W, generator=g).bfloat16(),
            "logvar": (torch.randn(C, H, W, generator=g) - 2).bfloat16()}


@pytest.fixture(scope="module")
def seed_encoded(tmp_path_factory) -> Path:
    """10 samples in Primus's pre-encoded layout, written with Python's tarfile: 10-digit keys,
    three tensors + caption.txt, the posterior as extra parts, no meta.json; one caption absent."""
    root = tmp_path_factory.mktemp("seed") / "encoded"
    for shard, keys in (("shard_000000.tar", range(6)), ("shard_000001.tar", range(6, 10))):
        members = []
        for i in keys:
            key = f"{i:010d}"
            for name, t in _seed_tensors(i).items():
                members.append((f"{key}.{name}.pth", tensor_bytes(t)))
            if i != NO_CAPTION:
                members.append((f"{key}.caption.txt", f"seed caption {i}".encode()))
        tarfile_shard(root / shard, members)
    _dataset_yaml(root, "preencoded")
    return root


@pytest.fixture(scope="module")
def seed_raw(tmp_path_factory) -> Path:
    """8 raw samples as Primus writes them: one image part (jpg, jpeg, png or webp) and txt."""
    root = tmp_path_factory.mktemp("seed") / "raw"
    members = []
    for i in range(8):
        fmt = RAW_FORMATS[i % len(RAW_FORMATS)]
        data = image_bytes(raw_pixels(i, (24, 32)), "jpg" if fmt == "jpeg" else fmt)
        members += [(f"{i:010d}.{fmt}", data), (f"{i:010d}.txt", f"raw caption {i}".encode())]
    tarfile_shard(root / "shard_000000.tar", members)
    _dataset_yaml(root, "raw")
    return root


@pytest.mark.parametrize("which", ["seed_encoded", "seed_raw"])
def test_seed_layout_finalizes_validates_and_shows(request, tmp_path, which):
    root = request.getfixturevalue(which)
    if not (root / ".nv-meta" / ".info.json").exists():
        r = run_in_process(["finalize", str(root)])
        assert "validated: ok" in r.output
    r = run_in_process(["validate", str(root), "--deep"])
    assert "ok: the dataset is whole" in r.output
    info = json.loads(run_in_process(["info", str(root), "--json"]).output)
    assert info["samples"] == (10 if which == "seed_encoded" else 8)
    if which == "seed_encoded":
        assert info["parts"]["latents.pth"] == f"bfloat16[{C}, {H}, {W}]"
        assert "mean.pth" in info["parts"]
    out = tmp_path / "sheet.png"
    run_in_process(["preview", str(root), "--out", str(out), "--count", "4"])
    assert Image.open(out).size[0] > 0


def test_keys_of_other_energon_forms_are_accepted(tmp_path):
    root = tmp_path / "keys"
    members = []
    for i, key in enumerate(["img_a1", "s3-xyz", "photo0007", "A_b_C"]):
        members += [(f"{key}.jpg", image_bytes(raw_pixels(i, (24, 32)), "jpg")),
                    (f"{key}.txt", f"caption {key}".encode())]
    tarfile_shard(root / "part-a.tar", members)
    _dataset_yaml(root, "raw")
    assert "validated: ok" in run_in_process(["finalize", str(root)]).output
    run_in_process(["validate", str(root), "--deep"])
    with get_diffusion_loader(root, batch_size=4, num_workers=0, shuffle_buffer_size=None,
                              max_samples_per_sequence=None) as loader:
        assert sorted(next(loader)["txt"]) == sorted(
            f"caption {k}" for k in ["img_a1", "s3-xyz", "photo0007", "A_b_C"])


def _finalized(root: Path) -> Path:
    if not (root / ".nv-meta" / ".info.json").exists():
        run_in_process(["finalize", str(root)])
    return root


def _seed_loader(root: Path, task_encoder_cls, **te_kwargs) -> MegatronDataloaderWrapper:
    """The seed's training snippet: Energon's get_train_dataset + get_loader, then the wrapper."""
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_train_dataset(str(root), batch_size=4, shuffle_buffer_size=None,
                           max_samples_per_sequence=None, worker_config=wc,
                           task_encoder=task_encoder_cls(worker_config=wc, **te_kwargs))
    return MegatronDataloaderWrapper(get_loader(ds))


def test_seed_encoded_training_snippet(seed_encoded):
    train_iter = _seed_loader(_finalized(seed_encoded), EncodedDiffusionTaskEncoder)
    seen = {}
    for _ in range(3):  # 10 samples in batches of 4, repeating
        batch = next(train_iter)
        assert batch["latents"].shape[1:] == (C, H, W) and batch["latents"].dtype == torch.bfloat16
        assert batch["prompt_embeds"].shape[1:] == (L, D_T5)
        assert batch["pooled_prompt_embeds"].shape[1:] == (D_CLIP,)
        assert batch["latents"] is batch.latents  # attribute access still works
        for j, key in enumerate(batch.__key__):
            seen[key] = batch.captions[j]
            assert torch.equal(batch["latents"][j], _seed_tensors(int(key))["latents"])
            assert torch.equal(batch["mean"][j], _seed_tensors(int(key))["mean"])
    assert seen[f"{NO_CAPTION:010d}"] == ""
    assert seen["0000000000"] == "seed caption 0"
    assert train_iter.save_state() is None  # get_loader cannot checkpoint: None, as in Primus
    assert EncodedDiffusionTaskEncoder(worker_config=None).worker_config is None


def test_seed_raw_training_snippet(seed_raw):
    train_iter = _seed_loader(_finalized(seed_raw), RawDiffusionTaskEncoder)
    batch = next(train_iter)
    assert isinstance(batch["images"], list) and len(batch["images"]) == 4
    assert all(isinstance(im, Image.Image) and im.size == (32, 24) and im.mode == "RGB"
               for im in batch["images"])
    assert batch["txt"] == [f"raw caption {int(k)}" for k in batch.__key__]
    assert batch.txt == batch.captions
    png = next(j for j, k in enumerate(batch.__key__) if int(k) % 4 == 2)  # lossless: exact
    assert np.array_equal(np.asarray(batch["images"][png]),
                          raw_pixels(int(batch.__key__[png]), (24, 32)))
    with pytest.raises(KeyError, match="has no key 'latents'"):
        batch["latents"]
    # get_diffusion_loader keeps the fast uint8 tensor batch
    with get_diffusion_loader(seed_raw, batch_size=4, num_workers=0) as fast:
        assert next(fast)["images"].shape == (4, 3, 24, 32)


def test_legacy_metadataset_blend_loads(seed_encoded, seed_raw, tmp_path):
    blend = tmp_path / "blend.yaml"
    blend.write_text(yaml.safe_dump({
        "__module__": "megatron.energon", "__class__": "Metadataset",
        "splits": {"train": {"datasets": [
            {"weight": 0.5, "path": str(_finalized(seed_encoded))},
            {"weight": 0.5, "path": str(_finalized(seed_raw))}]}}}))
    kinds = set()
    with get_diffusion_loader(blend, batch_size=2, num_workers=0) as loader:
        for _ in range(16):
            kinds.add(type(next(loader)).__name__)
    assert kinds == {"DiffusionBatch", "RawImageBatch"}
    from shardcook.errors import ConfigError

    with pytest.raises(ConfigError, match=r"split 'val' is not in .*blend.yaml; it has train"):
        get_diffusion_loader(blend, batch_size=2, split="val")
    # Primus's template also sets loader options at the top level, which Energon refuses
    data = yaml.safe_load(blend.read_text())
    blend.write_text(yaml.safe_dump({**data, "shuffle_buffer_size": 1000,
                                     "max_samples_per_sequence": 100}))
    with pytest.raises(ConfigError, match=r"sets shuffle_buffer_size, max_samples_per_sequence at "
                                          r"the top level.*pass shuffle_buffer_size=, "
                                          r"max_samples_per_sequence= to get_diffusion_loader"):
        get_diffusion_loader(blend, batch_size=2)


# --- resample mode --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def resampled(tiny_flux, tmp_path_factory) -> Path:
    from shardcook.demo import make_images

    tmp = tmp_path_factory.mktemp("resample")
    make_images(tmp / "images", 6)
    out = tmp / "enc"
    run_in_process(encode_args(tiny_flux, tmp / "images", out, "--vae-latent-mode", "resample",
                               "--shard-size", "3"))
    return out


def _factors(root: Path) -> tuple[float, float]:
    manifest = json.loads((root / ".shardcook" / "manifest.json").read_text())
    return manifest["scaling_factor"], manifest["shift_factor"]


def test_resample_stores_the_posterior_and_the_factors(resampled):
    scale, shift = _factors(resampled)
    manifest = json.loads((resampled / ".shardcook" / "manifest.json").read_text())
    assert manifest["latent_mode"] == "resample"
    side = TINY["image_size"] // 8
    for parts in samples(resampled).values():
        mean, logvar = load_tensor(parts["mean.pth"]), load_tensor(parts["logvar.pth"])
        latents = load_tensor(parts["latents.pth"])
        assert mean.shape == logvar.shape == latents.shape and mean.shape[-2:] == (side, side)
        assert torch.allclose(latents, (mean - shift) * scale, atol=1e-5)  # the scaled mode
        meta = json.loads(parts["meta.json"])
        assert (meta["scaling_factor"], meta["shift_factor"]) == (scale, shift)
    run_in_process(["validate", str(resampled), "--deep"])


def _resample_loader(root: Path, num_workers: int = 0) -> MegatronDataloaderWrapper:
    return get_diffusion_loader(root, batch_size=2, num_workers=num_workers,
                                shuffle_buffer_size=None, max_samples_per_sequence=None,
                                resample_latents=True, checkpoint_every_min_n_samples=1)


def test_resampled_batches_differ_between_epochs_and_follow_the_posterior(resampled):
    scale, shift = _factors(resampled)
    stored = {k: p for k, p in samples(resampled).items()}
    by_epoch: list[dict[str, torch.Tensor]] = [{}, {}]
    eps = []
    with _resample_loader(resampled) as loader:
        for step in range(6):  # 6 samples, batches of 2: two epochs
            batch = next(loader)
            assert batch["latents"].shape == (2, 4, 8, 8)
            for j, key in enumerate(batch.__key__):
                by_epoch[step // 3][key] = batch["latents"][j]
                mean = load_tensor(stored[key]["mean.pth"])
                std = torch.exp(0.5 * load_tensor(stored[key]["logvar.pth"]))
                eps.append(((batch["latents"][j] / scale + shift) - mean) / std)
                assert not torch.allclose(batch["latents"][j],
                                          load_tensor(stored[key]["latents.pth"]))
    assert set(by_epoch[0]) == set(by_epoch[1]) == set(stored)
    for key in stored:
        assert not torch.allclose(by_epoch[0][key], by_epoch[1][key])
    noise = torch.stack(eps)
    assert abs(noise.mean().item()) < 0.1 and 0.9 < noise.std().item() < 1.1


@pytest.mark.parametrize("num_workers", [0, 1])
def test_resampled_batches_are_identical_after_save_restore(resampled, num_workers):
    with _resample_loader(resampled, num_workers) as first:
        for _ in range(4):  # past the first epoch
            next(first)
        state = first.save_state()
        expected = [next(first) for _ in range(4)]
    with _resample_loader(resampled, num_workers) as restored:
        restored.restore_state(state)
        got = [next(restored) for _ in range(4)]
    for a, b in zip(got, expected, strict=True):
        assert a.__key__ == b.__key__
        assert torch.equal(a["latents"], b["latents"])


def test_resample_snippet_with_energons_own_loader(resampled):
    train_iter = _seed_loader(resampled, EncodedDiffusionTaskEncoder, resample_latents=True)
    batch = next(train_iter)
    assert batch["latents"].shape == (4, 4, 8, 8)
    assert "mean" not in batch and "logvar" not in batch  # used up by the draw


def test_resample_without_a_posterior_is_a_clear_error(tmp_path):
    from shardcook.energon import SampleDecodeError

    from tests.helpers.energon import make_encoded_dataset

    ds = make_encoded_dataset(tmp_path / "plain", 4)
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0,
                      global_error_handler=reraise_exception)
    loaded = get_train_dataset(str(ds.path), batch_size=2, shuffle_buffer_size=None,
                               max_samples_per_sequence=None, worker_config=wc,
                               task_encoder=EncodedDiffusionTaskEncoder(resample_latents=True))
    with pytest.raises(SampleDecodeError,
                       match=re.escape("no mean.pth/logvar.pth to resample from")):
        next(iter(get_loader(loaded)))
