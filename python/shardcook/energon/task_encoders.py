"""Energon task encoders for shardcook datasets: cook with safe decoding, group by shape, stack.

All of them set ``decoder = None``, so Energon hands the cookers raw bytes and its default
decoder (which unpickles ``.pth`` parts with ``weights_only=False``) never runs. Each builds its
cookers from the layout registry: the cooker of every layout whose reading spec names it, for
that layout's `encoding` subflavor, so a dataset of another layout is refused when the loader is
built, never cooked with the wrong cooker; a subclass that declares `cookers` at class level keeps
its own.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from megatron.energon import (
    Cooker,
    CrudeSample,
    DefaultTaskEncoder,
    FileStore,
    SampleDecoder,
    TaskEncoder,
    WorkerConfig,
    stateless,
)
from megatron.energon.errors import FatalSampleError

from shardcook.energon import arguments
from shardcook.energon.cookers import ImageFormat
from shardcook.energon.decoder import SafeSampleDecoder
from shardcook.energon.errors import SampleDecodeError, UnsafeSampleError
from shardcook.energon.samples import (
    DiffusionBatch,
    DiffusionSample,
    PartsSample,
    RawImageBatch,
    RawImageSample,
)
from shardcook.errors import ErrorKind
from shardcook.layouts import read_by, registry_function

__all__ = [
    "BridgeFluxTaskEncoder",
    "DiffusionTaskEncoder",
    "EncodedDiffusionTaskEncoder",
    "PartsTaskEncoder",
    "RawDiffusionTaskEncoder",
    "UnsafeSampleRefused",
]

#: The batch group keys of latent and image samples. Energon's checkpoints record a batch
#: group's samples under its key, so these stay as they were.
_LATENT_GROUP = "preencoded"
_IMAGE_GROUP = "raw"


@dataclass
class _LayoutCooker(Cooker[Any]):
    """A cooker for datasets whose `encoding` subflavor is `has_subflavors["encoding"]`, and
    for datasets that record no encoding (e.g. written by Primus or Megatron-Bridge without one)."""

    def is_match(self, subflavors: dict[str, Any]) -> bool:
        assert self.has_subflavors is not None
        return "encoding" not in subflavors or super().is_match(subflavors)


def registry_cookers(*readers: type, options: Mapping[str, Any] | None = None,
                     unmarked: bool = True) -> list[Cooker[Any]]:
    """The cookers of every layout whose reading spec names one of `readers`: each its layout's
    cooker, given the `options` its spec asks for, for datasets whose `encoding` subflavor is
    that layout's. With `unmarked`, a layout that `reads_unmarked` also reads datasets recording
    no encoding; those come last, so a dataset that records one meets its own cooker first."""
    marked: list[Cooker[Any]] = []
    fallback: list[Cooker[Any]] = []
    for reader in readers:
        for layout in read_by(reader):
            spec = layout.reading
            assert spec.cooker is not None, f"{layout.name} names a task encoder but no cooker"
            cook = registry_function(spec.cooker)
            if spec.cooker_options:
                given = options or {}
                cook = stateless(functools.partial(
                    cook, **{name: given[name] for name in spec.cooker_options}))
            subflavors = {"encoding": layout.encoding}
            if unmarked and spec.reads_unmarked:
                fallback.append(_LayoutCooker(cook, has_subflavors=subflavors))
            else:
                marked.append(Cooker(cook, has_subflavors=subflavors))
    return marked + fallback


def _declares_cookers(encoder: TaskEncoder[Any, Any, Any, Any]) -> bool:
    """Whether a subclass outside shardcook declared `cookers` at class level (they win)."""
    for cls in type(encoder).__mro__:
        if "cookers" in vars(cls):
            return cls.__module__ != __name__ and not cls.__module__.startswith("megatron.")
    return False


def _init_common(encoder: Any, worker_config: object, cookers: list[Cooker[Any]]) -> None:
    """Keeps `worker_config` (Primus passes it; Energon takes it from `get_train_dataset`) and
    registers `cookers` unless the class declares its own."""
    arguments.check(worker_config=worker_config)
    encoder.worker_config = worker_config
    if not _declares_cookers(encoder):
        encoder.cookers = cookers


class UnsafeSampleRefused(UnsafeSampleError, FatalSampleError):
    """An unsafe part (`UnsafeSampleError`) as a task encoder raises it: Energon's FatalSampleError,
    which it neither hands to its error handler nor retries (`SYSTEM_EXCEPTIONS` in
    megatron/energon/errors.py), so loading stops at the first one instead of logging a traceback
    per sample up to 100 times in a row."""

    kind: ErrorKind = "unsafe_sample"


class _RefusesUnsafe(TaskEncoder[Any, Any, Any, Any]):
    """Cooks as Energon does; a part that holds code stops loading (`UnsafeSampleRefused`)."""

    @stateless
    def cook_crude_sample(self, sample: CrudeSample, cooker: Cooker[Any],
                          aux: dict[str, FileStore[Any]]) -> Any:
        try:
            return super().cook_crude_sample(sample, cooker, aux)
        except UnsafeSampleError as e:
            raise UnsafeSampleRefused(str(e)) from None


def _stack_optional(tensors: list[torch.Tensor | None]) -> torch.Tensor | None:
    """Stacks the tensors when every sample has one, else None."""
    present = [t for t in tensors if t is not None]
    if len(present) < len(tensors):
        return None
    return torch.stack(present)


def _stack_diffusion(samples: list[DiffusionSample]) -> DiffusionBatch:
    return DiffusionBatch.from_samples(
        samples,
        latents=torch.stack([s.latents for s in samples]),
        prompt_embeds=torch.stack([s.prompt_embeds for s in samples]),
        pooled_prompt_embeds=torch.stack([s.pooled_prompt_embeds for s in samples]),
        captions=[s.caption for s in samples],
        sizes=[s.size for s in samples],
        mean=_stack_optional([s.mean for s in samples]),
        logvar=_stack_optional([s.logvar for s in samples]),
        timestep=stack_timesteps(samples),
    )


def stack_timesteps(samples: list[DiffusionSample]) -> torch.Tensor | None:
    """The samples' validation timesteps as `[B]`, None when none has one.

    Raises:
        SampleDecodeError: Some samples carry a timestep and others not (a batch would then
            mix the validation estimator with random timesteps); the message names the keys.
    """
    without = [s.__key__ for s in samples if s.timestep is None]
    if len(without) == len(samples):
        return None
    if without:
        carrying = [s.__key__ for s in samples if s.timestep is not None]
        raise SampleDecodeError(
            f"a batch mixes samples with a timestep ({', '.join(carrying)}) and without one "
            f"({', '.join(without)}); keep validation samples (with timesteps) in a split of "
            "their own"
        )
    return torch.stack([s.timestep for s in samples if s.timestep is not None])


def resample_latent(
    sample: DiffusionSample, *, scaling_factor: float | None, shift_factor: float | None
) -> DiffusionSample:
    """A fresh latent from the sample's posterior: `scale * (mean + exp(logvar / 2) * eps - shift)`.

    `eps` comes from torch's global RNG, which Energon seeds per sample (worker seed and sample
    index) inside a `stateless(restore_seeds=True)` function, so a restored loader draws the same
    values. The factors are the given ones, else those the dataset recorded in `meta.json`.

    Raises:
        SampleDecodeError: The sample has no `mean.pth`/`logvar.pth`, or no factors are known.
    """
    key = sample.__key__
    if sample.mean is None or sample.logvar is None:
        raise SampleDecodeError(
            f"sample {key!r} has no mean.pth/logvar.pth to resample from; write the dataset with "
            "`shardcook encode --latent-mode resample` or read it with resample_latents=False"
        )
    scale = sample.scaling_factor if scaling_factor is None else scaling_factor
    shift = sample.shift_factor if shift_factor is None else shift_factor
    if scale is None or shift is None:
        raise SampleDecodeError(
            f"sample {key!r} records no scaling_factor/shift_factor in meta.json; pass "
            "scaling_factor= and shift_factor= to the task encoder"
        )
    mean = sample.mean.float()
    eps = torch.randn(mean.shape, dtype=torch.float32)
    latent = scale * (mean + torch.exp(0.5 * sample.logvar.float()) * eps - shift)
    # the posterior is used up: batches carry the drawn latent only
    return dataclasses.replace(
        sample, latents=latent.to(sample.latents.dtype), mean=None, logvar=None
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
        _LATENT_GROUP,
        tuple(sample.latents.shape),
        tuple(sample.prompt_embeds.shape),
        tuple(sample.pooled_prompt_embeds.shape),
    )


def _raw_group(sample: RawImageSample) -> Hashable:
    img = sample.image
    hw = tuple(img.shape[-2:]) if isinstance(img, torch.Tensor) else (img.height, img.width)
    return (_IMAGE_GROUP, hw)


class EncodedDiffusionTaskEncoder(
    _RefusesUnsafe,
    TaskEncoder[DiffusionSample, DiffusionSample, DiffusionBatch, DiffusionBatch]
):
    """Reads pre-encoded datasets into `DiffusionBatch`es, one latent shape per batch.

    Args:
        worker_config: Accepted for Primus compatibility (`EncodedDiffusionTaskEncoder(
            worker_config=wc)`) and kept as an attribute; Energon takes the worker config from
            `get_train_dataset`, not from the task encoder.
        resample_latents: Draw a fresh latent from each sample's stored posterior (`mean.pth`,
            `logvar.pth`) every time it is read, as Primus's `vae_latent_mode: resample`.
        scaling_factor: Overrides the VAE scaling factor recorded in the dataset (resample only).
        shift_factor: Overrides the VAE shift factor recorded in the dataset (resample only).

    Raises:
        ConfigError: A factor that is not a finite number, a `worker_config` that is not a
            `WorkerConfig`.

    Example:
        >>> ds = get_train_dataset(path, task_encoder=EncodedDiffusionTaskEncoder(), ...)
    """

    #: Energon's default decoder is off: the cooker loads `.pth` bytes with weights_only=True.
    decoder: SampleDecoder | None = None

    def __init__(
        self,
        worker_config: WorkerConfig | None = None,
        *,
        resample_latents: bool = False,
        scaling_factor: float | None = None,
        shift_factor: float | None = None,
    ) -> None:
        arguments.check(resample_latents=resample_latents, scaling_factor=scaling_factor,
                        shift_factor=shift_factor)
        _init_common(self, worker_config, registry_cookers(EncodedDiffusionTaskEncoder))
        self.resample_latents = resample_latents
        self.scaling_factor = scaling_factor
        self.shift_factor = shift_factor
        if resample_latents:  # only then pay for Energon's per-sample reseeding
            # A per-instance override: Energon calls whichever encode_sample the encoder has.
            self.encode_sample = self._resample  # type: ignore[method-assign]

    @stateless(restore_seeds=True)
    def _resample(self, sample: DiffusionSample) -> DiffusionSample:
        return resample_latent(
            sample, scaling_factor=self.scaling_factor, shift_factor=self.shift_factor
        )

    # Energon finds an overridden encode_sample by looking its __name__ up on TaskEncoder.
    _resample.__name__ = "encode_sample"

    @stateless
    def batch(self, samples: list[DiffusionSample]) -> DiffusionBatch:
        """Stacks samples of one shape group into a batch."""
        return _stack_diffusion(samples)

    def batch_group_criterion(self, sample: DiffusionSample) -> tuple[Hashable, int | None]:
        """Groups samples by tensor shapes so every batch holds one shape (bucketing)."""
        return _diffusion_group(sample), None


class RawDiffusionTaskEncoder(
    _RefusesUnsafe,
    TaskEncoder[RawImageSample, RawImageSample, RawImageBatch, RawImageBatch]
):
    """Reads raw image datasets into `RawImageBatch`es, one image size per batch.

    Batches give `images` (and `batch["images"]`) as a list of RGB PIL images and `txt` as a
    list of captions, as Primus's raw task encoder does.

    Args:
        worker_config: Accepted for Primus compatibility and kept as an attribute.
        image_format: `"pil"` (lists of PIL images, default) or `"tensor"` (uint8
            `[B, 3, H, W]`, faster to train on; what `get_diffusion_loader` uses).
    """

    decoder: SampleDecoder | None = None

    def __init__(
        self, worker_config: WorkerConfig | None = None, *, image_format: ImageFormat = "pil"
    ) -> None:
        arguments.check(image_format=image_format)
        _init_common(self, worker_config, registry_cookers(
            RawDiffusionTaskEncoder, options={"image_format": image_format}))

    @stateless
    def batch(self, samples: list[RawImageSample]) -> RawImageBatch:
        """Stacks images of one size into a batch (or lists them, for PIL)."""
        return _stack_raw(samples)

    def batch_group_criterion(self, sample: RawImageSample) -> tuple[Hashable, int | None]:
        """Groups samples by image size so every batch holds one size (bucketing)."""
        return _raw_group(sample), None


class DiffusionTaskEncoder(
    _RefusesUnsafe,
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
        worker_config: Accepted for Primus compatibility and kept as an attribute.
        image_format: How raw images are returned, `"tensor"` (default) or `"pil"`.
        resample_latents: Pre-encoded samples get a fresh latent from their posterior on every
            read (see `EncodedDiffusionTaskEncoder`).
    """

    decoder: SampleDecoder | None = None

    def __init__(
        self,
        worker_config: WorkerConfig | None = None,
        *,
        image_format: ImageFormat = "tensor",
        resample_latents: bool = False,
    ) -> None:
        arguments.check(resample_latents=resample_latents, image_format=image_format)
        # a blend's datasets each record their encoding: none is read as unmarked
        _init_common(self, worker_config, registry_cookers(
            EncodedDiffusionTaskEncoder, RawDiffusionTaskEncoder,
            options={"image_format": image_format}, unmarked=False))
        self.resample_latents = resample_latents
        if resample_latents:
            self.encode_sample = self._resample  # type: ignore[method-assign]  # as above

    @stateless(restore_seeds=True)
    def _resample(
        self, sample: DiffusionSample | RawImageSample
    ) -> DiffusionSample | RawImageSample:
        if isinstance(sample, DiffusionSample):
            return resample_latent(sample, scaling_factor=None, shift_factor=None)
        return sample

    _resample.__name__ = "encode_sample"

    @stateless
    def batch(
        self, samples: list[DiffusionSample | RawImageSample]
    ) -> DiffusionBatch | RawImageBatch:
        """Stacks samples of one group into the batch type of their encoding."""
        # groups never mix encodings (batch_group_criterion), so the filters keep every sample
        if isinstance(samples[0], DiffusionSample):
            return _stack_diffusion([s for s in samples if isinstance(s, DiffusionSample)])
        return _stack_raw([s for s in samples if isinstance(s, RawImageSample)])

    def batch_group_criterion(
        self, sample: DiffusionSample | RawImageSample
    ) -> tuple[Hashable, int | None]:
        """Groups samples by encoding and shape."""
        if isinstance(sample, DiffusionSample):
            return _diffusion_group(sample), None
        return _raw_group(sample), None


class BridgeFluxTaskEncoder(EncodedDiffusionTaskEncoder):
    """Reads `megatron-bridge` datasets (`encode --layout megatron-bridge`) into
    `DiffusionBatch`es, one latent shape per batch; latents stay unscaled, as stored."""

    def __init__(self, worker_config: WorkerConfig | None = None) -> None:
        super().__init__(worker_config)
        if not _declares_cookers(self):
            self.cookers = registry_cookers(BridgeFluxTaskEncoder)


class PartsTaskEncoder(DefaultTaskEncoder[PartsSample, PartsSample, PartsSample, PartsSample]):
    """Reads a layout that declares no cooker of its own (the registry's default reading): each
    sample's parts decoded as Energon's default decoder does, except that pickle-based parts stay
    bytes (`SafeSampleDecoder`), batched by Energon's default rules (tensors stacked, padded to
    the largest; anything else as a list).

    Args:
        worker_config: Accepted for Primus compatibility and kept as an attribute.
    """

    decoder: SampleDecoder | None = SafeSampleDecoder()

    def __init__(self, worker_config: WorkerConfig | None = None) -> None:
        super().__init__()
        _init_common(self, worker_config, registry_cookers(PartsTaskEncoder))
