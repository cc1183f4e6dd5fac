"""The one reader and writer of a dataset's metadata files (docs/FORMAT.md §5 and §6).

Energon's `.nv-meta/{dataset.yaml, split.yaml, .info.json, index.uuid}` (and `.info.yaml`, what
Energon before 7.0 wrote instead of `.info.json`) and shardcook's
`.shardcook/{manifest.json, finalize.json}`. Every reader checks the type and shape of what it
loads and turns any problem (unreadable, not YAML/JSON, a list where a mapping belongs, a negative
count, `.nv-meta` being a file) into one `DatasetError` line that names the file and says what is
wrong. A missing file reads as None; the caller decides whether that is a problem.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shardcook import safeyaml
from shardcook.braces import expand_braces
from shardcook.errors import ConfigError, DatasetError
from shardcook.files import remove_temporaries, write_atomic
from shardcook.layouts import LAYOUTS, Layout, by_encoding
from shardcook.layouts.base import CRUDE_WEBDATASET
from shardcook.layouts.names import (
    DATASET_YAML,
    FINALIZE_JSON,
    INDEX_UUID,
    INFO_JSON,
    INFO_YAML,
    MANIFEST_JSON,
    META_DIR,
    OURS_DIR,
    PROGRESS_DIR,
    REPORT_JSON,
    SPLIT_YAML,
    is_shard_name,
)

#: Counts are stored by Energon as signed 64-bit integers in index.sqlite.
MAX_COUNT = 2**63


@dataclass(frozen=True)
class DatasetYaml:
    """`.nv-meta/dataset.yaml`, checked: the sample class, subflavors and field_map.

    The class is named at the top level (a dataset class such as CrudeWebdataset), or under
    `sample_type` (a Sample class such as CaptioningSample, which Energon reads with its standard
    webdataset factory: what `energon prepare --sample-type` writes for a sample class).
    """

    content: dict[str, Any]

    @property
    def class_entry(self) -> dict[str, Any]:
        """The mapping that holds `__module__` and `__class__`."""
        nested = self.content.get("sample_type")
        if "__class__" not in self.content and isinstance(nested, dict):
            return nested
        return self.content

    @property
    def module(self) -> str:
        return str(self.class_entry.get("__module__") or "megatron.energon")

    @property
    def cls(self) -> str:
        return str(self.class_entry["__class__"])

    @property
    def subflavors(self) -> dict[str, Any]:
        return dict(self.content.get("subflavors") or {})

    @property
    def field_map(self) -> dict[str, str]:
        return dict(self.content.get("field_map") or {})

    @property
    def encoding(self) -> str | None:
        """The `encoding` subflavor, else the encoding of the layout whose class this names."""
        encoding = self.subflavors.get("encoding")
        if encoding is not None:
            return str(encoding)
        named = f"{self.module}:{self.cls}"
        if named == CRUDE_WEBDATASET:  # crude without a subflavor says nothing (e.g. generic)
            return None
        return next((lay.encoding for lay in LAYOUTS.values()
                     if not lay.subflavored and lay.sample_type == named), None)


@dataclass(frozen=True)
class SplitYaml:
    """`.nv-meta/split.yaml`: split name to its brace-expanded shard names, and exclusions."""

    parts: dict[str, list[str]]
    exclude: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class InfoJson:
    """`.nv-meta/.info.json` (or `.info.yaml`): samples per shard, in Energon's shard order."""

    shard_counts: dict[str, int]
    energon_version: str | None = None
    #: The file it was read from: INFO_JSON, or INFO_YAML for a dataset of Energon before 7.0.
    file: str = INFO_JSON


@dataclass(frozen=True)
class FinalizeRecord:
    """`.shardcook/finalize.json`: what finalize was asked, so a later finalize and validate
    keep it (exclusions, split, whether index.sqlite was written)."""

    exclude: list[str] = field(default_factory=list)
    #: The layout's encoding dataset.yaml was written for (None: no layout named).
    encoding: str | None = None
    split: list[float] | None = None
    split_parts: dict[str, str] | None = None
    shuffle_seed: int | None = None
    sqlite: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"exclude": self.exclude, "encoding": self.encoding, "split": self.split,
                "split_parts": self.split_parts, "shuffle_seed": self.shuffle_seed,
                "sqlite": self.sqlite}


# ---- paths -------------------------------------------------------------------------------------


