"""The parts of one `megatron-bridge` sample, as Megatron-Bridge's
`examples/diffusion/recipes/flux/prepare_energon_dataset_flux.py` writes them for an image:
`pth` (torch.save of the unscaled latent), `pickle` (pickle.dumps of the two text embeddings),
`json` (Bridge's fields, then shardcook's own)."""

from __future__ import annotations

import copyreg
import io
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
                encoders: dict[str, Any], version: str) -> bytes:
    """The `json` part: Bridge's fields in its order, then source, orig_size, crop and the
    facts needed to scale the latents later (`encoders`: latent_mode, scaling/shift factors);
    `version` is the model family's (its registry entry's `version`)."""
    assert result.pixels is not None and result.orig_size is not None and result.crop is not None
    h, w = result.pixels.shape[:2]
    meta = {
        "image_path": item.source,
        "processed_height": int(h),
        "processed_width": int(w),
        "caption": item.caption or "",
        "deterministic_latents": encoders["latent_mode"] == "mode",
        "memory_optimization": False,
        "model_version": version,
        "vae_normalization": "[-1, 1]",
        "resize_settings": resize_settings(image),
        "source": item.source,
        "orig_size": [int(x) for x in result.orig_size],
        "crop": [int(x) for x in result.crop],
        **encoders,
    }
    return json.dumps(meta).encode("utf-8")  # webdataset's json encoder


def bridge_parts(item: Item, result: ImageResult, latent: torch.Tensor, prompt: torch.Tensor,
                 pooled: torch.Tensor, *, image: ImageConfig, encoders: dict[str, Any],
                 version: str) -> list[tuple[str, bytes]]:
    """(part, bytes) of one sample; the tensors are cloned so no batch storage is saved."""
    from shardcook.encoders.flux import tensor_bytes

    embeddings = {PROMPT_EMBEDS: prompt.contiguous().clone(),
                  POOLED_PROMPT_EMBEDS: pooled.contiguous().clone()}
    return [
        (LATENT_PART, tensor_bytes(latent)),
        (EMBEDDINGS_PART, pickle_tensors(embeddings)),
        (META_PART, bridge_json(item, result, image=image, encoders=encoders, version=version)),
    ]


#: The storage key torch's legacy save writes: any string that is the same in both places.
_STORAGE_KEY = "0"


def _storage_bytes(storage: Any) -> bytes:
    """torch's own `TypedStorage.__reduce__` payload (a legacy `torch.save` of the one storage),
    with the storage's key, which torch takes from its memory address, made a constant: the same
    tensors then pickle to the same bytes in every process."""
    import torch

    buffer = io.BytesIO()
    torch.save(storage, buffer, _use_new_zipfile_serialization=False)
    address = str(storage._cdata).encode("ascii")

    def binunicode(text: bytes) -> bytes:  # how protocol 2 writes a str
        return b"X" + len(text).to_bytes(4, "little") + text

    data = buffer.getvalue()
    if data.count(binunicode(address)) != 2:  # the storage's id and the list of saved keys
        raise RuntimeError("torch's legacy storage format changed; cannot pickle reproducibly")
    return data.replace(binunicode(address), binunicode(_STORAGE_KEY.encode("ascii")))


def _reduce_storage(storage: Any) -> tuple[Any, tuple[bytes]]:
    import torch

    return torch.storage._load_from_bytes, (_storage_bytes(storage),)


def pickle_tensors(tensors: dict[str, torch.Tensor] | torch.Tensor) -> bytes:
    """`pickle.dumps(tensors)` (a dict of tensors, or one) as Bridge's scripts write it (each tensor
    `torch._utils._rebuild_tensor_v2` over `torch.storage._load_from_bytes`), byte-reproducible."""
    import torch

    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer)
    pickler.dispatch_table = copyreg.dispatch_table.copy()
    pickler.dispatch_table[torch.storage.TypedStorage] = _reduce_storage
    pickler.dump(tensors)
    return buffer.getvalue()


def encoded_bridge_parts(s: EncodedSample) -> list[tuple[str, bytes]]:
    """The layout's `encode` part builder."""
    from shardcook.encoders.flux import POOLED_PROMPT_EMBEDS, PROMPT_EMBEDS

    return bridge_parts(s.item, s.result, s.latent, s.text[PROMPT_EMBEDS],
                        s.text[POOLED_PROMPT_EMBEDS], image=s.image, encoders=s.facts,
                        version=s.family.version)
