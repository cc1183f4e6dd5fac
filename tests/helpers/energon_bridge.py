"""A small dataset in Megatron-Bridge's FLUX layout (`pth`, `pickle`, `json`), written by hand for
the loader tests (the encode tests make real ones with a tiny FLUX)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import shardcook
import torch

from tests.helpers.energon import D_CLIP, D_T5, BuiltDataset, C, L, prepare, tensor_bytes


def bridge_parts(key: str, latent_hw: tuple[int, int], *, seed: int) -> dict[str, bytes]:
    """The parts of one sample as Megatron-Bridge's FLUX prep script writes them."""
    g = torch.Generator().manual_seed(seed)
    h, w = latent_hw
    embeddings = {"prompt_embeds": torch.randn(L, D_T5, generator=g).bfloat16(),
                  "pooled_prompt_embeds": torch.randn(D_CLIP, generator=g).bfloat16()}
    meta = {"caption": f"caption of {key}", "processed_height": h * 8, "processed_width": w * 8}
    return {"pth": tensor_bytes(torch.randn(C, h, w, generator=g).bfloat16()),
            "pickle": pickle.dumps(embeddings), "json": json.dumps(meta).encode()}


def make_bridge_dataset(path: Path, n: int, *, shard_size: int = 8) -> BuiltDataset:
    """Writes `n` bridge-flux samples of latent shape 8x8 and finalizes them."""
    built = BuiltDataset(path=path, keys=[])
    with shardcook.ShardWriter(str(path), shard_size=shard_size) as w:
        for i in range(n):
            key = f"{i:010d}"
            w.write(key, bridge_parts(key, (8, 8), seed=i))
            built.keys.append(key)
    prepare(path, "bridge-flux")
    return built
