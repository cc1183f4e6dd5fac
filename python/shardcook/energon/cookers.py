"""Energon cookers: turn a crude webdataset sample (part name -> bytes) into a typed sample.

Every cooker expects raw bytes, i.e. a task encoder whose ``decoder`` is ``None``. ``.pth`` parts
are loaded with ``torch.load(..., weights_only=True)`` and Megatron-Bridge's ``pickle`` part with an
unpickler that loads tensors and plain types only, so a shard holding a malicious pickle is
refused with `UnsafeSampleError` and never runs code.
"""

from __future__ import annotations

import functools
import io
import json
import pickle
import re
from collections.abc import Callable
from typing import Any, Literal, TypedDict

import numpy as np
import torch
from megatron.energon import basic_sample_keys, stateless

from shardcook.energon.errors import SampleDecodeError, UnsafeSampleError
from shardcook.energon.samples import DiffusionSample, RawImageSample
from shardcook.layouts import IMAGE_PARTS

__all__ = [
    "IMAGE_PARTS",
    "ImageFormat",
    "cook_bridge_crude",
    "cook_bridge_flux",
    "cook_preencoded_diffusion",
    "cook_raw_images",
    "load_pickled_tensors",
    "load_tensor",
    "raw_images_cooker",
]

#: How `cook_raw_images` returns images: uint8 CHW tensors or RGB PIL images.
ImageFormat = Literal["tensor", "pil"]


class _VaeFactors(TypedDict, total=False):
    """The VAE factors a resample dataset's `meta.json` records."""

    scaling_factor: float | None
    shift_factor: float | None


class _MetaFields(TypedDict, total=False):
    """The sample fields read from `meta.json`."""

    source: str | None
    orig_size: tuple[int, int] | None
    crop: tuple[int, int] | None
    size: tuple[int, int] | None


def _key(sample: dict[str, Any]) -> str:
    return str(sample.get("__key__", "<unknown key>"))


def _part_bytes(sample: dict[str, Any], part: str) -> bytes:
    """Returns the raw bytes of `part`, with a clear error when it is missing or pre-decoded."""
    try:
        data = sample[part]
    except KeyError:
        parts = sorted(k for k in sample if not k.startswith("__"))
        raise SampleDecodeError(
            f"sample {_key(sample)!r} has no part {part!r} (it has: {', '.join(parts)})"
        ) from None
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SampleDecodeError(
            f"sample {_key(sample)!r}: part {part!r} arrived already decoded "
            f"({type(data).__name__}); set the task encoder's `decoder = None` so shardcook "
            "reads raw bytes and loads .pth parts safely"
        )
    return bytes(data)


def load_tensor(data: bytes, *, key: str, part: str) -> torch.Tensor:
    """Loads one `torch.save`d tensor without running any pickled code.

    Args:
        data: The bytes of the `.pth` part.
        key: The sample key, for error messages.
        part: The part name, for error messages.

    Returns:
        The tensor, on CPU, with its stored dtype.

    Raises:
        UnsafeSampleError: The bytes hold pickled objects other than tensors (for example a
            malicious `__reduce__`); nothing was executed.
        SampleDecodeError: The bytes are not a `torch.save` file or do not hold a single tensor.
    """
    try:
        obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        m = re.search(r"Unsupported (?:global: GLOBAL \S+|operand \d+)", str(e))
        raise UnsafeSampleError(
            f"sample {key!r}: part {part!r} is not plain tensor data and was refused without "
            f"running it (torch.load weights_only=True"
            + (f": {m.group(0)})" if m else ")")
        ) from None
    except Exception as e:  # truncated zip, not a torch file, ...
        raise SampleDecodeError(
            f"sample {key!r}: part {part!r} is not a readable torch.save file: {e}"
        ) from e
    if not isinstance(obj, torch.Tensor):
        raise SampleDecodeError(
            f"sample {key!r}: part {part!r} holds a {type(obj).__name__}, expected one tensor"
        )
    return obj


