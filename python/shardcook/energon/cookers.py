"""Energon cookers: turn a crude webdataset sample (part name -> bytes) into a typed sample.

Given raw bytes (a task encoder whose ``decoder`` is ``None``, as all of shardcook's are), ``.pth``
parts are loaded with ``torch.load(..., weights_only=True)`` and Megatron-Bridge's ``pickle`` part
with an unpickler that loads tensors and plain types only, so a shard holding a malicious pickle is
refused with `UnsafeSampleError` and never runs code.

The cookers also take what Energon's default ``SampleDecoder`` delivers (a task encoder that keeps
it, such as a plain ``DefaultTaskEncoder`` subclass): tensors, PIL images, parsed JSON, strings.
That decoder unpickles ``.pth`` parts with ``weights_only=False`` and ``pickle`` parts with
``pickle.loads`` *before* any cooker runs, so a malicious shard has already run its code by then:
a cooker accepts such a part only when it is a tensor (or Bridge's dict of tensors) and logs a
warning once per process. Use it on trusted data only, or use `SafeSampleDecoder`, which decodes
like it but leaves pickle-based parts as bytes.
"""

from __future__ import annotations

import io
import json
import logging
import math
import pickle
import re
from typing import Any, Literal, TypedDict

import numpy as np
import torch
from megatron.energon import basic_sample_keys, stateless

from shardcook.energon import arguments
from shardcook.energon.errors import SampleDecodeError, UnsafeSampleError
from shardcook.energon.samples import DiffusionSample, PartsSample, RawImageSample
from shardcook.errors import ConfigError
from shardcook.layouts import IMAGE_PARTS

__all__ = [
    "IMAGE_PARTS",
    "ImageFormat",
    "cook_bridge_crude",
    "cook_bridge_flux",
    "cook_parts",
    "cook_preencoded_diffusion",
    "cook_raw_images",
    "load_pickled_tensors",
    "load_tensor",
]

#: How `cook_raw_images` returns images: uint8 CHW tensors or RGB PIL images.
ImageFormat = Literal["tensor", "pil"]

log = logging.getLogger(__name__)
_warned_predecoded = False


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


def check_crude(sample: object, cooker: str) -> None:
    """Refuses what is no crude sample, in one sentence naming what `cooker` takes (else a
    TypeError from deep inside says nothing of it)."""
    if not isinstance(sample, dict):
        given = "None" if sample is None else f"a {type(sample).__name__}"
        raise ConfigError(
            f"{cooker} takes a crude sample, a dict of the sample's parts by name (bytes, or what "
            f"Energon's decoder made of them) with Energon's __key__, not {given}.")


def _key(sample: dict[str, Any]) -> str:
    return str(sample.get("__key__", "<unknown key>"))


def _part(sample: dict[str, Any], part: str) -> Any:
    """Returns `part` as it arrived (bytes, or what a decoder made of it), or a clear error when
    the sample lacks it."""
    try:
        return sample[part]
    except KeyError:
        parts = sorted(k for k in sample if not k.startswith("__"))
        raise SampleDecodeError(
            f"sample {_key(sample)!r} has no part {part!r} (it has: {', '.join(parts)})"
        ) from None


def _is_bytes(data: Any) -> bool:
    return isinstance(data, (bytes, bytearray, memoryview))


def _wrong_type(sample: dict[str, Any], part: str, data: Any, expected: str) -> SampleDecodeError:
    return SampleDecodeError(
        f"sample {_key(sample)!r}: part {part!r} arrived decoded as a {type(data).__name__}, "
        f"expected bytes or {expected}; set the task encoder's `decoder = None` so shardcook reads "
        "the raw bytes"
    )


def _warn_predecoded(sample: dict[str, Any], part: str) -> None:
    """Says once per process that a pickle-based part was unpickled before the cooker ran."""
    global _warned_predecoded
    if not _warned_predecoded:
        _warned_predecoded = True
        log.warning(
            "sample %r: part %r arrived already unpickled by Energon's default decoder, which "
            "runs any code a shard's pickle holds; for untrusted data set the task encoder's "
            "`decoder = None` (shardcook's task encoders do) so the part is loaded safely",
            _key(sample), part,
        )


def _tensor_part(sample: dict[str, Any], part: str) -> torch.Tensor:
    """A `.pth` part: bytes loaded safely, or the tensor a decoder already made."""
    data = _part(sample, part)
    if _is_bytes(data):
        return load_tensor(bytes(data), key=_key(sample), part=part)
    if isinstance(data, torch.Tensor):
        _warn_predecoded(sample, part)
        return data
    raise _wrong_type(sample, part, data, "a tensor")


