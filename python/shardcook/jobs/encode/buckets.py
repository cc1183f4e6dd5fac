"""NeMo AutoModel's multi-tier resolution buckets (its `MultiTierBucketCalculator`): for a pixel
budget, one bucket per standard aspect ratio, each side a multiple of the quantisation, and an
input's bucket is the one nearest its aspect ratio. The arithmetic is AutoModel's, step for
step, so the same input lands in the same `WxH` folder."""

from __future__ import annotations

import math
from dataclasses import dataclass

#: AutoModel's aspect ratios (width, height), in its order.
ASPECT_RATIOS = ((1, 2), (9, 16), (2, 3), (3, 4), (4, 5), (1, 1), (5, 4), (4, 3), (3, 2),
                 (16, 10), (5, 3), (16, 9), (2, 1), (21, 9))


@dataclass(frozen=True)
class Bucket:
    """One resolution bucket: its id (position by aspect ratio), (width, height), aspect."""

    id: int
    width: int
    height: int

    @property
    def aspect_ratio(self) -> float:
        return self.width / self.height

    @property
    def name(self) -> str:
        """The cache's folder of this bucket, `WxH`."""
        return f"{self.width}x{self.height}"


def _largest(aspect: float, max_pixels: int, q: int) -> tuple[int, int] | None:
    height = round(int(math.sqrt(max_pixels / aspect)) / q) * q
    width = round(int(height * aspect) / q) * q
    while width * height > max_pixels:
        if width >= height:
            width -= q
        else:
            height -= q
    if width < q or height < q:
        return None
    return width, height


def buckets(max_pixels: int, quantization: int) -> list[Bucket]:
    """Every bucket of the budget, by aspect ratio (ids as AutoModel numbers them)."""
    sizes: dict[tuple[int, int], None] = {}
    for w, h in ASPECT_RATIOS:
        size = _largest(w / h, max_pixels, quantization)
        if size is not None:
            sizes.setdefault(size)
    ordered = sorted(sizes, key=lambda r: r[0] / r[1])
    return [Bucket(n, w, h) for n, (w, h) in enumerate(ordered)]


def bucket_for(width: int, height: int, choices: list[Bucket]) -> Bucket:
    """The bucket whose aspect ratio is nearest `width / height` (the first on a tie)."""
    aspect = width / height
    return min(choices, key=lambda b: abs(b.aspect_ratio - aspect))


def cover_size(width: int, height: int, target: tuple[int, int]) -> tuple[int, int]:
    """The size an input is resized to before its centre is cropped to `target` (w, h): scaled
    to cover it, each side truncated, as AutoModel computes it."""
    scale = max(target[0] / width, target[1] / height)
    return int(width * scale), int(height * scale)
