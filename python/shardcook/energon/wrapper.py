"""The training-loop side of a loader: a cycling wrapper whose checkpoint state is Energon's own
(what Megatron-LM, Primus and Energon's guide save and restore), checked against the dataset and
worker count it came from, and None where nothing can be saved."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable, Iterator
from os import PathLike
from typing import Any

from typing_extensions import Self

from shardcook.energon.errors import EmptyLoaderError, LoaderStateError, NotCheckpointableError
from shardcook.energon.state import (
    DatasetIdentity,
    LoaderState,
    allow_weights_only_load,
    check_global_states,
    checked_energon_state,
    data_parallel_size,
    tag_state,
)

__all__ = ["EnergonDataloader", "LoaderState", "MegatronDataloaderWrapper"]

log = logging.getLogger(__name__)


def _check_loader(loader: object) -> None:
    """Refuses what cannot be cycled (None, a number, a path) when the wrapper is built, not at
    the first `next()`."""
    from shardcook.errors import ConfigError

    if isinstance(loader, (str, bytes, PathLike)):
        raise ConfigError(
            f"MegatronDataloaderWrapper needs a loader, not the path {loader!r}; build one with "
            "shardcook.energon.get_diffusion_loader(path, ...) (already wrapped)."
        )
    if not isinstance(loader, Iterable) and not hasattr(loader, "__getitem__"):
        raise ConfigError(
            f"MegatronDataloaderWrapper needs a loader to iterate (an Energon loader, a "
            f"DataLoader, a list), not {loader!r} ({type(loader).__name__})."
        )


class MegatronDataloaderWrapper:
    """Makes any loader an endless iterator with checkpointing, as Megatron's training loop wants.

    Megatron calls `next()` on its data iterator once per micro-batch and never expects
    `StopIteration`. This wrapper restarts the wrapped loader whenever a pass ends. It never reads
    ahead, so a saved state always matches the batches handed out.

    Its state is Energon's own `SavableDataLoaderState` (from the loader's `save_state_rank()`),
    so it goes wherever Energon's does: `torch.save`, `torch.load` (also with
    `weights_only=True`), and the Energon loader's `restore_state_rank`. The wrapper answers
    Megatron's and Primus's names (`save_state`/`restore_state`) and Energon's
    (`save_state_rank`/`restore_state_rank`, `save_state_global`/`restore_state_global`).

    Works with Energon loaders (`get_savable_loader`, `get_loader`), `torch.utils.data.DataLoader`
    and plain re-iterable objects (lists, ...).

    A loader without `save_state_rank` (a plain DataLoader, synthetic data) is not an error:
    `save_state()` returns None, as Primus's wrapper does, so a Megatron loop that checkpoints
    still runs; restoring a real state into such a loader is refused.

    Args:
        loader: The loader or iterable to cycle.
        dataset_id: What the loader reads, from `state.dataset_identity(path, split)`
            (`get_diffusion_loader` passes it); a saved state remembers it and a restore refuses a
            state of another dataset or split.

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

    def __init__(self, loader: Iterable[Any], *, dataset_id: DatasetIdentity | None = None) -> None:
        if dataset_id is not None and not isinstance(dataset_id, DatasetIdentity):
            raise TypeError(
                f"dataset_id must be what shardcook.energon.state.dataset_identity() returns, not "
                f"a {type(dataset_id).__name__}; leave it out unless you build the loader yourself."
            )
        _check_loader(loader)
        self.loader = loader
        self.dataset_id = dataset_id
        self.passes_completed = 0
        self._iterator: Iterator[Any] | None = None
        self._closed = False
        self._said_not_checkpointable = False
        allow_weights_only_load()

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

    def _num_workers(self) -> int:
        return int(getattr(self.loader, "num_workers", 0) or 0)

    def save_state(self) -> Any:
        """Returns this rank's loader state, to store in a checkpoint and give to `restore_state`.

        Returns:
            Energon's `SavableDataLoaderState` (naming the dataset it was saved on), or None when
            the wrapped loader cannot save one (no `save_state_rank`, e.g. a plain
            `torch.utils.data.DataLoader`); that is logged once.
        """
        save = getattr(self.loader, "save_state_rank", None)
        if save is None:
            if not self._said_not_checkpointable:
                log.info(
                    "%s has no save_state_rank; its checkpoints hold no loader state (None)",
                    type(self.loader).__name__,
                )
                self._said_not_checkpointable = True
            return None
        return tag_state(save(), self.dataset_id, data_parallel_size(self.loader))

    def restore_state(self, state: Any) -> None:
        """Restores a state from `save_state()`; call it before drawing the first batch.

        Args:
            state: What `save_state()` returned; None (nothing was saved) leaves the loader at its
                start. A bare Energon `save_state_rank()` state, and the `LoaderState` older
                shardcook saved, are accepted too. It is only read: the same state restores
                another loader the same way.

        Raises:
            LoaderStateError: `state` is not a loader state, or was saved on another dataset or
                split, with another `num_workers` or batch size, or at another data-parallel
                size.
            NotCheckpointableError: A real state, but the wrapped loader has no
                `restore_state_rank`.
            RuntimeError: Batches were already drawn from this wrapper.
        """
        if state is None:
            return
        restore = self._restorer("restore_state_rank")
        energon_state = self._checked(state)
        try:
            restore(energon_state)
        except (AssertionError, ValueError) as e:  # Energon's checks (e.g. another batch size)
            raise LoaderStateError(f"Energon cannot restore this loader state: {e}") from None

    #: Energon's name for `save_state` (per-rank state), as in Energon's save/restore guide.
    save_state_rank = save_state
    #: Energon's name for `restore_state`: what Megatron-LM's data providers call.
    restore_state_rank = restore_state

    def save_state_global(self, global_dst_rank: int) -> list[Any] | None:
        """Energon's `save_state_global`: every rank's state gathered on `global_dst_rank`.

        All ranks must call it. Returns the list of states on `global_dst_rank`, None elsewhere.
        """
        save = getattr(self.loader, "save_state_global", None)
        if save is None:
            raise NotCheckpointableError(
                f"{type(self.loader).__name__} has no save_state_global; build it with "
                "megatron.energon.get_savable_loader."
            )
        states = save(global_dst_rank)
        size = data_parallel_size(self.loader)
        return None if states is None else [tag_state(s, self.dataset_id, size) for s in states]

    def restore_state_global(self, state: list[Any] | None, *, src_rank: int | None = None) -> None:
        """Energon's `restore_state_global`: restores what `save_state_global` gathered.

        All ranks must call it before drawing a batch: with `src_rank`, only that rank (within
        the data-parallel group) passes the list and the others None; without, every rank passes
        the whole list.

        Raises:
            LoaderStateError: The list holds another number of states than the loader has
                data-parallel ranks (Energon cannot redistribute them), or a state in it is not a
                loader state or does not fit this loader (another dataset, split or
                `num_workers`).
        """
        restore = self._restorer("restore_state_global")
        worker_config = getattr(self.loader, "worker_config", None)
        if worker_config is not None:
            check_global_states(state, src_rank=src_rank, worker_config=worker_config)
        if isinstance(state, list):
            state = [None if s is None else self._checked(s) for s in state]
        try:
            restore(state, src_rank=src_rank)
        except (AssertionError, ValueError) as e:
            raise LoaderStateError(f"Energon cannot restore this loader state: {e}") from None

    def _checked(self, state: Any) -> Any:
        """A copy of `state` for the wrapped loader, once it is known to fit it."""
        return checked_energon_state(state, dataset=self.dataset_id,
                                     num_workers=self._num_workers(),
                                     data_parallel_size=data_parallel_size(self.loader))

    def _restorer(self, name: str) -> Any:
        restore = getattr(self.loader, name, None)
        if restore is None:
            raise NotCheckpointableError(
                f"{type(self.loader).__name__} cannot restore a state (no {name}); "
                "build it with megatron.energon.get_savable_loader to resume mid-epoch."
            )
        if self._iterator is not None:
            raise RuntimeError(
                "restore_state() must be called before the first batch is drawn; build a fresh "
                "loader and wrapper to restore into."
            )
        return restore


class EnergonDataloader(MegatronDataloaderWrapper):
    """Deprecated alias of `MegatronDataloaderWrapper`; emits a DeprecationWarning."""

    def __init__(self, loader: Iterable[Any]) -> None:
        warnings.warn(
            "EnergonDataloader is deprecated; use shardcook.energon.MegatronDataloaderWrapper.",
            DeprecationWarning,
            stacklevel=2,
        )
        super().__init__(loader)