def _json_part(sample: dict[str, Any], part: str) -> Any:
    """A JSON part: bytes parsed here, or what a decoder already parsed."""
    data = _part(sample, part)
    return json.loads(bytes(data)) if _is_bytes(data) else data


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
    data = _part(sample, part)
    if isinstance(data, str):
        return data
    if not _is_bytes(data):
        raise _wrong_type(sample, part, data, "a str")
    try:
        return bytes(data).decode("utf-8")
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
        meta = _json_part(sample, "meta.json")
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
    return _tensor_part(sample, part)


def _factor(meta: dict[str, Any], name: str) -> float | None:
    value = meta.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TypeError(f"{name} must be a finite number, not {value!r}")
    return float(value)


def _vae_factors(sample: dict[str, Any]) -> _VaeFactors:
    """`scaling_factor` and `shift_factor` from the optional `meta.json` (resample datasets)."""
    if "meta.json" not in sample:
        return {}
    try:
        meta = _json_part(sample, "meta.json")
        if not isinstance(meta, dict):
            return {}
        return _VaeFactors(
            scaling_factor=_factor(meta, "scaling_factor"),
            shift_factor=_factor(meta, "shift_factor"),
        )
    except (ValueError, TypeError) as e:
        raise SampleDecodeError(f"sample {_key(sample)!r}: part 'meta.json' is invalid: {e}") from e


