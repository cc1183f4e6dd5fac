"""The training-loop side: a cycling, checkpointable loader wrapper and `get_diffusion_loader`."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from typing_extensions import Self

from shardcook.energon.errors import EmptyLoaderError, NotCheckpointableError

__all__ = [
    "EnergonDataloader",
    "MegatronDataloaderWrapper",
    "dataset_encoding",
    "get_diffusion_loader",
    "task_encoder_for",
]


class MegatronDataloaderWrapper:
    """Makes any loader an endless iterator with checkpointing, as Megatron's training loop wants.

    Megatron calls `next()` on its data iterator once per micro-batch and never expects
    `StopIteration`. This wrapper restarts the wrapped loader whenever a pass ends, and forwards
    `save_state()`/`restore_state()` to Energon's `save_state_rank()`/`restore_state_rank()`.
    It never reads ahead, so a saved state always matches the batches handed out.

    Works with Energon loaders (`get_savable_loader`, `get_loader`), `torch.utils.data.DataLoader`
    and plain re-iterable objects (lists, ...).

    Args:
        loader: The loader or iterable to cycle.

    Attributes:
        loader: The wrapped loader.
        passes_completed: How many times the wrapped loader reached its end (epochs cycled).

    Example:
        >>> train_iter = MegatronDataloaderWrapper(get_savable_loader(dataset))
        >>> batch = next(train_iter)
        >>> state = train_iter.save_state()        # store it with the model checkpoint
        >>> fresh = MegatronDataloaderWrapper(get_savable_loader(dataset))
        >>> fresh.restore_state(state)             # before drawing the first batch
    """

    def __init__(self, loader: Iterable[Any]) -> None:
        self.loader = loader
        self.passes_completed = 0
        self._iterator: Iterator[Any] | None = None
        self._closed = False

    def __iter__(self) -> MegatronDataloaderWrapper:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise RuntimeError("This MegatronDataloaderWrapper was closed; build a new one.")
        if self._iterator is None:
            self._iterator = iter(self.loader)
        try:
            return next(self._iterator)
        except StopIteration:
            pass
        self.passes_completed += 1
        self._iterator = iter(self.loader)
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            one_shot = iter(self.loader) is self.loader
            hint = (
                " It is a one-shot iterator (e.g. a generator) that cannot restart; pass a "
                "re-iterable loader (an Energon loader, a DataLoader, a list) instead."
                if one_shot
                else " Check that the dataset split is not empty and that drop_last does not "
                "drop every batch."
            )
            raise EmptyLoaderError(
                f"{type(self.loader).__name__} yielded no batch in a whole pass, so it cannot be "
                f"cycled.{hint}"
            ) from None

    def close(self) -> None:
        """Ends the current pass, which stops the loader's worker processes promptly.

        Energon and torch otherwise stop workers only when the loader is garbage collected,
        which can take many seconds. The wrapper cannot be iterated after `close()`.
        """
        iterator, self._iterator = self._iterator, None
        self._closed = True
        close = getattr(iterator, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __len__(self) -> int:
        """The wrapped loader's length (batches per pass, per rank), when it has one."""
        return len(self.loader)  # type: ignore[arg-type]

    def save_state(self) -> Any:
        """Returns the loader's state for this rank (`save_state_rank()`), to store in a checkpoint.

        Raises:
            NotCheckpointableError: The wrapped loader has no `save_state_rank`, e.g. a plain
                `torch.utils.data.DataLoader` or Energon's `get_loader` (use `get_savable_loader`).
        """
        save = getattr(self.loader, "save_state_rank", None)
        if save is None:
            raise NotCheckpointableError(
                f"{type(self.loader).__name__} cannot save its state (no save_state_rank); "
                "build it with megatron.energon.get_savable_loader to resume mid-epoch."
            )
        return save()

    def restore_state(self, state: Any) -> None:
        """Restores a state from `save_state()`; call it before drawing the first batch.

        Args:
            state: What `save_state()` returned (None restores the initial state).

        Raises:
            NotCheckpointableError: The wrapped loader has no `restore_state_rank`.
            RuntimeError: Batches were already drawn from this wrapper.
        """
        restore = getattr(self.loader, "restore_state_rank", None)
        if restore is None:
            raise NotCheckpointableError(
                f"{type(self.loader).__name__} cannot restore a state (no restore_state_rank); "
                "build it with megatron.energon.get_savable_loader to resume mid-epoch."
            )
        if self._iterator is not None:
            raise RuntimeError(
                "restore_state() must be called before the first batch is drawn; build a fresh "
                "loader and wrapper to restore into."
            )
        restore(state)


