"""Builders of small shardcook datasets for the `shardcook.energon` tests and benchmark.

Shards are written with `shardcook.ShardWriter`; Energon metadata comes from `prepare()`, i.e.
`shardcook.finalize` (which writes what `energon prepare` writes, plus the `encoding`
subflavor, and validates).
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import shardcook
import torch

#: Small shapes (docs/FORMAT.md §3 layout, tiny sizes).
C, L, D_T5, D_CLIP = 16, 16, 32, 24


@dataclass
class BuiltDataset:
    """A dataset written for a test: its folder and what went into it."""

    path: Path
    keys: list[str]
    captions: dict[str, str] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def tensor_bytes(t: torch.Tensor) -> bytes:
    """`torch.save` of a contiguous clone, as the writers store `.pth` parts."""
    buf = io.BytesIO()
    torch.save(t.contiguous().clone(), buf)
    return buf.getvalue()


def _meta(key: str, size: tuple[int, int]) -> bytes:
    meta = {"source": f"test/{key}.png", "orig_size": [size[0] * 2, size[1] * 2],
            "crop": [0, 0], "size": list(size)}
    return json.dumps(meta).encode()


def encoded_parts(key: str, latent_hw: tuple[int, int], *, seed: int,
                  dtype: torch.dtype = torch.bfloat16, c: int = C, seq_len: int = L,
                  d_t5: int = D_T5, d_clip: int = D_CLIP) -> dict[str, bytes]:
    """The parts of one pre-encoded sample, in docs/FORMAT.md order."""
    g = torch.Generator().manual_seed(seed)
    h, w = latent_hw
    return {
        "latents.pth": tensor_bytes(torch.randn(c, h, w, generator=g).to(dtype)),
        "prompt_embeds.pth": tensor_bytes(torch.randn(seq_len, d_t5, generator=g).to(dtype)),
        "pooled_prompt_embeds.pth": tensor_bytes(torch.randn(d_clip, generator=g).to(dtype)),
        "caption.txt": f"caption of {key}".encode(),
        "meta.json": _meta(key, (h * 8, w * 8)),
    }


def prepare(path: Path, encoding: str) -> None:
    """Writes Energon's metadata for a folder of shards, with `subflavors: {encoding: ...}`."""
    shardcook.finalize(path, encoding=encoding, split=(1, 0, 0))


def make_encoded_dataset(path: Path, n: int, *, shard_size: int = 8,
                         latent_shapes: Sequence[tuple[int, int]] = ((8, 8),),
                         key_prefix: str = "", dtype: torch.dtype = torch.bfloat16,
                         seq_len: int = L, d_t5: int = D_T5) -> BuiltDataset:
    """Writes `n` pre-encoded samples; sample i has latent shape `latent_shapes[i % len]`."""
    built = BuiltDataset(path=path, keys=[])
    with shardcook.ShardWriter(str(path), shard_size=shard_size) as w:
        for i in range(n):
            key = f"{key_prefix}{i:010d}"
            hw = latent_shapes[i % len(latent_shapes)]
            w.write(key, encoded_parts(key, hw, seed=i, dtype=dtype, seq_len=seq_len, d_t5=d_t5))
            built.keys.append(key)
            built.captions[key] = f"caption of {key}"
            built.shapes[key] = (C, *hw)
    prepare(path, "preencoded")
    return built


def image_bytes(pixels: np.ndarray, fmt: str) -> bytes:
    """Encodes an `[H, W, 3]` uint8 array as `png`, `jpg` or `webp`."""
    from PIL import Image

    buf = io.BytesIO()
    kwargs = {"lossless": True} if fmt == "webp" else {}
    Image.fromarray(pixels).save(buf, format={"jpg": "JPEG"}.get(fmt, fmt.upper()), **kwargs)
    return buf.getvalue()


def raw_pixels(i: int, hw: tuple[int, int]) -> np.ndarray:
    """The deterministic test image of sample i."""
    return np.random.default_rng(i).integers(0, 256, size=(*hw, 3), dtype=np.uint8)


def make_raw_dataset(path: Path, n: int, *, shard_size: int = 8,
                     sizes: Sequence[tuple[int, int]] = ((32, 48),),
                     formats: Sequence[str] = ("png",)) -> BuiltDataset:
    """Writes `n` raw samples; sample i has image size `sizes[i % len]` and format
    `formats[i % len]`."""
    built = BuiltDataset(path=path, keys=[])
    with shardcook.ShardWriter(str(path), shard_size=shard_size) as w:
        for i in range(n):
            key = f"{i:010d}"
            hw = sizes[i % len(sizes)]
            fmt = formats[i % len(formats)]
            w.write(key, {fmt: image_bytes(raw_pixels(i, hw), fmt),
                          "txt": f"caption of {key}".encode(), "meta.json": _meta(key, hw)})
            built.keys.append(key)
            built.captions[key] = f"caption of {key}"
            built.shapes[key] = (3, *hw)
    prepare(path, "raw")
    return built


def make_bridge_flux_dataset(path: Path, n: int, *, shard_size: int = 8,
                             latent_hw: tuple[int, int] = (8, 8)) -> BuiltDataset:
    """Writes `n` samples in Megatron-Bridge's FLUX layout (`pth`, `pickle`, `json`), as
    `shardcook encode --layout megatron-bridge` does."""
    built = BuiltDataset(path=path, keys=[])
    h, w = latent_hw
    with shardcook.ShardWriter(str(path), shard_size=shard_size) as writer:
        for i in range(n):
            key = f"{i:010d}"
            g = torch.Generator().manual_seed(i)
            embeddings = {"prompt_embeds": torch.randn(L, D_T5, generator=g),
                          "pooled_prompt_embeds": torch.randn(D_CLIP, generator=g)}
            meta = {"processed_height": h * 8, "processed_width": w * 8,
                    "caption": f"caption of {key}"}
            writer.write(key, {"pth": tensor_bytes(torch.randn(C, h, w, generator=g)),
                               "pickle": pickle.dumps(embeddings),
                               "json": json.dumps(meta).encode()})
            built.keys.append(key)
            built.captions[key] = f"caption of {key}"
            built.shapes[key] = (C, h, w)
    prepare(path, "bridge-flux")
    return built


class Evil:
    """Unpickling this creates the file `target`: the payload of the malicious-shard test."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self):
        return (open, (str(self.target), "w"))


def evil_torch_save(target: Path) -> bytes:
    """A `torch.save` file (zip format) whose unpickling would create `target`."""
    buf = io.BytesIO()
    torch.save(Evil(target), buf)
    return buf.getvalue()


def evil_plain_pickle(target: Path) -> bytes:
    """A bare pickle (torch's legacy format path) whose unpickling would create `target`."""
    return pickle.dumps(Evil(target))


def crude_sample(key: str, parts: dict) -> dict:
    """A crude sample as Energon hands it to a cooker: `parts` plus Energon's own keys."""
    return {"__key__": key, "__restore_key__": ("Webdataset", 0), "__subflavors__": {},
            "__sources__": (), **parts}