@stateless
def cook_preencoded_diffusion(sample: dict[str, Any]) -> DiffusionSample:
    """Cooks a pre-encoded crude sample into a `DiffusionSample`.

    Args:
        sample: The crude sample from a `CrudeWebdataset`: the parts `latents.pth`,
            `prompt_embeds.pth`, `pooled_prompt_embeds.pth`, and optionally `caption.txt` (else
            the caption is ""), `meta.json` and the posterior `mean.pth` + `logvar.pth`, as bytes
            (`decoder = None`) or as Energon's default decoder made them (see the module
            docstring), plus Energon's `__key__`-style fields.

    Returns:
        The sample, keeping Energon's basic sample keys (key, restore key, subflavors, sources).

    Raises:
        ConfigError: `sample` is no dict.
        UnsafeSampleError: A `.pth` part holds a pickle beyond plain tensors.
        SampleDecodeError: A part is missing or unreadable.
    """
    check_crude(sample, "cook_preencoded_diffusion")
    return DiffusionSample(
        **basic_sample_keys(sample),
        latents=_tensor_part(sample, "latents.pth"),
        prompt_embeds=_tensor_part(sample, "prompt_embeds.pth"),
        pooled_prompt_embeds=_tensor_part(sample, "pooled_prompt_embeds.pth"),
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
        raise SampleDecodeError(
            f"sample {key!r}: part {part!r} is not a readable image: {e}") from e


def _decoded_to_pil(data: Any) -> Any:
    """An RGB PIL image from what Energon's image decoders make: a PIL image, a `[C, H, W]`
    tensor or an `[H, W, C]` array (uint8, or float in [0, 1]), or None for anything else."""
    from PIL import Image

    if isinstance(data, Image.Image):
        return data if data.mode == "RGB" else data.convert("RGB")
    if isinstance(data, torch.Tensor):
        t = data.detach().cpu()
        data = (t.permute(1, 2, 0) if t.ndim == 3 else t).numpy()
    if not isinstance(data, np.ndarray) or data.ndim not in (2, 3):
        return None
    if data.dtype != np.uint8:  # the float decoders scale to [0, 1]
        data = np.clip(np.rint(data.astype(np.float64) * 255), 0, 255).astype(np.uint8)
    if data.ndim == 3 and data.shape[2] == 1:
        data = data[:, :, 0]
    return Image.fromarray(data).convert("RGB")


def _image(sample: dict[str, Any], part: str, image_format: ImageFormat | None) -> Any:
    """The sample's image in `image_format`; None keeps a decoded image as its decoder made it
    (PIL made RGB) and gives bytes as a uint8 tensor."""
    data = _part(sample, part)
    if _is_bytes(data):
        img = _decode_image(bytes(data), key=_key(sample), part=part)
        image_format = image_format or "tensor"
    else:
        img = _decoded_to_pil(data)
        if img is None:
            raise _wrong_type(sample, part, data, "an image (PIL, tensor or array)")
        if image_format is None:
            return img if not isinstance(data, (torch.Tensor, np.ndarray)) else data
    if image_format == "pil":
        return img
    return torch.from_numpy(np.array(img, dtype=np.uint8)).permute(2, 0, 1).contiguous()


@stateless
def cook_raw_images(
    sample: dict[str, Any], *, image_format: ImageFormat | None = None
) -> RawImageSample:
    """Cooks a raw crude sample (`jpg|png|webp`, `txt`, `meta.json`) into a `RawImageSample`,
    which is also the mapping Primus's raw cooker returns (`sample["__key__"]` and Energon's other
    basic sample keys, `sample["images"]`, `sample["txt"]`).

    Args:
        sample: The crude sample, parts as bytes (`decoder = None`) or as Energon's default
            decoder made them (PIL images, tensors, arrays, str).
        image_format: `"tensor"` for a `uint8` `[3, H, W]` tensor, `"pil"` for an RGB PIL image;
            None (default) gives bytes as a `uint8` tensor and keeps an image Energon's decoder
            already made as it is (a PIL image made RGB).

    Returns:
        The sample, keeping Energon's basic sample keys.

    Raises:
        ConfigError: `sample` is no dict.
        SampleDecodeError: No image part, an undecodable image, or a missing caption.
    """
    check_crude(sample, "cook_raw_images")
    if image_format is not None:
        arguments.check(image_format=image_format)
    part = next((p for p in IMAGE_PARTS if p in sample), None)
    if part is None:
        parts = sorted(k for k in sample if not k.startswith("__"))
        raise SampleDecodeError(
            f"sample {_key(sample)!r} has no image part ({'|'.join(IMAGE_PARTS)}); it has: "
            f"{', '.join(parts)}"
        )
    return RawImageSample(
        **basic_sample_keys(sample),
        image=_image(sample, part, image_format),
        caption=_text(sample, "txt"),
        **_meta_fields(sample),
    )


@stateless
def cook_parts(sample: dict[str, Any]) -> PartsSample:
    """Cooks any crude sample into a `PartsSample`: every part as it arrived (bytes, or what the
    task encoder's decoder made of it), keeping Energon's basic sample keys. The cooker of a
    layout that declares none of its own."""
    check_crude(sample, "cook_parts")
    return PartsSample(**basic_sample_keys(sample),
                       parts={name: data for name, data in sample.items()
                              if not name.startswith("__")})


# ---- megatron-bridge layout (Megatron-Bridge's FLUX recipe: `pth`, `pickle`, `json`) ----------


def _storage_weights_only(data: bytes) -> Any:
    """What torch's `_load_from_bytes` does for a pickled storage, but with weights_only=True
    (torch's own runs an unrestricted torch.load on these bytes)."""
    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


class _PickledTensorsUnpickler(pickle.Unpickler):
    """Loads tensors and plain types (dict, list, str, numbers) and no other class."""

    def find_class(self, module: str, name: str) -> Any:
        from collections import OrderedDict

        from shardcook.dataset.check.tensorinfo import REBUILD_TENSOR, STORAGE_FROM_BYTES

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
    obj = _part(sample, EMBEDDINGS_PART)
    if _is_bytes(obj):
        obj = load_pickled_tensors(bytes(obj), key=key, part=EMBEDDINGS_PART)
    elif isinstance(obj, dict):
        _warn_predecoded(sample, EMBEDDINGS_PART)
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
        meta = _json_part(sample, META_PART)
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
        ConfigError: `sample` is no dict.
        UnsafeSampleError: The `pth` or `pickle` part holds more than tensors and plain types.
        SampleDecodeError: A part is missing or unreadable.
    """
    check_crude(sample, "cook_bridge_crude")
    from shardcook.layouts.bridge_flux import LATENT_PART

    return dict(
        **basic_sample_keys(sample),
        json=_bridge_json(sample),
        pth=_tensor_part(sample, LATENT_PART),
        pickle=_bridge_embeddings(sample),
    )


@stateless
def cook_bridge_flux(sample: dict[str, Any]) -> DiffusionSample:
    """Cooks a `megatron-bridge` sample into a `DiffusionSample` (latents unscaled, as stored;
    the json's `scaling_factor`/`shift_factor` scale them).

    Raises:
        ConfigError: `sample` is no dict.
        UnsafeSampleError: The `pth` or `pickle` part holds more than tensors and plain types.
        SampleDecodeError: A part is missing or unreadable.
    """
    check_crude(sample, "cook_bridge_flux")
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
