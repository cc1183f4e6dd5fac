"""Energon's metadata for a folder of shards (FORMAT.md §5), identical to what `energon prepare`
writes, built by the Rust core in a fraction of the time; then `validate`."""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from shardcook import _native
from shardcook.errors import ConfigError, DatasetError
from shardcook.splits import collapse, split_by_patterns, split_by_ratio

if TYPE_CHECKING:
    from shardcook.validate import ValidationReport

log = logging.getLogger(__name__)

META = ".nv-meta"
OURS = ".shardcook"
ENCODINGS = ("preencoded", "raw")
#: Encodings whose dataset.yaml names its own sample class and gets no `encoding` subflavor
#: (chatml: Megatron-Bridge's ChatMLWebdataset).
CLASS_ENCODINGS = ("chatml",)
#: Where finalize records what it was asked, so `validate` knows which tars were left out on purpose.
FINALIZE_RECORD = "finalize.json"


@dataclass
class IndexResult:
    """What `build_index` wrote."""

    directory: Path
    shard_counts: dict[str, int]
    splits: dict[str, list[str]]
    part_names: list[str]
    warnings: list[str] = field(default_factory=list)
    #: Wall time of indexing (scan, .tar.idx, sqlite, metadata), without validation.
    seconds: float = 0.0

    @property
    def num_samples(self) -> int:
        return sum(self.shard_counts.values())


@dataclass
class FinalizeResult:
    """What `finalize` wrote, and the validation of the result (None when skipped)."""

    index: IndexResult
    dataset_yaml: dict[str, Any]
    validation: ValidationReport | None


def list_shards(directory: Path, exclude: Sequence[str] = ()) -> list[str]:
    """Shard paths relative to `directory`, in Energon's order (sorted `**/*.tar`, `**/*.tgz`),
    minus those matching any `exclude` regex (searched anywhere in the path, as Energon does)."""
    found = list(directory.glob("**/*.tar")) + list(directory.glob("**/*.tgz"))
    names = [str(p.relative_to(directory)) for p in sorted(found)]
    patterns = []
    for pattern in exclude:
        try:
            patterns.append(re.compile(pattern))
        except re.error as e:
            raise ConfigError(
                f"--exclude {pattern!r} is not a valid regular expression ({e})"
            ) from None
    return [n for n in names if not any(p.search(n) for p in patterns)]


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)


def build_index(
    directory: str | Path,
    *,
    split: Sequence[float] | str = (1, 0, 0),
    split_parts: Mapping[str, str] | None = None,
    shuffle_seed: int | None = None,
    exclude: Sequence[str] = (),
    sqlite: bool = True,
    force: bool = False,
) -> IndexResult:
    """Writes `.tar.idx` files and `.nv-meta/{.info.json,split.yaml,index.sqlite,index.uuid}`.

    Args:
        directory: The dataset folder; every `**/*.tar` under it is a shard.
        split: train,val,test ratios (ignored when `split_parts` is given).
        split_parts: Split name to shard-path pattern (brace-expanded, then `re.match`).
        shuffle_seed: Shuffle shards with `random.Random(seed)` before cutting ratios.
        exclude: Regexes; matching shard paths are left out of the dataset.
        sqlite: Also write index.sqlite (only key lookups need it; training does not).
        force: Rebuild an already indexed folder.

    Raises:
        DatasetError: no shards, already indexed, an unreadable shard, a duplicate key.
        ConfigError: a bad ratio or split pattern, an empty train split.
    """
    root = Path(directory)
    if not root.is_dir():
        raise DatasetError(f"{root} is not a folder; give the folder that holds the .tar shards")
    meta = root / META
    if not force and ((meta / ".info.json").exists() or (meta / ".info.yaml").exists()):
        raise DatasetError(
            f"{root} is already indexed ({META}/.info.json exists); pass force=True "
            "(--force) to rebuild its index"
        )
    shards = list_shards(root, exclude)
    if not shards:
        raise DatasetError(
            f"no .tar shards found in {root}" + (" after --exclude" if exclude else "")
        )
    # Check the split arguments before writing anything.
    if split_parts:
        split_by_patterns(shards, split_parts)
    else:
        split_by_ratio(shards, split, shuffle_seed)

    energon_version = version("megatron-energon")  # recorded in .info.json, as Energon does
    start = time.perf_counter()
    meta.mkdir(exist_ok=True)
    sqlite_path = meta / "index.sqlite"
    counted, part_names = _native.index_shards(root, shards, sqlite_path if sqlite else None)
    if not sqlite:
        sqlite_path.unlink(missing_ok=True)  # a stale index would disagree with the shards
    counts = dict(counted)
    empty = [name for name, n in counts.items() if n == 0]
    if empty:
        for name in shards:
            Path(f"{root / name}.idx").unlink(missing_ok=True)
        raise DatasetError(
            f"shard {empty[0]} holds no samples ({len(empty)} such); Energon cannot index empty "
            "shards: remove them or leave them out with --exclude"
        )

    splits = (
        split_by_patterns(shards, split_parts)
        if split_parts
        else split_by_ratio(shards, split, shuffle_seed)
    )
    for warning in splits.warnings:
        log.warning(warning)
    (meta / "index.uuid").write_text(str(uuid.uuid4()))
    _write_json(
        meta / ".info.json",
        {"energon_version": energon_version, "shard_counts": counts},
    )
    collapsed = {name: collapse(names) for name, names in splits.parts.items()}
    with open(meta / "split.yaml", "w") as f:
        yaml.safe_dump({"split_parts": collapsed, "exclude": []}, f, sort_keys=False)
    (root / OURS).mkdir(exist_ok=True)
    _write_json(
        root / OURS / FINALIZE_RECORD,
        {
            "exclude": list(exclude),
            "split": list(split) if not split_parts else None,
            "split_parts": dict(split_parts) if split_parts else None,
            "shuffle_seed": shuffle_seed,
        },
    )
    seconds = time.perf_counter() - start
    return IndexResult(root, counts, splits.parts, part_names, splits.warnings, seconds)


