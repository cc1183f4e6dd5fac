"""The sample and batch types that shardcook's cookers and task encoders produce.

Batches answer both attribute access (`batch.latents`) and the dict access Primus's training code
uses (`batch["latents"]`, `batch["txt"]`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar

import torch
from megatron.energon import Batch, Sample, edataclass

__all__ = ["DiffusionBatch", "DiffusionSample", "RawImageBatch", "RawImageSample"]


class _DictAccess:
    """`batch[name]`, `name in batch`, `keys()` and `get()` over a batch's data fields.

    The keys are the fields that hold a value (None fields are absent, as Primus leaves `mean`
    out of a batch without it) plus `_ALIASES`, other names Primus uses for a field.
    """

    _ALIASES: ClassVar[dict[str, str]] = {}

    def keys(self) -> list[str]:
        """The names `batch[name]` answers, in field order, then the aliases."""
        names = [
            f.name
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
            if not f.name.startswith("__") and getattr(self, f.name) is not None
        ]
        return names + [alias for alias, name in self._ALIASES.items() if name in names]

    def __getitem__(self, name: str) -> Any:
        if name not in self.keys():
            raise KeyError(f"{type(self).__name__} has no {name!r}; it has {', '.join(self.keys())}")
        return getattr(self, self._ALIASES.get(name, name))

    def __contains__(self, name: object) -> bool:
        return name in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def get(self, name: str, default: Any = None) -> Any:
        """`batch[name]`, or `default` when the batch has no such key."""
        return self[name] if name in self.keys() else default


@edataclass
class DiffusionSample(Sample):
    """One pre-encoded sample (docs/FORMAT.md §3, `encoding: preencoded`).

    Tensors keep the dtype they were stored with (bf16 by default).

    Attributes:
        latents: VAE latent `[C, H/8, W/8]`, already shifted and scaled.
        prompt_embeds: T5 last hidden state `[L, D_t5]`.
        pooled_prompt_embeds: CLIP pooled output `[D_clip]`.
        caption: The caption the embeddings were computed from ("" when the sample has none).
        mean: The VAE posterior mean `[C, H/8, W/8]`, unscaled (`mean.pth`), when stored.
        logvar: The VAE posterior log-variance, unscaled (`logvar.pth`), when stored.
        scaling_factor: The VAE's scaling factor (`meta.json`), when recorded.
        shift_factor: The VAE's shift factor (`meta.json`), when recorded.
        source: Where the input came from (`meta.json`), when present.
        orig_size: `(h, w)` of the input image before resizing, when present.
        crop: `(top, left)` of the crop in the resized image, when present.
        size: `(H, W)` of the image the latent was encoded from, when present.
        timestep: The validation timestep t (sigma = t / 8), an int64 scalar, on MLPerf's
            validation split (`preencoded_numpy` json sidecar); None elsewhere.
    """

    latents: torch.Tensor
    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    caption: str = ""
    mean: torch.Tensor | None = None
    logvar: torch.Tensor | None = None
    scaling_factor: float | None = None
    shift_factor: float | None = None
    source: str | None = None
    orig_size: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    size: tuple[int, int] | None = None
    timestep: torch.Tensor | None = None


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
class DiffusionBatch(_DictAccess, Batch):
    """A batch of `DiffusionSample`s of one latent shape, stacked along a new first dimension.

    `batch["latents"]` is `batch.latents`, and so on for every field that holds a value.

    Attributes:
        latents: `[B, C, H/8, W/8]` (freshly drawn from mean and logvar when the task encoder
            resamples).
        prompt_embeds: `[B, L, D_t5]`.
        pooled_prompt_embeds: `[B, D_clip]`.
        captions: The B captions.
        sizes: The B `size` values from `meta.json` (None where absent).
        mean: `[B, C, H/8, W/8]` posterior means, when the samples carry them.
        logvar: `[B, C, H/8, W/8]` posterior log-variances, when the samples carry them.
        timestep: `[B]` int64 validation timesteps, when the samples carry them (all or none).
    """

    latents: torch.Tensor
    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    captions: list[str]
    sizes: list[tuple[int, int] | None]
    mean: torch.Tensor | None = None
    logvar: torch.Tensor | None = None
    timestep: torch.Tensor | None = None


@edataclass
class RawImageBatch(_DictAccess, Batch):
    """A batch of `RawImageSample`s of one image size.

    `batch["images"]` is `batch.images` and `batch["txt"]` is `batch.captions` (Primus's names).

    Attributes:
        images: A list of B RGB PIL images, or a `uint8` tensor `[B, 3, H, W]` when the task
            encoder was asked for tensors.
        captions: The B captions.
        sizes: The B `size` values from `meta.json` (None where absent).
    """

    _ALIASES: ClassVar[dict[str, str]] = {"txt": "captions"}

    images: torch.Tensor | list[Any]
    captions: list[str]
    sizes: list[tuple[int, int] | None]

    @property
    def txt(self) -> list[str]:
        """The captions, under Primus's name."""
        return self.captions
