"""A loader's checkpoint state: Energon's own `SavableDataLoaderState`, tagged with the dataset it
was saved on, checked before it is restored, and readable by `torch.load(weights_only=True)`.

Megatron-LM's and Energon's restore code hands the stored state straight to the Energon loader's
`restore_state_rank`, which accepts only its own type, so the state keeps that type; the dataset
it belongs to rides along as an attribute Energon ignores. Datasets are told apart by content
(`.nv-meta/index.uuid`, shard names and sample counts, the split), never by folder name or path.
"""

from __future__ import annotations

import hashlib
import json
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
    "checked_energon_state",
    "dataset_identity",
    "tag_state",
]

#: The attribute of a `SavableDataLoaderState` naming the dataset it was saved on (a plain dict,
#: so `torch.load(weights_only=True)` reads it).
DATASET_ATTR = "shardcook_dataset"


@dataclass(frozen=True)
class DatasetIdentity:
    """What a loader reads, as a saved state remembers it.

    Attributes:
        name: The folder or file name, for messages only.
        split: The split part read.
        digest: sha256 of the content identity (index.uuid, shard names and counts, split parts;
            for a metadataset, its bytes and the identities of the datasets it names).
        legacy: The id shardcook's older `LoaderState` stored, to check old checkpoints.
    """

    name: str
    split: str
    digest: str
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


def _folder_digest(root: Path, digest: Any) -> None:
    from shardcook.dataset import metadata

    info = metadata.read_info_json(root)
    split_yaml = metadata.read_split_yaml(root)
    content = {
        "index_uuid": metadata.read_index_uuid(root),
        "shard_counts": sorted(info.shard_counts.items()) if info else [],
        "split_parts": sorted(split_yaml.parts.items()) if split_yaml else [],
        "exclude": sorted(split_yaml.exclude) if split_yaml else [],
    }
    digest.update(json.dumps(content, sort_keys=True).encode())


def _named_paths(node: Any) -> list[str]:
    """Every `path:` value in a metadataset YAML, in document order."""
    if isinstance(node, dict):
        found = [str(node["path"])] if isinstance(node.get("path"), str) else []
        inner = [p for key, value in node.items() if key != "path" for p in _named_paths(value)]
        return found + inner
    if isinstance(node, list):
        return [p for item in node for p in _named_paths(item)]
    return []


def _update_digest(path: Path, digest: Any, seen: set[Path]) -> None:
    resolved = path.resolve()
    if resolved in seen:  # a metadataset naming itself again: its content is already counted
        return
    seen.add(resolved)
    if path.is_dir():
        _folder_digest(path, digest)
        return
    import yaml

    try:
        data = path.read_bytes()
    except OSError:
        digest.update(str(path).encode())
        return
    digest.update(data)
    try:
        named = _named_paths(safeyaml.load(data.decode("utf-8", "replace")))
    except yaml.YAMLError:
        return
    for name in named:
        _update_digest(path.parent / name, digest, seen)


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

    Two folders with the same name and shard layout differ by their `index.uuid` (written fresh by
    every finalize); a copy of a folder is the same dataset wherever it lies.
    """
    p = Path(path)
    digest = hashlib.sha256(split.encode() + b"\0")
    _update_digest(p, digest, set())
    return DatasetIdentity(p.name, split, digest.hexdigest(), _legacy_id(p, split))


def tag_state(state: Any, dataset: DatasetIdentity | None) -> Any:
    """Records on an Energon state the dataset it was saved on (no-op without one)."""
    if dataset is not None and isinstance(state, SavableDataLoaderState):
        setattr(state, DATASET_ATTR, dataset.as_tag())
    return state


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
    if (saved.get("digest"), saved.get("split")) == (dataset.digest, dataset.split):
        return
    described = DatasetIdentity(str(saved.get("name")), str(saved.get("split")),
                                str(saved.get("digest"))).describe()
    raise LoaderStateError(
        f"This loader state was saved on {described} but the loader reads {dataset.describe()}; "
        "restore it into a loader of the same dataset and split."
    )


def checked_energon_state(
    state: Any, *, dataset: DatasetIdentity | None, num_workers: int
) -> SavableDataLoaderState:
    """The Energon state inside `state`, once it is known to fit this loader.

    Accepts what `save_state()`/`save_state_rank()` return (Energon's `SavableDataLoaderState`,
    tagged or not) and shardcook's older `LoaderState`.

    Raises:
        LoaderStateError: `state` is no loader state, or was saved on another dataset or split or
            with another `num_workers`.
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
    if saved_workers != num_workers:
        raise LoaderStateError(
            f"This loader state was saved with num_workers={saved_workers} but the loader has "
            f"num_workers={num_workers}; build it with num_workers={saved_workers} to restore."
        )
    return cast(SavableDataLoaderState, energon_state)


class CheckedSavableDataLoader(SavableDataLoader):  # type: ignore[type-arg]
    """Energon's `SavableDataLoader` whose states name their dataset and are checked on restore.

    Every way a training loop restores (`restore_state_rank`, `restore_state_global`, or the
    wrapper's `restore_state`) refuses a state of another dataset, split or `num_workers` with a
    `LoaderStateError`, where Energon would fail an assertion or silently read other data.
    """

    def __init__(self, dataset: Any, *, identity: DatasetIdentity | None, **kwargs: Any) -> None:
        super().__init__(dataset, **kwargs)
        self.identity = identity
        allow_weights_only_load()

    def save_state_rank(self) -> SavableDataLoaderState | None:
        return tag_state(super().save_state_rank(), self.identity)  # type: ignore[no-any-return]

    def restore_state_rank(self, state: Any) -> None:
        if state is None:
            return
        checked = checked_energon_state(state, dataset=self.identity, num_workers=self.num_workers)
        try:
            super().restore_state_rank(checked)
        except (AssertionError, ValueError) as e:  # Energon's checks (e.g. another batch size)
            raise LoaderStateError(f"Energon cannot restore this loader state: {e}") from None


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
