"""The cooker of the `preencoded_numpy` layout (MLPerf Training Flux.1): bfloat16 tensors stored
as the `.npy` bytes of uint16, read with `allow_pickle=False`, and the json sidecar's `timestep`.

It gives the `DiffusionSample` of the other encoded layouts. MLPerf stores no latent, only the
VAE posterior, so `latents` is its mode scaled as FLUX.1's training scales it
(`0.3611 * (mean - 0.1159)`), and the sample records those factors, so a task encoder with
`resample_latents=True` draws a fresh latent from `mean`/`logvar` (its own factors win).
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import torch
from megatron.energon import basic_sample_keys, stateless

from shardcook.energon.cookers import check_crude
from shardcook.energon.errors import SampleDecodeError
from shardcook.energon.samples import DiffusionSample
from shardcook.layouts.mlperf import (
    CLIP_PART,
    FLUX_SCALING_FACTOR,
    FLUX_SHIFT_FACTOR,
    JSON_PART,
    LOGVAR_PART,
    MEAN_PART,
    T5_PART,
    TIMESTEP_COLUMN,
    TIMESTEPS,
)

__all__ = ["cook_preencoded_numpy_diffusion", "load_numpy_tensor"]


def _key(sample: dict[str, Any]) -> str:
    return str(sample.get("__key__", "<unknown key>"))


def load_numpy_tensor(data: bytes, *, key: str, part: str) -> torch.Tensor:
    """A bfloat16 tensor from the `.npy` bytes of its uint16 bits (never unpickled).

    Raises:
        SampleDecodeError: The bytes are not a `.npy` array of uint16.
    """
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise SampleDecodeError(
            f"sample {key!r}: part {part!r} is not a readable .npy array "
            f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    if array.dtype != np.uint16:
        raise SampleDecodeError(
            f"sample {key!r}: part {part!r} holds {array.dtype}, not uint16 (bfloat16 bits)"
        )
    return torch.from_numpy(np.ascontiguousarray(array)).view(torch.bfloat16)


def _tensor(sample: dict[str, Any], part: str) -> torch.Tensor:
    data = sample.get(part)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        parts = sorted(k for k in sample if not k.startswith("__"))
        what = "has no" if data is None else f"holds a {type(data).__name__} in"
        raise SampleDecodeError(f"sample {_key(sample)!r} {what} part {part!r} (it has: "
                                f"{', '.join(parts)}); read it with decoder = None")
    return load_numpy_tensor(bytes(data), key=_key(sample), part=part)


def _timestep(sample: dict[str, Any]) -> torch.Tensor | None:
    """The sidecar's `timestep` as an int64 scalar, None when it has none (train)."""
    raw = sample.get(JSON_PART)
    if raw is None:
        return None
    try:
        meta = raw if isinstance(raw, dict) else json.loads(bytes(raw))
    except (ValueError, TypeError, RecursionError) as e:
        raise SampleDecodeError(f"sample {_key(sample)!r}: part 'json' is not JSON: {e}") from None
    t = meta.get(TIMESTEP_COLUMN) if isinstance(meta, dict) else None
    if t is None:
        return None
    if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t < TIMESTEPS:
        raise SampleDecodeError(f"sample {_key(sample)!r}: the json's timestep is {t!r}, not an "
                                f"integer in [0, {TIMESTEPS})")
    return torch.tensor(t, dtype=torch.int64)


@stateless
def cook_preencoded_numpy_diffusion(sample: dict[str, Any]) -> DiffusionSample:
    """Cooks an MLPerf pre-encoded crude sample (`t5.bytes`, `clip.bytes`, `mean.bytes`,
    `logvar.bytes`, `json`) into a `DiffusionSample` with `mean`, `logvar` and, on the
    validation split, `timestep`.

    Raises:
        ConfigError: `sample` is no crude sample.
        SampleDecodeError: A part is missing or unreadable, or the timestep is out of range.
    """
    check_crude(sample, "cook_preencoded_numpy_diffusion")
    mean = _tensor(sample, MEAN_PART)
    latents = FLUX_SCALING_FACTOR * (mean.float() - FLUX_SHIFT_FACTOR)
    return DiffusionSample(
        **basic_sample_keys(sample),
        latents=latents.to(mean.dtype),
        prompt_embeds=_tensor(sample, T5_PART),
        pooled_prompt_embeds=_tensor(sample, CLIP_PART),
        mean=mean,
        logvar=_tensor(sample, LOGVAR_PART),
        scaling_factor=FLUX_SCALING_FACTOR,
        shift_factor=FLUX_SHIFT_FACTOR,
        timestep=_timestep(sample),
    )