def _text(sample: dict[str, Any], part: str) -> str:
    try:
        return _part_bytes(sample, part).decode("utf-8")
    except UnicodeDecodeError as e:
        raise SampleDecodeError(f"sample {_key(sample)!r}: part {part!r} is not UTF-8: {e}") from e


def _pair(value: Any) -> tuple[int, int] | None:
    if value is None:
        return None
    a, b = value
    return int(a), int(b)


def _meta_fields(sample: dict[str, Any]) -> _MetaFields:
    """Reads the optional `meta.json` part into the sample's meta fields."""
    if "meta.json" not in sample:
        return {}
    try:
        meta = json.loads(_part_bytes(sample, "meta.json"))
        if not isinstance(meta, dict):
            raise TypeError(f"expected a JSON object, got {type(meta).__name__}")
        return {
            "source": None if meta.get("source") is None else str(meta["source"]),
            "orig_size": _pair(meta.get("orig_size")),
            "crop": _pair(meta.get("crop")),
            "size": _pair(meta.get("size")),
        }
    except (ValueError, TypeError) as e:
        if isinstance(e, SampleDecodeError):
            raise
        raise SampleDecodeError(f"sample {_key(sample)!r}: part 'meta.json' is invalid: {e}") from e


def _optional_tensor(sample: dict[str, Any], part: str) -> torch.Tensor | None:
    if part not in sample:
        return None
    return load_tensor(_part_bytes(sample, part), key=_key(sample), part=part)


def _factor(meta: dict[str, Any], name: str) -> float | None:
    value = meta.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {value!r}")
    return float(value)


def _vae_factors(sample: dict[str, Any]) -> _VaeFactors:
    """`scaling_factor` and `shift_factor` from the optional `meta.json` (resample datasets)."""
    if "meta.json" not in sample:
        return {}
    try:
        meta = json.loads(_part_bytes(sample, "meta.json"))
        if not isinstance(meta, dict):
            return {}
        return _VaeFactors(
            scaling_factor=_factor(meta, "scaling_factor"), shift_factor=_factor(meta, "shift_factor")
        )
    except (ValueError, TypeError) as e:
        raise SampleDecodeError(f"sample {_key(sample)!r}: part 'meta.json' is invalid: {e}") from e


@stateless
def cook_preencoded_diffusion(sample: dict[str, Any]) -> DiffusionSample:
    """Cooks a pre-encoded crude sample into a `DiffusionSample`.

    Args:
        sample: The crude sample from a `CrudeWebdataset` read with `decoder = None`: the parts
            `latents.pth`, `prompt_embeds.pth`, `pooled_prompt_embeds.pth`, and optionally
            `caption.txt` (else the caption is ""), `meta.json` and the posterior `mean.pth` +
            `logvar.pth`, as bytes, plus Energon's `__key__`-style fields.

    Returns:
        The sample, keeping Energon's basic sample keys (key, restore key, subflavors, sources).

    Raises:
        UnsafeSampleError: A `.pth` part holds a pickle beyond plain tensors.
        SampleDecodeError: A part is missing or unreadable.
    """
    key = _key(sample)
    return DiffusionSample(
        **basic_sample_keys(sample),
        latents=load_tensor(_part_bytes(sample, "latents.pth"), key=key, part="latents.pth"),
        prompt_embeds=load_tensor(
            _part_bytes(sample, "prompt_embeds.pth"), key=key, part="prompt_embeds.pth"
        ),
        pooled_prompt_embeds=load_tensor(
            _part_bytes(sample, "pooled_prompt_embeds.pth"),
            key=key,
            part="pooled_prompt_embeds.pth",
        ),
        caption=_text(sample, "caption.txt") if "caption.txt" in sample else "",
        mean=_optional_tensor(sample, "mean.pth"),
        logvar=_optional_tensor(sample, "logvar.pth"),
        **_vae_factors(sample),
        **_meta_fields(sample),
    )


