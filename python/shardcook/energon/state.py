"""A loader's checkpoint state: Energon's own `SavableDataLoaderState`, tagged with the dataset it
was saved on, checked before it is restored, and readable by `torch.load(weights_only=True)`.

Megatron-LM's and Energon's restore code hands the stored state straight to the Energon loader's
`restore_state_rank`, which accepts only its own type, so the state keeps that type; the dataset
it belongs to rides along as an attribute Energon ignores, and so does the data-parallel size it
was saved at. Datasets are told apart by content (shard names, sizes and sample counts, the
split), never by folder name, path or the `index.uuid` every finalize writes anew.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from megatron.energon import SavableDataLoader
from megatron.energon.flavors.base_dataset import State
from megatron.energon.flavors.webdataset.sample_loader import SliceState
from megatron.energon.rng import SystemRngState
from megatron.energon.savable_loader import SavableDataLoaderState, SavableDatasetCheckpoint
from megatron.energon.state import FlexState

from shardcook import safeyaml
from shardcook.energon.errors import LoaderStateError
from shardcook.layouts.names import INFO_JSON, META_DIR, SPLIT_YAML

__all__ = [
    "CheckedSavableDataLoader",
    "DatasetIdentity",
    "LoaderState",
    "allow_weights_only_load",
    "check_global_states",
    "checked_energon_state",
    "data_parallel_size",
    "dataset_folders",
    "dataset_identity",
    "tag_state",
]

#: The attribute of a `SavableDataLoaderState` naming the dataset it was saved on (a plain dict,
#: so `torch.load(weights_only=True)` reads it).
DATASET_ATTR = "shardcook_dataset"
#: The attribute naming the data-parallel size a state was saved at (a plain int).
DATA_PARALLEL_ATTR = "shardcook_data_parallel_size"


@dataclass(frozen=True)
class DatasetIdentity:
    """What a loader reads, as a saved state remembers it.

    Attributes:
        name: The folder or file name, for messages only.
        split: The split part read.
        digest: sha256 of the content identity (shard names, byte sizes and sample counts, split
            parts; for a metadataset, its bytes and the identities of the datasets it names).
        previous: The digest states saved before the identity left out `index.uuid` hold (the
            same content plus the uuid), so they still restore until the next finalize.
        legacy: The id shardcook's older `LoaderState` stored, to check old checkpoints.
    """

    name: str
    split: str
    digest: str
    previous: str | None = None
    legacy: str | None = None

    def describe(self) -> str:
        return f"{self.name} split {self.split!r} (index {self.digest[:12]})"

    def as_tag(self) -> dict[str, str]:
        return {"name": self.name, "split": self.split, "digest": self.digest}


@dataclass(frozen=True)
class LoaderState:
    """What older shardcook's `save_state()` returned; `restore_state()` still reads it from old
    checkpoints. `save_state()` now returns Energon's own state.

    Attributes:
        energon: `save_state_rank()` of the Energon loader.
        dataset_id: The dataset and split the state was saved on (None when not known).
        num_workers: The loader's worker processes per rank.
    """

    energon: Any
    dataset_id: str | None
    num_workers: int


# Old checkpoints name the class where it was first defined: pickle and the weights-only
# allowlist look it up by that name (`shardcook.energon.wrapper` still exports it).
LoaderState.__module__ = "shardcook.energon.wrapper"


def _shard_size(root: Path, name: str) -> int | None:
    """The shard's size in bytes (a dataset URL's view holds placeholders of that size)."""
    try:
        return (root / name).stat().st_size
    except OSError:
        return None


def _folder_content(root: Path, *, with_uuid: bool) -> dict[str, Any]:
    """What identifies a dataset folder's data: each shard's name, sample count and size, and
    how the split cuts them; `with_uuid`, the form states saved before held (the shard counts
    and `index.uuid`, no sizes)."""
    from shardcook.dataset import metadata

    info = metadata.read_info_json(root)
    split_yaml = metadata.read_split_yaml(root)
    counts = sorted(info.shard_counts.items()) if info else []
    content: dict[str, Any] = {
        "split_parts": sorted(split_yaml.parts.items()) if split_yaml else [],
        "exclude": sorted(split_yaml.exclude) if split_yaml else [],
    }
    if with_uuid:
        return {**content, "index_uuid": metadata.read_index_uuid(root), "shard_counts": counts}
    return {**content, "shards": [[name, n, _shard_size(root, name)] for name, n in counts]}


def _named_paths(node: Any) -> list[str]:
    """Every `path:` value in a metadataset YAML, in document order."""
    if isinstance(node, dict):
        found = [str(node["path"])] if isinstance(node.get("path"), str) else []
        inner = [p for key, value in node.items() if key != "path" for p in _named_paths(value)]
        return found + inner
    if isinstance(node, list):
        return [p for item in node for p in _named_paths(item)]
    return []


def _reached(path: Path, seen: set[Path]) -> Iterator[tuple[Path, bytes | None]]:
    """`path` and every path a metadataset at it names, at any depth, each once: a folder or an
    unreadable file with None, a file with its bytes."""
    resolved = path.resolve()
    if resolved in seen:  # a metadataset naming itself again: its content is already counted
        return
    seen.add(resolved)
    if path.is_dir():
        yield path, None
        return
    import yaml

    try:
        data = path.read_bytes()
    except OSError:
        yield path, None
        return
    yield path, data
    try:
        named = _named_paths(safeyaml.load(data.decode("utf-8", "replace")))
    except yaml.YAMLError:
        return
    for name in named:
        yield from _reached(path.parent / name, seen)


def dataset_folders(path: str | Path) -> list[Path]:
    """The dataset folders `path` reads: itself, or every folder a metadataset names."""
    return [p for p, _ in _reached(Path(path), set()) if p.is_dir()]


def _digest(path: Path, split: str, *, with_uuid: bool) -> str:
    digest = hashlib.sha256(split.encode() + b"\0")
    for reached, data in _reached(path, set()):
        if reached.is_dir():
            content = _folder_content(reached, with_uuid=with_uuid)
            digest.update(json.dumps(content, sort_keys=True).encode())
        else:
            digest.update(str(reached).encode() if data is None else data)
    return digest.hexdigest()


def _legacy_id(path: Path, split: str) -> str:
    """The id older shardcook stored in `LoaderState.dataset_id` (folder name plus a digest of
    the index files' bytes), so checkpoints written by it are still checked."""
    digest = hashlib.sha256()
    meta = path / META_DIR
    files = [path] if path.is_file() else [meta / INFO_JSON, meta / SPLIT_YAML]
    for file in files:
        try:
            digest.update(file.read_bytes())
        except OSError:
            digest.update(str(file).encode())
    return f"{path.name} split {split!r} (index {digest.hexdigest()[:12]})"


def dataset_identity(path: str | Path, split: str) -> DatasetIdentity:
    """The identity of a dataset folder or metadataset `.yaml` and split, from its content.

    A copy of a folder is the same dataset wherever it lies, and so is the folder after
    `finalize --force` over the same shards; another shard, count or size is another dataset.
    """
    p = Path(path)
    return DatasetIdentity(p.name, split, _digest(p, split, with_uuid=False),
                           _digest(p, split, with_uuid=True), _legacy_id(p, split))


def tag_state(state: Any, dataset: DatasetIdentity | None, data_parallel_size: int | None) -> Any:
    """Records on an Energon state the dataset and data-parallel size it was saved at (each
    when known)."""
    if not isinstance(state, SavableDataLoaderState):
        return state
    if dataset is not None:
        setattr(state, DATASET_ATTR, dataset.as_tag())
    if data_parallel_size is not None:
        setattr(state, DATA_PARALLEL_ATTR, data_parallel_size)
    return state


def data_parallel_size(loader: Any) -> int | None:
    """The data-parallel size an Energon loader reads at (its worker config's world size)."""
    size = getattr(getattr(loader, "worker_config", None), "world_size", None)
    return size if isinstance(size, int) else None


def _saved_workers(energon_state: SavableDataLoaderState) -> int | None:
    """The `num_workers` an Energon loader state was saved with, or None if it is malformed."""
    states = energon_state.worker_states
    if not isinstance(states, list) or not states:
        return None
    if all(isinstance(w, SavableDatasetCheckpoint) for w in states):
        return len(states)
    return 0 if len(states) == 1 and isinstance(states[0], FlexState) else None


def _check_dataset(saved: Any, dataset: DatasetIdentity) -> None:
    if not isinstance(saved, dict):
        return
    same = saved.get("digest") in (dataset.digest, dataset.previous)
    if same and saved.get("split") == dataset.split:
        return
    described = DatasetIdentity(str(saved.get("name")), str(saved.get("split")),
                                str(saved.get("digest"))).describe()
    raise LoaderStateError(
        f"This loader state was saved on {described} but the loader reads {dataset.describe()}; "
        "restore it into a loader of the same dataset and split."
    )


def _size_refusal(saved: int, size: int) -> str:
    return (
        f"This loader state was saved at data-parallel size {saved} but the loader reads at "
        f"data-parallel size {size}; Energon cannot redistribute a loader state, so resume at "
        f"data-parallel size {saved} (or start the data over without the state)."
    )


def _check_data_parallel_size(saved: Any, size: int | None) -> None:
    if isinstance(saved, int) and size is not None and saved != size:
        raise LoaderStateError(_size_refusal(saved, size))


def checked_energon_state(
    state: Any, *, dataset: DatasetIdentity | None, num_workers: int,
    data_parallel_size: int | None,
) -> SavableDataLoaderState:
    """A copy of the Energon state inside `state`, once it is known to fit this loader.

    Accepts what `save_state()`/`save_state_rank()` return (Energon's `SavableDataLoaderState`,
    tagged or not) and shardcook's older `LoaderState`. The copy is what Energon restores (and
    advances as it reads), so `state` stays as saved and restores again the same way.

    Raises:
        LoaderStateError: `state` is no loader state, or was saved on another dataset or split,
            with another `num_workers` or at another data-parallel size.
    """
    energon_state, legacy = state, None
    if isinstance(state, LoaderState):
        energon_state, legacy = state.energon, state.dataset_id
    saved_workers = (
        _saved_workers(energon_state) if isinstance(energon_state, SavableDataLoaderState) else None
    )
    if saved_workers is None:
        raise LoaderStateError(
            f"restore_state() needs what save_state() returned (or None), not a "
            f"{type(state).__name__}; pass the state stored with the checkpoint unchanged."
        )
    if dataset is not None:
        if legacy is not None and dataset.legacy is not None and legacy != dataset.legacy:
            raise LoaderStateError(
                f"This loader state was saved on {legacy} but the loader reads "
                f"{dataset.describe()}; restore it into a loader of the same dataset and split."
            )
        _check_dataset(getattr(energon_state, DATASET_ATTR, None), dataset)
    _check_data_parallel_size(getattr(energon_state, DATA_PARALLEL_ATTR, None), data_parallel_size)
    if saved_workers != num_workers:
        raise LoaderStateError(
            f"This loader state was saved with num_workers={saved_workers} but the loader has "
            f"num_workers={num_workers}; build it with num_workers={saved_workers} to restore."
        )
    return cast(SavableDataLoaderState, copy.deepcopy(energon_state))


def _src_rank_count(count: int | None, src_rank: int, worker_config: Any) -> int | None:
    """What `count` is on `src_rank` of the data-parallel group, on every rank of it."""
    import torch.distributed as dist

    group = worker_config.data_parallel_group
    src = src_rank if group is None else dist.get_global_rank(group, src_rank)
    shared = [count]
    dist.broadcast_object_list(shared, src=src, group=group)
    return shared[0]


def check_global_states(state: Any, *, src_rank: int | None, worker_config: Any) -> None:
    """Refuses, on every rank, a `restore_state_global` list that is not one state per rank of
    this loader's data-parallel group (Energon's global restore does not redistribute).

    With `src_rank`, only that rank holds the list: its length is shared with the group first,
    so every rank refuses it (none is left waiting for the others).

    Raises:
        LoaderStateError: The list is missing or holds another number of states.
    """
    size = worker_config.world_size
    count = len(state) if isinstance(state, list) else None
    if src_rank is not None and size > 1:
        count = _src_rank_count(count, src_rank, worker_config)
    if count is None:
        where = "every rank" if src_rank is None or size == 1 else f"rank {src_rank}"
        raise LoaderStateError(
            f"restore_state_global() needs, on {where}, the list save_state_global() returned, "
            f"not a {type(state).__name__}; pass the list stored with the checkpoint unchanged."
        )
    if count != size:
        raise LoaderStateError(_size_refusal(count, size))


class CheckedSavableDataLoader(SavableDataLoader):  # type: ignore[type-arg]
    """Energon's `SavableDataLoader` whose states name their dataset and are checked on restore.

    Every way a training loop restores (`restore_state_rank`, `restore_state_global`, or the
    wrapper's `restore_state`) refuses a state of another dataset, split, `num_workers` or
    data-parallel size with a `LoaderStateError`, where Energon would fail an assertion or
    silently read other data, and leaves the state it was given as it was.
    """

    def __init__(self, dataset: Any, *, identity: DatasetIdentity | None, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.identity = identity
        allow_weights_only_load()

    def save_state_rank(self) -> SavableDataLoaderState | None:
        return tag_state(  # type: ignore[no-any-return]
            super().save_state_rank(), self.identity, self.worker_config.world_size)

    def restore_state_rank(self, state: Any) -> None:
        if state is None:
            return
        checked = checked_energon_state(state, dataset=self.identity, num_workers=self.num_workers,
                                        data_parallel_size=self.worker_config.world_size)
        try:
            super().restore_state_rank(checked)
        except (AssertionError, ValueError) as e:  # Energon's checks (e.g. another batch size)
            raise LoaderStateError(f"Energon cannot restore this loader state: {e}") from None

    def restore_state_global(self, state: Any, *, src_rank: int | None = None) -> None:
        check_global_states(state, src_rank=src_rank, worker_config=self.worker_config)
        super().restore_state_global(state, src_rank=src_rank)


def _energon_state_classes() -> list[type]:
    """Energon's `State` and its subclasses defined by Energon (not by user code)."""
    found: list[type] = []
    pending: list[type] = [State]
    while pending:
        cls = pending.pop()
        if cls.__module__.startswith("megatron.energon."):
            found.append(cls)
        pending.extend(cls.__subclasses__())
    return found


def _reduce_flex_state(state: FlexState) -> tuple[type, tuple[dict[Any, Any]]]:
    return FlexState, (dict(state),)


def allow_weights_only_load(*extra: type) -> None:
    """Lets `torch.load` with its default `weights_only=True` read loader states.

    Megatron-LM's multimodal data provider and Energon's guide load the state with a plain
    `torch.load(path)`; without this it fails and Megatron silently starts the data over. Only
    plain-data classes are allowed: Energon's state dataclasses (the subclasses of its `State`
    that Energon defines and has imported so far, `SliceState`, `SystemRngState`), `FlexState`,
    numpy integer arrays (the RNG states) and `extra` (shardcook's older `LoaderState`); the
    restricted unpickler still refuses everything else. That unpickler cannot fill a dict subclass
    item by item, so `FlexState` is registered with `copyreg` to pickle as `FlexState(dict)` (the
    same value; the bytes still name only Energon's classes).
    """
    import copyreg
    import importlib

    import numpy as np
    import torch

    copyreg.pickle(FlexState, _reduce_flex_state)
    core = "numpy._core" if int(np.__version__.split(".")[0]) >= 2 else "numpy.core"
    reconstruct = importlib.import_module(f"{core}.multiarray")._reconstruct
    numpy_types: list[Any] = [reconstruct, np.ndarray, np.dtype]
    numpy_types += [type(np.dtype(code)) for code in np.typecodes["AllInteger"]]
    energon = [*_energon_state_classes(), SliceState, SystemRngState, FlexState]
    wanted = [*energon, *numpy_types, *extra]
    listed = getattr(torch.serialization, "get_safe_globals", list)  # torch >= 2.5
    known = set(map(id, listed()))
    new = [g for g in dict.fromkeys(wanted) if id(g) not in known]
    if new:
        torch.serialization.add_safe_globals(new)


# A checkpoint is often loaded before any loader exists (Energon's guide, Megatron's providers
# that restore the bare Energon loader), so importing shardcook.energon is enough.
allow_weights_only_load(LoaderState)
