"""`get_diffusion_loader`: an Energon loader for a shardcook dataset (or a blend of them), with the
task encoder its layout needs, wrapped for a Megatron training loop (see `wrapper`)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardcook.energon.wrapper import MegatronDataloaderWrapper
from shardcook.layouts.names import META_DIR, SPLIT_YAML

if TYPE_CHECKING:
    from shardcook.energon.cookers import ImageFormat

__all__ = [
    "dataset_encoding",
    "get_diffusion_loader",
    "task_encoder_for",
]

log = logging.getLogger(__name__)


def dataset_encoding(path: str | Path) -> str | None:
    """Returns the `encoding` subflavor of a prepared dataset, or None for a metadataset YAML.

    Args:
        path: A dataset folder (with `.nv-meta/dataset.yaml`) or a metadataset `.yaml` file.

    Raises:
        ConfigError: `path` is a JSONL dataset.
        DatasetError: `path` does not exist, the folder is not a prepared Energon dataset, or
            it has no `encoding`.
    """
    from shardcook.dataset import metadata
    from shardcook.errors import DatasetError
    from shardcook.layouts.names import DATASET_YAML

    _check_readable(path)
    p = Path(path)
    if p.is_file() and p.suffix in (".yaml", ".yml"):
        return None
    ds_yaml = metadata.meta_path(p, DATASET_YAML)
    dataset = metadata.read_dataset_yaml(p)
    if dataset is None:
        raise DatasetError(
            f"{p} is neither a metadataset .yaml nor a prepared dataset (no {ds_yaml}); "
            "run `shardcook finalize` on it first."
        )
    encoding = dataset.subflavors.get("encoding")
    if encoding is None:
        raise DatasetError(
            f"{ds_yaml} has no `subflavors: {{encoding: ...}}`; run `shardcook finalize` on the "
            "dataset or pass task_encoder= explicitly."
        )
    return str(encoding)


def _check_readable(path: str | Path) -> None:
    """Refuses, in one sentence, a `path` the loader cannot read: a JSONL dataset (Energon
    reads one, but no shardcook task encoder cooks its records), or a path or URL where there
    is nothing.

    Raises:
        ConfigError: `path` is no path, a URL no client opens or the store cannot be asked,
            or a JSONL dataset.
        DatasetError: there is nothing at `path`.
    """
    from shardcook.dataset.kind import JSONL, dataset_kind
    from shardcook.errors import ConfigError, DatasetError
    from shardcook.storage.location import locate

    where = locate(path, "path")
    what = dataset_kind(where)
    what.refuse_cache("shardcook's loader")
    if what.kind == JSONL:
        raise ConfigError(
            f"{path} is a JSONL dataset, which no shardcook task encoder reads; the loader takes a "
            "dataset folder of tar shards finalized by `shardcook finalize`, or a metadataset "
            ".yaml such as `shardcook blend` writes.")
    try:
        there = where.store.what_is()
    except OSError as e:
        raise ConfigError(where.store.failure("The dataset", "", "read", e)) from None
    if there is None:
        raise DatasetError(f"{path} does not exist; give a dataset folder (finalized by "
                           "`shardcook finalize`) or a metadataset .yaml.")


def task_encoder_for(
    path: str | Path, *, image_format: ImageFormat = "tensor", resample_latents: bool = False
) -> Any:
    """Picks the task encoder for a dataset from its `encoding` subflavor: the one its layout's
    reading spec names in the registry (`Layout.reading.task_encoder`; docs/FORMAT.md §3 lists
    them), given the options that task encoder takes. A metadataset YAML gives
    `DiffusionTaskEncoder`, which dispatches per dataset.

    Args:
        path: A dataset folder or a metadataset `.yaml`.
        image_format: For raw images, `"tensor"` or `"pil"`.
        resample_latents: Pre-encoded samples get a fresh latent from their stored posterior.

    Raises:
        DatasetError: The dataset has no or an unknown `encoding`.
        ConfigError: `resample_latents=True` for a dataset that is not pre-encoded.
    """
    from shardcook.energon.task_encoders import DiffusionTaskEncoder
    from shardcook.errors import ConfigError, DatasetError
    from shardcook.layouts import LAYOUTS, by_encoding, registry_function

    encoding = dataset_encoding(path)
    layout = None if encoding is None else by_encoding(encoding)
    if resample_latents and encoding is not None and (
            layout is None or "resample_latents" not in layout.reading.task_encoder_options):
        raise ConfigError(
            f"resample_latents=True resamples pre-encoded datasets, but {path} has encoding "
            f"{encoding!r}; leave it False."
        )
    if encoding is None:
        return DiffusionTaskEncoder(
            image_format=image_format,
            resample_latents=resample_latents,
        )
    if layout is None or layout.reading.task_encoder is None:
        readable = [repr(lay.encoding) for lay in LAYOUTS.values() if lay.reading.task_encoder]
        raise DatasetError(
            f"{path} has encoding {encoding!r}; shardcook.energon reads "
            f"{', '.join(readable[:-1])} and {readable[-1]}."
        )
    options = {"image_format": image_format, "resample_latents": resample_latents}
    return registry_function(layout.reading.task_encoder)(
        **{name: options[name] for name in layout.reading.task_encoder_options})


def megatron_data_parallel_group() -> Any:
    """Megatron's data-parallel group when `megatron.core.parallel_state` is initialized, else None.

    Tensor- and pipeline-parallel peers of one replica must read the same batches, so they share
    one data rank: the data-parallel one. Only looked up when the training code has imported
    parallel_state itself (importing megatron.core here would cost seconds for nothing).
    """
    parallel_state = sys.modules.get("megatron.core.parallel_state")
    if parallel_state is None or not parallel_state.model_parallel_is_initialized():
        return None
    return parallel_state.get_data_parallel_group()


def _worker_config(
    num_workers: int, rank: int | None, world_size: int | None, data_parallel_group: Any
) -> Any:
    from megatron.energon import WorkerConfig

    from shardcook.errors import ConfigError

    if (rank is None) != (world_size is None):
        raise ConfigError("Give both rank and world_size, or neither (then torch.distributed).")
    if rank is None:
        if data_parallel_group is None:
            data_parallel_group = megatron_data_parallel_group()
        return WorkerConfig.default_worker_config(
            num_workers=num_workers, data_parallel_group=data_parallel_group
        )
    assert world_size is not None
    if not 0 <= rank < world_size:
        raise ConfigError(f"rank must be in [0, world_size={world_size}), got {rank}.")
    return WorkerConfig(
        rank=rank,
        world_size=world_size,
        num_workers=num_workers,
        data_parallel_group=data_parallel_group,
    )


#: Top-level keys of Primus's metadataset template that are loader settings, not Energon's.
PRIMUS_LOADER_KEYS = ("shuffle_buffer_size", "max_samples_per_sequence")


def _metadataset_splits(path: Path) -> list[str] | None:
    """The splits a metadataset .yaml defines (`splits:` in both Metadataset and
    MetadatasetV2), or None when it has none (Energon then says why)."""
    from shardcook.energon.blend import read_metadataset
    from shardcook.errors import ConfigError

    data = read_metadataset(path)
    settings = [key for key in PRIMUS_LOADER_KEYS if key in data]
    if settings:
        raise ConfigError(
            f"{path} sets {', '.join(settings)} at the top level, which Energon's metadataset "
            f"does not take; remove it and pass {'=, '.join(settings)}= to get_diffusion_loader."
        )
    splits = data.get("splits")
    return [str(name) for name in splits] if isinstance(splits, dict) else None


def _dataset_splits(path: Path) -> list[str] | None:
    """The split parts a dataset folder's split.yaml names, or a metadataset's splits."""
    from shardcook.dataset import metadata
    from shardcook.errors import DatasetError

    if path.is_file():
        return _metadataset_splits(path)
    split_yaml = metadata.read_split_yaml(path)
    if split_yaml is None:
        raise DatasetError(
            f"{path} has no {META_DIR}/{SPLIT_YAML}; run `shardcook finalize {path}` first."
        )
    return list(split_yaml.parts)


def _check_metadata(path: Path) -> None:
    """Reads the Energon metadata of every dataset folder `path` reads through shardcook's
    readers, so a bad file is one sentence naming it rather than an error from inside Energon.

    Raises:
        DatasetError: A metadata file that is unreadable or malformed (a YAML tag that makes a
            list of a mapping, a count that is no whole number, ...).
    """
    from shardcook.dataset import metadata
    from shardcook.energon.state import dataset_folders

    for folder in dataset_folders(path):
        metadata.read_dataset_yaml(folder)
        metadata.read_split_yaml(folder)
        metadata.read_info_json(folder)


def _check_split(path: Path, split: str) -> None:
    """Refuses a split the dataset (or metadataset) at `path` does not define."""
    from shardcook.errors import ConfigError

    splits = _dataset_splits(path)
    if splits is not None and split not in splits:
        raise ConfigError(
            f"split {split!r} is not in {path}; it has {', '.join(splits) or 'no splits'}."
        )


def get_diffusion_loader(
    path: str | Path,
    *,
    batch_size: int,
    split: str = "train",
    num_workers: int = 4,
    shuffle_buffer_size: int | None = 100,
    max_samples_per_sequence: int | None = 100,
    image_format: ImageFormat = "tensor",
    rank: int | None = None,
    world_size: int | None = None,
    data_parallel_group: Any = None,
    repeat: bool = True,
    batch_drop_last: bool | None = None,
    task_encoder: Any = None,
    worker_config: Any = None,
    checkpoint_every_sec: float = 60,
    checkpoint_every_min_n_samples: int | None = None,
    resample_latents: bool = False,
) -> MegatronDataloaderWrapper:
    """Builds a checkpointable Energon loader for a shardcook dataset or metadataset, wrapped.

    The task encoder is picked from the dataset's `encoding` subflavor (see `task_encoder_for`).
    Rank and world size are the data-parallel ones, unless given: within `data_parallel_group`;
    without it, within Megatron's data-parallel group when `megatron.core.parallel_state` is
    initialized (so the tensor- and pipeline-parallel ranks of one replica get identical
    batches); otherwise across all of `torch.distributed` (every process reads different samples,
    which is right only without tensor or pipeline parallelism); a single process when
    torch.distributed is not initialized.

    Args:
        path: A dataset folder or a metadataset `.yaml` (e.g. from `shardcook blend`), or a
            dataset folder's URL (`msc://PROFILE/path`, `s3://bucket/path`): Energon reads the
            bucket; shardcook's checks read its small files and the split's first sample
            through a scratch folder in the temporary folder, removed before this returns.
        batch_size: Micro-batch size per rank.
        split: `"train"` reads with shuffling and repetition; any other split (`"val"`, `"test"`)
            reads in order, one pass per cycle.
        num_workers: Worker processes per rank (0 reads in the calling process).
        shuffle_buffer_size: Sample shuffle buffer for training (None or 1 to disable).
        max_samples_per_sequence: Longest run of consecutive samples read from one shard slice
            before switching (training only).
        image_format: Raw datasets only: `"tensor"` or `"pil"`.
        rank: Data-parallel rank; give with `world_size` to override the above.
        world_size: Data-parallel world size.
        data_parallel_group: The torch.distributed group to take rank and world size from
            (default: Megatron's data-parallel group when parallel_state is initialized).
        repeat: Training only: False makes each pass one epoch (the wrapper still cycles).
        batch_drop_last: Drop the last, smaller batch of each shape group; None (default) drops
            it for `"train"` (every step gets a full batch) and keeps it for other splits (every
            sample is evaluated).
        task_encoder: Use this task encoder instead of picking one; it must read every dataset
            the split reads (checked before the first batch).
        worker_config: Use this `megatron.energon.WorkerConfig` instead of building one.
        checkpoint_every_sec: Energon's internal worker checkpoint interval.
        checkpoint_every_min_n_samples: Energon's minimum samples between worker checkpoints.
        resample_latents: Pre-encoded datasets written with `--latent-mode resample`: draw a
            fresh latent from each sample's posterior on every read (refused for other datasets;
            with `task_encoder=`, give it to the task encoder instead).

    Returns:
        A `MegatronDataloaderWrapper` around Energon's `SavableDataLoader` (what
        `get_savable_loader` builds); its saved states are Energon's own and restore, through the
        wrapper or the loader, only into a loader of the same dataset (by content: shard names,
        sizes and sample counts, so also after `finalize --force` over the same shards), split,
        `num_workers` and data-parallel size.

    Raises:
        ConfigError: A bad argument (`batch_size`, `num_workers`, a `split` the dataset lacks,
            `max_samples_per_sequence=0`, a `task_encoder` or `worker_config` of the wrong
            type, ...), or a task encoder that cannot read the dataset (naming the one that does).
        DatasetError: The folder is not a finalized dataset, or a metadata file of a dataset it
            reads is malformed (naming the file).
    """
    from megatron.energon import get_train_dataset, get_val_dataset

    from shardcook.dataset.location import readable
    from shardcook.energon import arguments
    from shardcook.energon.fit import check_fit
    from shardcook.energon.state import CheckedSavableDataLoader, dataset_identity
    from shardcook.errors import ConfigError

    arguments.check(path=path)
    _check_readable(path)
    arguments.check(
        batch_size=batch_size, num_workers=num_workers, split=split,
        shuffle_buffer_size=shuffle_buffer_size, max_samples_per_sequence=max_samples_per_sequence,
        repeat=repeat, resample_latents=resample_latents, batch_drop_last=batch_drop_last,
        image_format=image_format, checkpoint_every_sec=checkpoint_every_sec,
        checkpoint_every_min_n_samples=checkpoint_every_min_n_samples, task_encoder=task_encoder,
        worker_config=worker_config)
    picked = task_encoder is None
    if not picked and resample_latents:
        raise ConfigError(
            "resample_latents= is for the task encoder get_diffusion_loader picks; with "
            "task_encoder= pass it there, e.g. EncodedDiffusionTaskEncoder(resample_latents=True)."
        )
    with readable(path, first_sample_of=split) as local:
        _check_metadata(local)
        _check_split(local, split)
        if picked:
            task_encoder = task_encoder_for(
                local, image_format=image_format, resample_latents=resample_latents
            )
        check_fit(local, split, task_encoder, picked=picked)
        identity = dataset_identity(local, split)
    if batch_drop_last is None:
        batch_drop_last = split == "train"
    if worker_config is None:
        worker_config = _worker_config(num_workers, rank, world_size, data_parallel_group)
    both: dict[str, Any] = {"split_part": split, "worker_config": worker_config,
                            "batch_size": batch_size, "batch_drop_last": batch_drop_last,
                            "task_encoder": task_encoder}
    if split == "train":
        dataset = get_train_dataset(str(path), shuffle_buffer_size=shuffle_buffer_size,
                                    max_samples_per_sequence=max_samples_per_sequence,
                                    repeat=repeat, **both)
    else:
        dataset = get_val_dataset(str(path), **both)
    loader = CheckedSavableDataLoader(  # what get_savable_loader builds, with checked states
        dataset,
        identity=identity,
        checkpoint_every_sec=checkpoint_every_sec,
        checkpoint_every_min_n_samples=checkpoint_every_min_n_samples,
    )
    return MegatronDataloaderWrapper(loader, dataset_id=identity)