def meta_path(root: Path, name: str) -> Path:
    return root / META_DIR / name


def ours_path(root: Path, name: str) -> Path:
    return root / OURS_DIR / name


def _label(root: Path, path: Path) -> str:
    """`path` as the user knows it: relative to the dataset when inside it."""
    try:
        return f"{root}/{path.relative_to(root)}"
    except ValueError:
        return str(path)


def _check_folder(root: Path, name: str) -> None:
    folder = root / name
    if folder.exists() and not folder.is_dir():
        raise DatasetError(
            f"{_label(root, folder)} is a file, not a folder; "
            f"run `shardcook finalize --force {root}` to rebuild it"
        )


# ---- reading -----------------------------------------------------------------------------------


def _load(root: Path, path: Path, parse: Callable[[str], Any]) -> Any:
    """The parsed file, None when it does not exist; DatasetError naming it otherwise."""
    _check_folder(root, path.parent.name)
    if not path.exists():
        return None
    label, fix = _label(root, path), _fix(root, path)
    if not path.is_file():
        raise DatasetError(f"{label} is not a regular file{fix}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DatasetError(f"{label} is not UTF-8 text{fix}") from None
    except OSError as e:
        raise DatasetError(f"{label} cannot be read ({e.strerror or e}){fix}") from None
    try:
        return parse(text)
    except yaml.YAMLError as e:
        raise DatasetError(f"{label} is not valid YAML ({safeyaml.describe(e)}){fix}") from None
    except (ValueError, RecursionError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DatasetError(f"{label} is not valid JSON ({detail}){fix}") from None


#: The repair of a damaged manifest, which nothing rebuilds: what the dataset commands and a
#: resumed run do without it.
_MANIFEST_FIX = ("; restore it from a copy, or delete it: it records the run that wrote the "
                 "dataset (its options and shard counts), which Energon does not read")


def _fix(root: Path, path: Path) -> str:
    """The repair advice for a bad file: Energon's files can be rebuilt from the shards; the
    manifest can be done without; finalize.json records what cannot, so it gets none."""
    if path.parent.name == META_DIR:
        return f"; run `shardcook finalize --force {root}`"
    return _MANIFEST_FIX if path.name == MANIFEST_JSON else ""


def _load_object(
    root: Path, path: Path, parse: Callable[[str], Any]
) -> tuple[dict[str, Any], str, str] | None:
    """The parsed file as a mapping, with its label and repair advice; None when it is absent."""
    data = _load(root, path, parse)
    if data is None and not path.exists():
        return None
    label, fix = _label(root, path), _fix(root, path)
    if not isinstance(data, dict):
        what = "a JSON object" if parse is _json else "a mapping"
        raise DatasetError(f"{label} must be {what}, not {_kind(data)}{fix}")
    return data, label, fix


def _json(text: str) -> Any:
    return json.loads(text, parse_constant=_no_constant)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def read_dataset_yaml(root: Path, name: str = DATASET_YAML) -> DatasetYaml | None:
    path = meta_path(root, name)
    loaded = _load_object(root, path, safeyaml.load)
    if loaded is None:
        return None
    data, label, fix = loaded
    entry = DatasetYaml(data).class_entry
    if not isinstance(entry.get("__class__"), str) or not entry["__class__"]:
        raise DatasetError(f"{label} has no '__class__' naming the sample class{fix}")
    if "__module__" in entry and not isinstance(entry["__module__"], str):
        raise DatasetError(f"{label}: '__module__' must be a module name, not "
                           f"{_kind(entry['__module__'])}{fix}")
    subflavors = data.get("subflavors")
    if subflavors is not None and not (
        isinstance(subflavors, dict) and all(isinstance(k, str) for k in subflavors)
    ):
        raise DatasetError(f"{label}: 'subflavors' must be a mapping, not {_kind(subflavors)}{fix}")
    if subflavors and "encoding" in subflavors and not isinstance(subflavors["encoding"], str):
        raise DatasetError(f"{label}: the 'encoding' subflavor must be a name, not "
                           f"{_kind(subflavors['encoding'])}{fix}")
    field_map = data.get("field_map")
    if field_map is not None and not (
        isinstance(field_map, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in field_map.items())
    ):
        raise DatasetError(f"{label}: 'field_map' must map field names to part names{fix}")
    return DatasetYaml(data)


def read_split_yaml(root: Path) -> SplitYaml | None:
    path = meta_path(root, SPLIT_YAML)
    loaded = _load_object(root, path, safeyaml.load)
    if loaded is None:
        return None
    data, label, fix = loaded
    split_parts = data.get("split_parts")
    if not isinstance(split_parts, dict):
        raise DatasetError(f"{label}: 'split_parts' must map split names to shard lists, not "
                           f"{_kind(split_parts)}{fix}")
    parts: dict[str, list[str]] = {}
    for name, patterns in split_parts.items():
        if not isinstance(name, str) or not (patterns is None or _str_list(patterns)):
            raise DatasetError(f"{label}: split {name!r} must be a list of shard names, not "
                               f"{_kind(patterns)}{fix}")
        parts[name] = _expand(label, patterns or [], fix)
    exclude = data.get("exclude")
    if exclude is not None and not _str_list(exclude):
        raise DatasetError(f"{label}: 'exclude' must be a list of shard names, not "
                           f"{_kind(exclude)}{fix}")
    return SplitYaml(parts, _expand(label, exclude or [], fix))


def _expand(label: str, patterns: Sequence[str], fix: str) -> list[str]:
    try:
        return [name for p in patterns for name in expand_braces(p)]
    except ConfigError as e:
        raise DatasetError(f"{label}: {e}{fix}") from None


def info_file(root: Path) -> str:
    """The name of the shard-count file Energon reads: `.info.json`, else a `.info.yaml` that
    Energon before 7.0 wrote."""
    json_path, yaml_path = meta_path(root, INFO_JSON), meta_path(root, INFO_YAML)
    return INFO_YAML if not json_path.exists() and yaml_path.exists() else INFO_JSON


def read_info_json(root: Path, name: str | None = None) -> InfoJson | None:
    """`.info.json`, else `.info.yaml`, as Energon reads them (same fields); with `name`, that
    one of the two."""
    name = name or info_file(root)
    path = meta_path(root, name)
    loaded = _load_object(root, path, _json if name == INFO_JSON else safeyaml.load)
    if loaded is None:
        return None
    data, label, fix = loaded
    counts = data.get("shard_counts")
    if not isinstance(counts, dict):
        raise DatasetError(f"{label}: 'shard_counts' must map shard names to sample counts, not "
                           f"{_kind(counts)}{fix}")
    for shard, n in counts.items():
        if not isinstance(shard, str):
            raise DatasetError(f"{label}: shard names must be text, not {_kind(shard)} "
                               f"({shard!r}){fix}")
        if not _is_count(n):
            raise DatasetError(f"{label}: the count of {shard} must be a whole number from 0 to "
                               f"2**63-1, not {n!r}{fix}")
    version = data.get("energon_version")
    return InfoJson(dict(counts), version if isinstance(version, str) else None, name)


def read_index_uuid(root: Path) -> str | None:
    path = meta_path(root, INDEX_UUID)
    text = _load(root, path, str.strip)
    if text is None:
        return None
    try:
        uuid.UUID(text)
    except ValueError:
        raise DatasetError(f"{_label(root, path)} does not hold a UUID; run "
                           f"`shardcook finalize --force {root}`") from None
    return str(text)


def read_manifest(root: Path) -> dict[str, Any] | None:
    """manifest.json as a checked mapping: `encoding` a name, `shards` a mapping of counts."""
    path = ours_path(root, MANIFEST_JSON)
    loaded = _load_object(root, path, _json)
    if loaded is None:
        return None
    data, label, _ = loaded
    return _checked_manifest(data, label)


def read_run_report(root: Path) -> dict[str, Any] | None:
    """report.json (what the run that wrote the dataset counted, skipped and timed), a JSON
    object; None when there is none."""
    loaded = _load_object(root, ours_path(root, REPORT_JSON), _json)
    return None if loaded is None else loaded[0]


def parse_manifest(text: str, label: str) -> dict[str, Any]:
    """manifest.json's text read from elsewhere (object storage), checked as `read_manifest`
    checks the file; `label` names it in errors."""
    try:
        data = _json(text)
    except (ValueError, RecursionError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DatasetError(f"{label} is not valid JSON ({detail}){_MANIFEST_FIX}") from None
    if not isinstance(data, dict):
        raise DatasetError(f"{label} must be a JSON object, not {_kind(data)}{_MANIFEST_FIX}")
    return _checked_manifest(data, label)


def _checked_manifest(data: dict[str, Any], label: str) -> dict[str, Any]:
    problem = _manifest_problem(data)
    if problem is not None:
        raise DatasetError(f"{label}: {problem}{_MANIFEST_FIX}")
    return data


def _manifest_problem(data: dict[str, Any]) -> str | None:
    if data.get("encoding") is not None and not isinstance(data["encoding"], str):
        return f"'encoding' must be a name, not {_kind(data['encoding'])}"
    shards = data.get("shards")
    if shards is not None and not (
        isinstance(shards, dict) and all(_is_count(n) for n in shards.values())
    ):
        return "'shards' must map shard names to sample counts"
    config = data.get("config")
    if config is not None and not (
        isinstance(config, dict) and all(isinstance(v, dict) for v in config.values())
    ):
        return "'config' must map sections to their options"
    for key in ("latent_channels", "t5_max_length"):
        if data.get(key) is not None and not _is_count(data[key]):
            return f"{key!r} must be a whole number, not {data[key]!r}"
    return None


def recorded_shards(root: Path) -> dict[str, int | None]:
    """The shards the run that wrote the folder recorded, with their sample counts where known:
    each progress marker's shard (`written`, or ingest's `samples`) and the manifest's `shards`.
    Empty for a folder no shardcook run wrote; a damaged manifest or marker is passed over
    (validate names a damaged manifest)."""
    found: dict[str, int | None] = {}
    progress = root / OURS_DIR / PROGRESS_DIR
    for marker in sorted(progress.glob("*.json")) if progress.is_dir() else ():
        try:
            record = _json(marker.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        shard = record.get("shard") if isinstance(record, dict) else None
        if isinstance(shard, str):
            count = record.get("written", record.get("samples"))
            found[shard] = count if _is_count(count) else None
    try:
        manifest = read_manifest(root)
    except DatasetError:
        manifest = None
    found.update((manifest or {}).get("shards") or {})
    return {name: n for name, n in found.items() if is_shard_name(name)}


def read_finalize_record(root: Path) -> FinalizeRecord | None:
    path = ours_path(root, FINALIZE_JSON)
    loaded = _load_object(root, path, _json)
    if loaded is None:
        return None
    data, label, _ = loaded
    exclude = data.get("exclude") or []
    encoding = data.get("encoding")
    split = data.get("split")
    split_parts = data.get("split_parts")
    seed = data.get("shuffle_seed")
    sqlite = data.get("sqlite", True)
    if not _str_list(exclude):
        raise DatasetError(f"{label}: 'exclude' must be a list of patterns, not {_kind(exclude)}")
    if encoding is not None and not isinstance(encoding, str):
        raise DatasetError(f"{label}: 'encoding' must be a name, not {_kind(encoding)}")
    if split is not None and not (
        isinstance(split, list) and len(split) == 3
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in split)
    ):
        raise DatasetError(f"{label}: 'split' must be three numbers, not {split!r}")
    if split_parts is not None and not (
        isinstance(split_parts, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in split_parts.items())
    ):
        raise DatasetError(f"{label}: 'split_parts' must map split names to patterns")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise DatasetError(f"{label}: 'shuffle_seed' must be a whole number, not {seed!r}")
    if not isinstance(sqlite, bool):
        raise DatasetError(f"{label}: 'sqlite' must be true or false, not {sqlite!r}")
    return FinalizeRecord(list(exclude), encoding, [float(v) for v in split] if split else None,
                          dict(split_parts) if split_parts else None, seed, sqlite)


def recorded_encoding(root: Path, *, skip_damaged: bool = False) -> str | None:
    """The encoding dataset.yaml declares, else the manifest's, else finalize.json's; None when
    none says. A damaged file raises its DatasetError, or is passed over with `skip_damaged`."""
    readers: tuple[Callable[[Path], Any], ...] = (
        read_dataset_yaml, read_manifest, read_finalize_record)
    for read in readers:
        try:
            found = read(root)
        except DatasetError:
            if not skip_damaged:
                raise
            continue
        if isinstance(found, (DatasetYaml, FinalizeRecord)):
            encoding = found.encoding
        else:
            encoding = None if found is None else found.get("encoding")
        if encoding is not None:
            return str(encoding)
    return None


def layout_of(encoding: str, source: str) -> Layout:
    """The layout of `encoding`, or one sentence saying `source` names an unknown one."""
    layout = by_encoding(encoding)
    if layout is None:
        known = ", ".join(sorted(lay.encoding for lay in LAYOUTS.values()))
        raise ConfigError(f"{source} names the unknown encoding {encoding!r}; use one of {known}")
    return layout


# ---- writing -----------------------------------------------------------------------------------


def refuse_links(root: Path) -> None:
    """Refuses a dataset whose `.nv-meta` or `.shardcook`, or an entry in them, is a symbolic
    link: the metadata written there would land wherever the link points, in another dataset's
    folder say. Called before anything is read or written.

    Raises:
        DatasetError: naming the first link and where it points.
    """
    for name in (META_DIR, OURS_DIR):
        folder = root / name
        inside = sorted(folder.iterdir()) if folder.is_dir() and not folder.is_symlink() else []
        link = next((p for p in (folder, *inside) if p.is_symlink()), None)
        if link is not None:
            raise DatasetError(
                f"{_label(root, link)} is a symbolic link (to {os.readlink(link)}), and the "
                "dataset's metadata is never written through a link, which could overwrite "
                "another folder's files; replace it with a "
                f"{'folder' if link == folder else 'file'} of its own, or remove it"
            )


def remove_stale_temporaries(root: Path) -> None:
    """Removes, from `.nv-meta/` and `.shardcook/`, the temporary files of metadata writes that
    a killed process left (`.index.uuid.tmp1234`); a file of a process still running is left."""
    for name in (META_DIR, OURS_DIR):
        remove_temporaries(root / name)


def prepare_meta_dir(root: Path, *, repair: bool) -> Path:
    """`.nv-meta`, made a folder: with `repair` a file of that name is removed first."""
    meta = root / META_DIR
    if meta.exists() and not meta.is_dir():
        if not repair:
            _check_folder(root, META_DIR)
        meta.unlink()
    meta.mkdir(exist_ok=True)
    return meta


def remove_broken(path: Path) -> None:
    """Removes `path` when it is not a regular file (a folder named like a metadata file)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)


def write_dataset_yaml(root: Path, content: Mapping[str, Any], name: str = DATASET_YAML) -> None:
    path = meta_path(root, name)
    remove_broken(path)
    write_atomic(path, yaml.safe_dump(dict(content), sort_keys=False))


def write_split_yaml(root: Path, parts: Mapping[str, list[str]], exclude: Sequence[str]) -> None:
    """split.yaml with brace-collapsed shard lists (as given) and the excluded shard names."""
    path = meta_path(root, SPLIT_YAML)
    remove_broken(path)
    text = yaml.safe_dump({"split_parts": dict(parts), "exclude": list(exclude)}, sort_keys=False)
    write_atomic(path, text)


def write_info_json(root: Path, energon_version: str, counts: Mapping[str, int]) -> None:
    """`.info.json` as Energon writes it: `json.dump(indent=2)`, no trailing newline. A
    `.info.yaml` there (from Energon before 7.0) is rewritten with the same content, as
    `energon prepare` does, so an older Energon reading it sees the same counts."""
    path = meta_path(root, INFO_JSON)
    remove_broken(path)
    obj = {"energon_version": energon_version, "shard_counts": dict(counts)}
    write_atomic(path, json.dumps(obj, indent=2))
    legacy = meta_path(root, INFO_YAML)
    if legacy.is_file():
        write_atomic(legacy, yaml.safe_dump(obj))


def convert_info_yaml(root: Path) -> None:
    """`.info.json` with the content of an older Energon's `.info.yaml`, as `energon prepare
    --tar-index-only` converts it (`json.dump(indent=2)` of the YAML's mapping)."""
    text = meta_path(root, INFO_YAML).read_text(encoding="utf-8")
    write_atomic(meta_path(root, INFO_JSON), json.dumps(safeyaml.load(text), indent=2))


def write_index_uuid(root: Path) -> None:
    path = meta_path(root, INDEX_UUID)
    remove_broken(path)
    write_atomic(path, str(uuid.uuid4()))


def write_finalize_record(root: Path, record: FinalizeRecord) -> None:
    ours = root / OURS_DIR
    if ours.exists() and not ours.is_dir():
        ours.unlink()  # finalize repairs: a file where our folder belongs holds nothing of ours
    ours.mkdir(exist_ok=True)
    path = ours_path(root, FINALIZE_JSON)
    remove_broken(path)
    write_atomic(path, json.dumps(record.to_dict(), indent=2))