def _decode_image(data: bytes, *, key: str, part: str) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            return img.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as e:
        raise SampleDecodeError(f"sample {key!r}: part {part!r} is not a readable image: {e}") from e


@stateless
def cook_raw_images(sample: dict[str, Any], *, image_format: ImageFormat = "tensor") -> RawImageSample:
    """Cooks a raw crude sample (`jpg|png|webp`, `txt`, `meta.json`) into a `RawImageSample`.

    Args:
        sample: The crude sample, read with `decoder = None` (parts as bytes).
        image_format: `"tensor"` for a `uint8` `[3, H, W]` tensor, `"pil"` for an RGB PIL image.

    Returns:
        The sample, keeping Energon's basic sample keys.

    Raises:
        SampleDecodeError: No image part, an undecodable image, or a missing caption.
    """
    key = _key(sample)
    part = next((p for p in IMAGE_PARTS if p in sample), None)
    if part is None:
        parts = sorted(k for k in sample if not k.startswith("__"))
        raise SampleDecodeError(
            f"sample {key!r} has no image part ({'|'.join(IMAGE_PARTS)}); it has: "
            f"{', '.join(parts)}"
        )
    img = _decode_image(_part_bytes(sample, part), key=key, part=part)
    if image_format == "tensor":
        image: Any = torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).contiguous()
    elif image_format == "pil":
        image = img
    else:
        raise ValueError(f"image_format must be 'tensor' or 'pil', not {image_format!r}")
    return RawImageSample(
        **basic_sample_keys(sample),
        image=image,
        caption=_text(sample, "txt"),
        **_meta_fields(sample),
    )


def raw_images_cooker(image_format: ImageFormat = "tensor") -> Callable[[dict[str, Any]], RawImageSample]:
    """Returns `cook_raw_images` bound to `image_format`, still marked stateless for Energon.

    Args:
        image_format: `"tensor"` (default) or `"pil"`.
    """
    if image_format not in ("tensor", "pil"):
        raise ValueError(f"image_format must be 'tensor' or 'pil', not {image_format!r}")
    if image_format == "tensor":
        return cook_raw_images
    return stateless(functools.partial(cook_raw_images, image_format=image_format))


# ---- megatron-bridge layout (Megatron-Bridge's FLUX recipe: `pth`, `pickle`, `json`) ----------


def _storage_weights_only(data: bytes) -> Any:
    """What torch's `_load_from_bytes` does for a pickled storage, but with weights_only=True
    (torch's own runs an unrestricted torch.load on these bytes)."""
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


class _PickledTensorsUnpickler(pickle.Unpickler):
    """Loads tensors and plain types (dict, list, str, numbers) and no other class."""

    def find_class(self, module: str, name: str) -> Any:
        from collections import OrderedDict

        from shardcook.dataset.tensorinfo import REBUILD_TENSOR, STORAGE_FROM_BYTES

        if (module, name) == REBUILD_TENSOR:
            return torch._utils._rebuild_tensor_v2
        if (module, name) == STORAGE_FROM_BYTES:
            return _storage_weights_only
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        raise pickle.UnpicklingError(f"Unsupported global: GLOBAL {module}.{name}")


def load_pickled_tensors(data: bytes, *, key: str, part: str) -> Any:
    """Loads a `pickle.dumps` of tensors and plain types without running any other pickled code.

    Raises:
        UnsafeSampleError: The pickle names any other global (e.g. a malicious `__reduce__`);
            nothing was executed.
        SampleDecodeError: The bytes are not a readable pickle.
    """
    try:
        return _PickledTensorsUnpickler(io.BytesIO(data)).load()
    except pickle.UnpicklingError as e:
        m = re.search(r"Unsupported (?:global: GLOBAL \S+|operand \d+)", str(e))
        if m is None:
            raise SampleDecodeError(f"sample {key!r}: part {part!r} is not a readable pickle: "
                                    f"{e}") from None
        raise UnsafeSampleError(
            f"sample {key!r}: part {part!r} holds more than tensors and plain types and was "
            f"refused without running it ({m.group(0)})"
        ) from None
    except Exception as e:  # truncated or garbled bytes
        raise SampleDecodeError(f"sample {key!r}: part {part!r} is not a readable pickle: "
                                f"{e}") from e