class EnergonDataloader(MegatronDataloaderWrapper):
    """Deprecated alias of `MegatronDataloaderWrapper`; emits a DeprecationWarning."""

    def __init__(self, loader: Iterable[Any]) -> None:
        warnings.warn(
            "EnergonDataloader is deprecated; use shardcook.energon.MegatronDataloaderWrapper.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(loader)


def dataset_encoding(path: str | Path) -> str | None:
    """Returns the `encoding` subflavor of a prepared dataset, or None for a metadataset YAML.

    Args:
        path: A dataset folder (with `.nv-meta/dataset.yaml`) or a metadataset `.yaml` file.

    Raises:
        DatasetError: The folder is not a prepared Energon dataset, or has no `encoding`.
    """
    from shardcook.dataset import metadata
    from shardcook.errors import DatasetError
    from shardcook.layouts.names import DATASET_YAML

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


def task_encoder_for(path: str | Path, *, image_format: str = "tensor") -> Any:
    """Picks the task encoder for a dataset from its `encoding` subflavor.

    `preencoded` gives `EncodedDiffusionTaskEncoder`, `raw` gives `RawDiffusionTaskEncoder`, and a
    metadataset YAML gives `DiffusionTaskEncoder`, which dispatches per dataset.

    Args:
        path: A dataset folder or a metadataset `.yaml`.
        image_format: For raw images, `"tensor"` or `"pil"`.

    Raises:
        DatasetError: The dataset has no or an unknown `encoding`.
    """
    from shardcook.energon.task_encoders import (
        ENCODING_PREENCODED,
        ENCODING_RAW,
        DiffusionTaskEncoder,
        EncodedDiffusionTaskEncoder,
        RawDiffusionTaskEncoder,
    )
    from shardcook.errors import DatasetError

    encoding = dataset_encoding(path)
    if encoding is None:
        return DiffusionTaskEncoder(image_format=image_format)  # type: ignore[arg-type]
    if encoding == ENCODING_PREENCODED:
        return EncodedDiffusionTaskEncoder()
    if encoding == ENCODING_RAW:
        return RawDiffusionTaskEncoder(image_format=image_format)  # type: ignore[arg-type]
    raise DatasetError(
        f"{path} has encoding {encoding!r}; shardcook.energon reads "
        f"{ENCODING_PREENCODED!r} and {ENCODING_RAW!r}."
    )


def _worker_config(
    num_workers: int, rank: int | None, world_size: int | None, data_parallel_group: Any
) -> Any:
    from megatron.energon import WorkerConfig

    from shardcook.errors import ConfigError

    if (rank is None) != (world_size is None):
        raise ConfigError("Give both rank and world_size, or neither (then torch.distributed).")
    if rank is None:
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


def get_diffusion_loader(
    path: str | Path,
    *,
    batch_size: int,
    split: str = "train",
    num_workers: int = 4,
    shuffle_buffer_size: int | None = 100,
    max_samples_per_sequence: int | None = 100,
    image_format: str = "tensor",
    rank: int | None = None,
    world_size: int | None = None,
    data_parallel_group: Any = None,
    repeat: bool = True,
    batch_drop_last: bool = False,
    task_encoder: Any = None,
    worker_config: Any = None,
    checkpoint_every_sec: float = 60,
    checkpoint_every_min_n_samples: int | None = None,
) -> MegatronDataloaderWrapper:
    """Builds a checkpointable Energon loader for a shardcook dataset or metadataset, wrapped.

    The task encoder is picked from the dataset's `encoding` subflavor (see `task_encoder_for`).
    Rank and world size come from `torch.distributed` when it is initialised (optionally within
    `data_parallel_group`), unless given.

    Args:
        path: A dataset folder or a metadataset `.yaml` (e.g. from `shardcook blend`).
        batch_size: Micro-batch size per rank.
        split: `"train"` reads with shuffling and repetition; any other split (`"val"`, `"test"`)
            reads in order, one pass per cycle.
        num_workers: Worker processes per rank (0 reads in the calling process).
        shuffle_buffer_size: Sample shuffle buffer for training (None or 1 to disable).
        max_samples_per_sequence: Longest run of consecutive samples read from one shard slice
            before switching (training only).
        image_format: Raw datasets only: `"tensor"` or `"pil"`.
        rank: Data-parallel rank; give with `world_size` to override torch.distributed.
        world_size: Data-parallel world size.
        data_parallel_group: The torch.distributed group to take rank and world size from.
        repeat: Training only: False makes each pass one epoch (the wrapper still cycles).
        batch_drop_last: Drop the last, smaller batch of each shape group.
        task_encoder: Use this task encoder instead of picking one.
        worker_config: Use this `megatron.energon.WorkerConfig` instead of building one.
        checkpoint_every_sec: Energon's internal worker checkpoint interval.
        checkpoint_every_min_n_samples: Energon's minimum samples between worker checkpoints.

    Returns:
        A `MegatronDataloaderWrapper` around `megatron.energon.get_savable_loader(...)`.
    """
    from megatron.energon import get_savable_loader, get_train_dataset, get_val_dataset

    if task_encoder is None:
        task_encoder = task_encoder_for(path, image_format=image_format)
    if worker_config is None:
        worker_config = _worker_config(num_workers, rank, world_size, data_parallel_group)
    if split == "train":
        dataset = get_train_dataset(
            str(path),
            split_part=split,
            worker_config=worker_config,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            shuffle_buffer_size=shuffle_buffer_size,
            max_samples_per_sequence=max_samples_per_sequence,
            task_encoder=task_encoder,
            repeat=repeat,
        )
    else:
        dataset = get_val_dataset(
            str(path),
            split_part=split,
            worker_config=worker_config,
            batch_size=batch_size,
            batch_drop_last=batch_drop_last,
            task_encoder=task_encoder,
        )
    loader = get_savable_loader(
        dataset,
        checkpoint_every_sec=checkpoint_every_sec,
        checkpoint_every_min_n_samples=checkpoint_every_min_n_samples,
    )
    return MegatronDataloaderWrapper(loader)
