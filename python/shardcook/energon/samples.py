"""The sample and batch types that shardcook's cookers and task encoders produce.

Batches are mappings (`MutableMapping`s over their own fields), as Primus's batch dicts are: their
keys are the values a training step consumes (`latents`, `prompt_embeds`, ...; a raw batch's
`images` and `txt`), so `{k: v.cuda(non_blocking=True) for k, v in batch.items()}` moves a
pre-encoded batch to the GPU.
Everything else (captions, sizes, Energon's `__key__`) is an attribute. A raw sample is a mapping
too, with the keys of the dict Primus's raw cooker returns: Energon's basic sample keys
(`__key__`, `__restore_key__`, `__subflavors__`, `__sources__`), `images` and `txt`.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any, ClassVar

import torch
from megatron.energon import Batch, Sample, edataclass

__all__ = ["DiffusionBatch", "DiffusionSample", "PartsSample", "RawImageBatch", "RawImageSample"]

#: Energon's basic sample keys (what `basic_sample_keys` forwards), each its own field's name.
_BASIC_KEYS = {name: name for name in ("__key__", "__restore_key__", "__subflavors__",
                                       "__sources__")}


class _FieldMapping(MutableMapping[str, Any]):
    """Some fields of a dataclass as a mapping: `_KEYS` maps each key to its field, and a field
    holding None is no key (as Primus leaves `mean` out of a batch without it).

    It is mutable so that torch's DataLoader (`default_convert`, `pin_memory`) copies it and
    updates the copy, keeping the class and its other fields, instead of making a plain dict.
    Assigning replaces a field's value; the keys themselves are fixed.
    """

    _KEYS: ClassVar[dict[str, str]] = {}

    def _present(self) -> list[str]:
        return [key for key, name in self._KEYS.items() if getattr(self, name) is not None]

    def __getitem__(self, key: str) -> Any:
        name = self._KEYS.get(key) if isinstance(key, str) else None
        value = None if name is None else getattr(self, name)
        if value is None:
            raise KeyError(
                f"{type(self).__name__} has no key {key!r}; its keys are "
                f"{', '.join(self._present())}; read its other fields as attributes"
            )
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self._KEYS:
            raise KeyError(
                f"{type(self).__name__} has a fixed set of keys ({', '.join(self._KEYS)}), not "
                f"{key!r}; copy it into a dict to add keys: dict(batch)"
            )
        setattr(self, self._KEYS[key], value)

    def __delitem__(self, key: str) -> None:
        self[key]  # the KeyError above for a key it does not hold
        setattr(self, self._KEYS[key], None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._present())

    def __len__(self) -> int:
        return len(self._present())


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
class RawImageSample(_FieldMapping, Sample):
    """One raw sample (docs/FORMAT.md §3, `encoding: raw`): an RGB image and its caption.

    As a mapping it has the keys of the dict Primus's raw cooker returns: `sample["images"]` is
    `sample.image`, `sample["txt"]` is `sample.caption`, and Energon's basic sample keys
    (`sample["__key__"]`, `__restore_key__`, `__subflavors__`, `__sources__`) are its fields of
    those names.

    Attributes:
        image: `uint8` tensor `[3, H, W]`, or a `PIL.Image.Image` in RGB mode (see
            `cook_raw_images` for which), or the image as Energon's decoder made it.
        caption: The caption (`txt` part).
        source: Where the input came from (`meta.json`), when present.
        orig_size: `(h, w)` of the input image before resizing, when present.
        crop: `(top, left)` of the crop in the resized image, when present.
        size: `(H, W)` of the stored image, when present.
    """

    _KEYS: ClassVar[dict[str, str]] = {**_BASIC_KEYS, "images": "image", "txt": "caption"}

    image: torch.Tensor | Any
    caption: str
    source: str | None = None
    orig_size: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    size: tuple[int, int] | None = None


@edataclass
class DiffusionBatch(_FieldMapping, Batch):
    """A batch of `DiffusionSample`s of one latent shape, stacked along a new first dimension.

    Its keys are the tensors: `latents`, `prompt_embeds`, `pooled_prompt_embeds`, and `mean` and
    `logvar` when the samples carry them and the task encoder did not already draw `latents`
    from them, and `timestep` on an MLPerf validation batch. `batch["latents"]` is
    `batch.latents`; `captions` and `sizes` are attributes only.

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

    _KEYS: ClassVar[dict[str, str]] = {
        name: name
        for name in ("latents", "prompt_embeds", "pooled_prompt_embeds", "mean", "logvar",
                     "timestep")
    }

    latents: torch.Tensor
    prompt_embeds: torch.Tensor
    pooled_prompt_embeds: torch.Tensor
    captions: list[str]
    sizes: list[tuple[int, int] | None]
    mean: torch.Tensor | None = None
    logvar: torch.Tensor | None = None
    timestep: torch.Tensor | None = None


@edataclass
class RawImageBatch(_FieldMapping, Batch):
    """A batch of `RawImageSample`s of one image size.

    Its keys are Primus's: `batch["images"]` is `batch.images` and `batch["txt"]` is
    `batch.captions`; `sizes` is an attribute only.

    Attributes:
        images: A list of B RGB PIL images, or a `uint8` tensor `[B, 3, H, W]` when the task
            encoder was asked for tensors.
        captions: The B captions.
        sizes: The B `size` values from `meta.json` (None where absent).
    """

    _KEYS: ClassVar[dict[str, str]] = {"images": "images", "txt": "captions"}

    images: torch.Tensor | list[Any]
    captions: list[str]
    sizes: list[tuple[int, int] | None]

    @property
    def txt(self) -> list[str]:
        """The captions, under Primus's name."""
        return self.captions


@edataclass
class PartsSample(Sample):
    """A sample of a layout that declares no cooker of its own (`cook_parts`): its parts by name,
    as the task encoder's decoder made them. Batched by Energon's default rules, a batch is a
    `PartsSample` whose `parts` map each name to the stacked tensors or the list of values."""

    parts: dict[str, Any]