def _bridge_embeddings(sample: dict[str, Any]) -> dict[str, torch.Tensor]:
    from shardcook.layouts.bridge_flux import EMBEDDINGS_PART, POOLED_PROMPT_EMBEDS, PROMPT_EMBEDS

    key = _key(sample)
    obj = load_pickled_tensors(_part_bytes(sample, EMBEDDINGS_PART), key=key, part=EMBEDDINGS_PART)
    if not isinstance(obj, dict) or not all(
        isinstance(obj.get(n), torch.Tensor) for n in (PROMPT_EMBEDS, POOLED_PROMPT_EMBEDS)
    ):
        raise SampleDecodeError(
            f"sample {key!r}: part {EMBEDDINGS_PART!r} is not a dict with the tensors "
            f"{PROMPT_EMBEDS!r} and {POOLED_PROMPT_EMBEDS!r}"
        )
    return obj


def _bridge_json(sample: dict[str, Any]) -> dict[str, Any]:
    from shardcook.layouts.bridge_flux import META_PART

    try:
        meta = json.loads(_part_bytes(sample, META_PART))
    except ValueError as e:
        raise SampleDecodeError(f"sample {_key(sample)!r}: part {META_PART!r} is invalid: "
                                f"{e}") from e
    if not isinstance(meta, dict):
        raise SampleDecodeError(f"sample {_key(sample)!r}: part {META_PART!r} is not a JSON "
                                "object")
    return meta


@stateless
def cook_bridge_crude(sample: dict[str, Any]) -> dict[str, Any]:
    """What Megatron-Bridge's FLUX `cook` returns (`json`, `pth`, `pickle` decoded), but read
    safely from raw bytes: plug it into Bridge's `FluxTaskEncoder` with `decoder = None` instead
    of Energon's default decoder, which unpickles the `pickle` part with `pickle.loads`.

    Raises:
        UnsafeSampleError: The `pth` or `pickle` part holds more than tensors and plain types.
        SampleDecodeError: A part is missing or unreadable.
    """
    from shardcook.layouts.bridge_flux import LATENT_PART

    return dict(
        **basic_sample_keys(sample),
        json=_bridge_json(sample),
        pth=load_tensor(_part_bytes(sample, LATENT_PART), key=_key(sample), part=LATENT_PART),
        pickle=_bridge_embeddings(sample),
    )


@stateless
def cook_bridge_flux(sample: dict[str, Any]) -> DiffusionSample:
    """Cooks a `megatron-bridge` sample into a `DiffusionSample` (latents unscaled, as stored;
    the json's `scaling_factor`/`shift_factor` scale them).

    Raises:
        UnsafeSampleError: The `pth` or `pickle` part holds more than tensors and plain types.
        SampleDecodeError: A part is missing or unreadable.
    """
    from shardcook.layouts.bridge_flux import POOLED_PROMPT_EMBEDS, PROMPT_EMBEDS

    crude = cook_bridge_crude(sample)
    meta = crude["json"]
    height, width = meta.get("processed_height"), meta.get("processed_width")
    return DiffusionSample(
        **basic_sample_keys(sample),
        latents=crude["pth"],
        prompt_embeds=crude["pickle"][PROMPT_EMBEDS],
        pooled_prompt_embeds=crude["pickle"][POOLED_PROMPT_EMBEDS],
        caption=str(meta.get("caption", "")),
        source=None if meta.get("source") is None else str(meta["source"]),
        orig_size=_pair(meta.get("orig_size")),
        crop=_pair(meta.get("crop")),
        size=None if height is None or width is None else (int(height), int(width)),
    )
