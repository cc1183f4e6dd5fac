"""The parts of one `megatron-bridge` sample, as Megatron-Bridge's
`examples/diffusion/recipes/flux/prepare_energon_dataset_flux.py` writes them for an image:
`pth` (torch.save of the unscaled latent), `pickle` (pickle.dumps of the two text embeddings),
`json` (Bridge's fields, then shardcook's own)."""

from __future__ import annotations

import json
import pickle
from typing import TYPE_CHECKING, Any

from shardcook.config import ImageConfig
from shardcook.jobs.encode.sample import EncodedSample
from shardcook.layouts.bridge_flux import (
    EMBEDDINGS_PART,
    LATENT_PART,
    META_PART,
    POOLED_PROMPT_EMBEDS,
    PROMPT_EMBEDS,
)

if TYPE_CHECKING:
    import torch

    from shardcook.imaging import ImageResult
    from shardcook.sources.base import Item

#: The image core's resampling filter, in the interpolation names of Bridge's `--resize_mode`.
RESAMPLING = "lanczos"


def resize_settings(image: ImageConfig) -> dict[str, Any]:
    """Bridge's `resize_settings` for shardcook's resize options."""
    fixed = image.resize_mode in ("crop", "stretch")
    return {
        "target_size": [image.image_size, image.image_size] if fixed else None,
        "resize_mode": RESAMPLING,
        "maintain_aspect_ratio": image.resize_mode != "stretch",
        "center_crop": image.resize_mode == "crop",
    }


def bridge_json(item: Item, result: ImageResult, *, image: ImageConfig,
                encoders: dict[str, Any]) -> bytes:
    """The `json` part: Bridge's fields in its order, then source, orig_size, crop and the
    facts needed to scale the latents later (`encoders`: latent_mode, scaling/shift factors)."""
    assert result.pixels is not None and result.orig_size is not None and result.crop is not None
    h, w = result.pixels.shape[:2]
    meta = {
        "image_path": item.source,
        "processed_height": int(h),
        "processed_width": int(w),
        "caption": item.caption or "",
        "deterministic_latents": encoders["latent_mode"] == "mode",
        "memory_optimization": False,
        "model_version": "flux",
        "vae_normalization": "[-1, 1]",
        "resize_settings": resize_settings(image),
        "source": item.source,
        "orig_size": [int(x) for x in result.orig_size],
        "crop": [int(x) for x in result.crop],
        **encoders,
    }
    return json.dumps(meta).encode("utf-8")  # webdataset's json encoder


def bridge_parts(item: Item, result: ImageResult, latent: torch.Tensor, prompt: torch.Tensor,
                 pooled: torch.Tensor, *, image: ImageConfig,
                 encoders: dict[str, Any]) -> list[tuple[str, bytes]]:
    """(part, bytes) of one sample; the tensors are cloned so no batch storage is saved."""
    from shardcook.encoders.flux import tensor_bytes

    embeddings = {PROMPT_EMBEDS: prompt.contiguous().clone(),
                  POOLED_PROMPT_EMBEDS: pooled.contiguous().clone()}
    return [
        (LATENT_PART, tensor_bytes(latent)),
        (EMBEDDINGS_PART, pickle.dumps(embeddings)),
        (META_PART, bridge_json(item, result, image=image, encoders=encoders)),
    ]


def encoded_bridge_parts(s: EncodedSample) -> list[tuple[str, bytes]]:
    """The layout's `encode` part builder."""
    return bridge_parts(s.item, s.result, s.latent, s.prompt, s.pooled, image=s.image,
                        encoders=s.facts)
