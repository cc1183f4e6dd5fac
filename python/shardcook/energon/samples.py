"""The sample and batch types that shardcook's cookers and task encoders produce."""

from __future__ import annotations

from typing import Any

import torch
from megatron.energon import Batch, Sample, edataclass

__all__ = ["DiffusionBatch", "DiffusionSample", "RawImageBatch", "RawImageSample"]


@edataclass
class DiffusionSample(Sample):
    """One pre-encoded sample (docs/FORMAT.md §3, `encoding: preencoded`).

    Tensors keep the dtype they were stored with (bf16 by default).

    Attributes:
        latents: VAE latent `[C, H/8, W/8]`, already shifted and scaled.
        prompt_embeds: T5 last hidden state `[L, D_t5]`.
        pooled_prompt_embeds: CLIP pooled output `[D_clip]`.
        caption: The caption the embeddings were computed from.
        source: Where the input came from (`meta.json`), when present.
        orig_size: `(h, w)` of the input image before resizing, when present.
        crop: `(top, left)` of the crop in the resized image, when present.
        size: `(H, W)` of the image the latent was encoded from, when present.
    """

    latents: torch.Tensor
    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    caption: str
    source: str | None = None
    orig_size: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    size: tuple[int, int] | None = None


@edataclass
class RawImageSample(Sample):
    """One raw sample (docs/FORMAT.md §3, `encoding: raw`): an RGB image and its caption.

    Attributes:
        image: `uint8` tensor `[3, H, W]`, or a `PIL.Image.Image` in RGB mode when the cooker was
            asked for PIL images.
        caption: The caption (`txt` part).
        source: Where the input came from (`meta.json`), when present.
        orig_size: `(h, w)` of the input image before resizing, when present.
        crop: `(top, left)` of the crop in the resized image, when present.
        size: `(H, W)` of the stored image, when present.
    """

    image: torch.Tensor | Any
    caption: str
    source: str | None = None
    orig_size: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    size: tuple[int, int] | None = None


@edataclass
class DiffusionBatch(Batch):
    """A batch of `DiffusionSample`s of one latent shape, stacked along a new first dimension.

    Attributes:
        latents: `[B, C, H/8, W/8]`.
        prompt_embeds: `[B, L, D_t5]`.
        pooled_prompt_embeds: `[B, D_clip]`.
        captions: The B captions.
        sizes: The B `size` values from `meta.json` (None where absent).
    """

    latents: torch.Tensor
    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    captions: list[str]
    sizes: list[tuple[int, int] | None]


@edataclass
class RawImageBatch(Batch):
    """A batch of `RawImageSample`s of one image size.

    Attributes:
        images: `uint8` tensor `[B, 3, H, W]`, or a list of B PIL images when the cooker yields PIL.
        captions: The B captions.
        sizes: The B `size` values from `meta.json` (None where absent).
    """

    images: torch.Tensor | list[Any]
    captions: list[str]
    sizes: list[tuple[int, int] | None]