def _encoding_from_manifest(root: Path) -> str | None:
    manifest = root / OURS / "manifest.json"
    if manifest.is_file():
        try:
            return json.loads(manifest.read_text()).get("encoding")
        except (OSError, ValueError):
            return None
    return None


def dataset_yaml(
    root: Path,
    *,
    encoding: str | None = None,
    sample_type: str | None = None,
    field_map: Mapping[str, str] | None = None,
    subflavors: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The dataset.yaml content: the existing one updated, never losing a user's subflavors.

    `sample_type` is `CrudeWebdataset` (the default), another class name from
    `megatron.energon`, or `module:Class` for a class elsewhere (e.g. Megatron-Bridge's).
    """
    path = root / META / "dataset.yaml"
    current: dict[str, Any] = {}
    if path.is_file():
        loaded = yaml.safe_load(path.read_text())
        if isinstance(loaded, dict):
            current = loaded
    out = dict(current)
    if sample_type is not None or "__class__" not in out:
        module, _, cls = (sample_type or "CrudeWebdataset").rpartition(":")
        out["__module__"] = module or "megatron.energon"
        out["__class__"] = cls
    if field_map is not None:
        out["field_map"] = dict(field_map)
    merged = dict(current.get("subflavors") or {})
    merged.update(subflavors or {})
    if encoding is not None and encoding not in CLASS_ENCODINGS:
        if encoding not in ENCODINGS:
            raise ConfigError(f"unknown encoding {encoding!r}; use one of {', '.join(ENCODINGS)}")
        merged["encoding"] = encoding
    if merged or "subflavors" in current or subflavors is not None:
        out["subflavors"] = merged
    return out


def finalize(
    directory: str | Path,
    *,
    encoding: str | None = None,
    split: Sequence[float] | str = (1, 0, 0),
    split_parts: Mapping[str, str] | None = None,
    shuffle_seed: int | None = None,
    exclude: Sequence[str] = (),
    sample_type: str | None = None,
    field_map: Mapping[str, str] | None = None,
    subflavors: Mapping[str, Any] | None = None,
    sqlite: bool = True,
    force: bool = False,
    validate: bool = True,
) -> FinalizeResult:
    """Makes a folder of shards a complete Energon dataset, then validates it.

    Writes `.nv-meta/dataset.yaml` (CrudeWebdataset with an `encoding` subflavor by default,
    keeping any subflavors already there) and the index (see `build_index`).

    Args:
        encoding: `preencoded` or `raw`; by default read from dataset.yaml or the manifest.
        sample_type, field_map, subflavors: What dataset.yaml declares (see `dataset_yaml`).
        validate: Run `validate` afterwards and raise when it finds problems.

    Raises:
        DatasetError: as `build_index`, or when validation fails.
    """
    root = Path(directory)
    encoding = encoding or _encoding_from_manifest(root)
    content = dataset_yaml(
        root, encoding=encoding, sample_type=sample_type, field_map=field_map, subflavors=subflavors
    )
    index = build_index(
        root,
        split=split,
        split_parts=split_parts,
        shuffle_seed=shuffle_seed,
        exclude=exclude,
        sqlite=sqlite,
        force=force,
    )
    tmp = root / META / "dataset.yaml.tmp"
    tmp.write_text(yaml.safe_dump(content, sort_keys=False))
    shutil.move(tmp, root / META / "dataset.yaml")
    report = None
    if validate:
        from shardcook.validate import validate as run_validate

        report = run_validate(root, encoding=encoding)
        if not report.ok:
            raise DatasetError(
                f"{root} was indexed but does not validate:\n  " + "\n  ".join(report.problems)
            )
    return FinalizeResult(index, content, report)
