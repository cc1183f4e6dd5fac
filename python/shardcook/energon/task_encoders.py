"""Energon task encoders for shardcook datasets: cook with safe decoding, group by shape, stack.

All of them set ``decoder = None``, so Energon hands the cookers raw bytes and its default
decoder (which unpickles ``.pth`` parts with ``weights_only=False``) never runs.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from megatron.energon import Cooker, SampleDecoder, TaskEncoder, stateless

from shardcook.energon.cookers import ImageFormat, cook_preencoded_diffusion, raw_images_cooker
from shardcook.energon.samples import (
    DiffusionBatch,
    DiffusionSample,
    RawImageBatch,
    RawImageSample,
)
from shardcook.layouts import PREENCODED, RAW

__all__ = [
    "ENCODING_PREENCODED",
    "ENCODING_RAW",
    "DiffusionTaskEncoder",
    "EncodedDiffusionTaskEncoder",
    "RawDiffusionTaskEncoder",
]

#: The `encoding` subflavor values finalize writes into dataset.yaml (docs/FORMAT.md §5).
ENCODING_PREENCODED = PREENCODED.encoding
ENCODING_RAW = RAW.encoding


def _stack_diffusion(samples: list[DiffusionSample]) -> DiffusionBatch:
    return DiffusionBatch.from_samples(
        samples,
        latents=torch.stack([s.latents for s in samples]),
        prompt_embeds=torch.stack([s.prompt_embeds for s in samples]),
        pooled_prompt_embeds=torch.stack([s.pooled_prompt_embeds for s in samples]),
        captions=[s.caption for s in samples],
        sizes=[s.size for s in samples],
    )


def _stack_raw(samples: list[RawImageSample]) -> RawImageBatch:
    if isinstance(samples[0].image, torch.Tensor):
        images: torch.Tensor | list[Any] = torch.stack([s.image for s in samples])
    else:
        images = [s.image for s in samples]
    return RawImageBatch.from_samples(
        samples,
        images=images,
        captions=[s.caption for s in samples],
        sizes=[s.size for s in samples],
    )


def _diffusion_group(sample: DiffusionSample) -> Hashable:
    return (
        ENCODING_PREENCODED,
        tuple(sample.latents.shape),
        tuple(sample.prompt_embeds.shape),
        tuple(sample.pooled_prompt_embeds.shape),
    )


def _raw_group(sample: RawImageSample) -> Hashable:
    img = sample.image
    hw = tuple(img.shape[-2:]) if isinstance(img, torch.Tensor) else (img.height, img.width)
    return (ENCODING_RAW, hw)


class EncodedDiffusionTaskEncoder(
    TaskEncoder[DiffusionSample, DiffusionSample, DiffusionBatch, DiffusionBatch]
):
    """Reads pre-encoded datasets into `DiffusionBatch`es, one latent shape per batch.

    Example:
        >>> ds = get_train_dataset(path, task_encoder=EncodedDiffusionTaskEncoder(), ...)
    """

    #: Energon's default decoder is off: the cooker loads `.pth` bytes with weights_only=True.
    decoder: SampleDecoder | None = None

    def __init__(self) -> None:
        self.cookers = [Cooker(cook_preencoded_diffusion)]

    @stateless
    def batch(self, samples: list[DiffusionSample]) -> DiffusionBatch:
        """Stacks samples of one shape group into a batch."""
        return _stack_diffusion(samples)

    def batch_group_criterion(self, sample: DiffusionSample) -> tuple[Hashable, int | None]:
        """Groups samples by tensor shapes so every batch holds one shape (bucketing)."""
        return _diffusion_group(sample), None


class RawDiffusionTaskEncoder(
    TaskEncoder[RawImageSample, RawImageSample, RawImageBatch, RawImageBatch]
):
    """Reads raw image datasets into `RawImageBatch`es, one image size per batch.

    Args:
        image_format: `"tensor"` (uint8 `[B, 3, H, W]`, default) or `"pil"` (lists of PIL images).
    """

    decoder: SampleDecoder | None = None

    def __init__(self, *, image_format: ImageFormat = "tensor") -> None:
        self.cookers = [Cooker(raw_images_cooker(image_format))]

    @stateless
    def batch(self, samples: list[RawImageSample]) -> RawImageBatch:
        """Stacks images of one size into a batch (or lists them, for PIL)."""
        return _stack_raw(samples)

    def batch_group_criterion(self, sample: RawImageSample) -> tuple[Hashable, int | None]:
        """Groups samples by image size so every batch holds one size (bucketing)."""
        return _raw_group(sample), None


class DiffusionTaskEncoder(
    TaskEncoder[
        DiffusionSample | RawImageSample,
        DiffusionSample | RawImageSample,
        DiffusionBatch | RawImageBatch,
        DiffusionBatch | RawImageBatch,
    ]
):
    """Carries both cookers and picks one per dataset by its `encoding` subflavor.

    Use it for metadatasets that blend pre-encoded and raw datasets. Batches never mix the two:
    samples are grouped by encoding and shape.

    Args:
        image_format: How raw images are returned, `"tensor"` (default) or `"pil"`.
    """

    decoder: SampleDecoder | None = None

    def __init__(self, *, image_format: ImageFormat = "tensor") -> None:
        self.cookers = [
            Cooker(cook_preencoded_diffusion, has_subflavors={"encoding": ENCODING_PREENCODED}),
            Cooker(raw_images_cooker(image_format), has_subflavors={"encoding": ENCODING_RAW}),
        ]

    @stateless
    def batch(
        self, samples: list[DiffusionSample | RawImageSample]
    ) -> DiffusionBatch | RawImageBatch:
        """Stacks samples of one group into the batch type of their encoding."""
        if isinstance(samples[0], DiffusionSample):
            return _stack_diffusion(samples)  # type: ignore[arg-type]
        return _stack_raw(samples)  # type: ignore[arg-type]

    def batch_group_criterion(
        self, sample: DiffusionSample | RawImageSample
    ) -> tuple[Hashable, int | None]:
        """Groups samples by encoding and shape."""
        if isinstance(sample, DiffusionSample):
            return _diffusion_group(sample), None
        return _raw_group(sample), None
