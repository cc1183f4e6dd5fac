"""`SafeSampleDecoder`: Energon's default decoder without its unpickling.

Energon's `SampleDecoder` turns `.pth` parts into objects with `torch.load(weights_only=False)`
and `pickle`/`pkl`/`pyd` parts with `pickle.loads`, which runs whatever code a shard's pickle
holds. This decoder decodes everything else as Energon's does (images as asked, JSON, text, ...)
and hands those parts over as raw bytes, which shardcook's cookers load safely (tensors only).
"""

from __future__ import annotations

from typing import Any

from megatron.energon import SampleDecoder

__all__ = ["PICKLED_EXTENSIONS", "SafeSampleDecoder"]

#: Part extensions webdataset's decoder unpickles.
PICKLED_EXTENSIONS = ("pth", "pickle", "pkl", "pyd")


def _pickled(name: str) -> bool:
    return not name.startswith("__") and name.rsplit(".", 1)[-1].lower() in PICKLED_EXTENSIONS


class SafeSampleDecoder(SampleDecoder):
    """A drop-in for `megatron.energon.SampleDecoder` (same options) that leaves pickle-based
    parts as bytes.

    Example:
        >>> class MyTaskEncoder(DefaultTaskEncoder):
        ...     decoder = SafeSampleDecoder(image_decode="pil")
        ...     cookers = [Cooker(cook_preencoded_diffusion)]
    """

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        kept = {name: data for name, data in sample.items() if _pickled(name)}
        decoded = super().__call__({n: d for n, d in sample.items() if n not in kept})
        return {**decoded, **kept}

    def config(self) -> dict[str, Any]:
        return {**super().config(), "pickled_parts": "bytes"}
