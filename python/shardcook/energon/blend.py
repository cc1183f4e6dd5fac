"""Writing Energon MetadatasetV2 files that blend datasets by weight (`shardcook blend`)."""

from __future__ import annotations

import keyword
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcook import safeyaml
from shardcook.dataset import metadata
from shardcook.dataset.check import trust
from shardcook.dataset.jsonl.file import JsonlFile
from shardcook.dataset.kind import dataset_kind
from shardcook.dataset.location import readable
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import INFO_JSON, META_DIR, OURS_DIR
from shardcook.storage import is_url
from shardcook.storage.local import LocalStore, check_local_path
from shardcook.storage.location import Location, locate

__all__ = [
    "BlendEntry", "metadataset_files", "parse_blend_entry", "read_metadataset", "write_blend",
]


@dataclass(frozen=True)
class BlendEntry:
    """One dataset of a blend and its sampling weight.

    Attributes:
        path: A prepared dataset folder, its URL (`msc://PROFILE/path`, kept as a str), or
            another metadataset `.yaml`.
        weight: Relative sampling weight (> 0); weights need not sum to 1.
    """

    path: Path | str
    weight: float = 1.0


def _location(text: str) -> Path | str:
    """A URL stays a str (a Path would fold its `//`); anything else is a Path."""
    return locate(text, "The blended dataset").given


def parse_blend_entry(spec: str) -> BlendEntry:
    """Parses `PATH=WEIGHT` (or a bare `PATH`, weight 1) into a `BlendEntry`.

    The split is at the last `=`, so paths may contain `=`.

    Raises:
        ConfigError: The weight is not a positive finite number.
    """
    path, sep, weight_text = spec.rpartition("=")
    if not sep:
        return BlendEntry(_location(spec), 1.0)
    try:
        weight = float(weight_text)
    except ValueError:
        raise ConfigError(
            f"Blend entry {spec!r}: write PATH=WEIGHT with a number as WEIGHT."
        ) from None
    if not (math.isfinite(weight) and weight > 0):
        raise ConfigError(f"Blend entry {spec!r}: the weight must be a positive number.")
    if not path:
        raise ConfigError(f"Blend entry {spec!r}: the path before '=' is empty.")
    return BlendEntry(_location(path), weight)


#: A metadataset file larger than this is refused (a blend of thousands of datasets is ~1 MB).
MAX_METADATASET_BYTES = 16 << 20
#: More file reads than this in one metadataset tree means files named over and over.
MAX_METADATASET_READS = 10_000
_YAML_SUFFIXES = (".yaml", ".yml")


def read_metadataset(path: str | Path) -> dict[str, Any]:
    """The mapping of a metadataset `.yaml`, once it and every `.yaml` it names through `path:`
    (relative to its folder, as Energon reads them) are checked: YAML mappings without duplicate
    keys, none leading back to one that names it (Energon would recurse until Python's limit).

    Raises:
        ConfigError: a file cannot be read, is not a YAML mapping, repeats a key, or the files
            name each other in a cycle.
    """
    data, _ = _walk(Path(path))
    return data


def metadataset_files(path: str | Path) -> list[Path]:
    """The resolved `.yaml` files a metadataset reads: itself and those it names, recursively
    (checked as `read_metadataset` does)."""
    _, files = _walk(Path(path))
    return files


def _walk(top: Path) -> tuple[dict[str, Any], list[Path]]:
    first: dict[str, Any] | None = None
    files: list[Path] = []
    stack: list[tuple[Path, tuple[Path, ...]]] = [(top.resolve(), ())]
    reads = 0
    while stack:
        path, chain = stack.pop()
        reads += 1
        if reads > MAX_METADATASET_READS:
            raise ConfigError(f"{top} names other metadataset files more than "
                              f"{MAX_METADATASET_READS:,} times; flatten the blend.")
        if path in chain:
            loop = " -> ".join(str(p) for p in (*chain[chain.index(path):], path))
            raise ConfigError(
                f"The metadataset files name each other in a cycle ({loop}); remove one of "
                "those `path:` entries."
            )
        data = _read_one(path)
        first = data if first is None else first
        if path not in files:
            files.append(path)
        stack += [(named, (*chain, path)) for named in _named_yaml(data, path.parent)
                  if named.is_file()]
    assert first is not None
    return first, files


def _read_one(path: Path) -> dict[str, Any]:
    import yaml

    from shardcook.files import read_regular_file

    try:
        data = safeyaml.load(read_regular_file(path, MAX_METADATASET_BYTES).decode("utf-8"))
    except OSError as e:
        raise ConfigError(f"{path} cannot be read ({e.strerror or e}).") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not UTF-8 text; a metadataset is a YAML file.") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML ({safeyaml.describe(e)}).") from None
    except RecursionError:
        raise ConfigError(f"{path} nests too deeply to be a metadataset.") from None
    if not isinstance(data, dict):
        kind = "nothing" if data is None else f"a {type(data).__name__}"
        raise ConfigError(
            f"{path} must be an Energon metadataset (a mapping with `splits:`), not {kind}."
        )
    return data


def _named_yaml(data: dict[str, Any], base: Path) -> list[Path]:
    """The `.yaml` files `path:` entries anywhere in `data` name, resolved from `base`."""
    found: list[Path] = []
    stack: list[object] = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            named = node.get("path")
            if isinstance(named, str) and named.endswith(_YAML_SUFFIXES) and "\0" not in named:
                found.append((base / named).resolve())
            stack += list(node.values())
        elif isinstance(node, list):
            stack += node
    return found


def _check_jsonl(dataset: JsonlFile) -> None:
    """Refuses a JSONL dataset Energon cannot load: no index, or one of another file."""
    try:
        dataset.indexed()
    except DatasetError as e:
        raise ConfigError(f"{dataset} is not a usable Energon dataset: {e}") from None


#: An auxiliary source's name: the keyword argument a cooker is given it as.
_AUX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What `--aux` takes.
AuxSources = Sequence[str] | Mapping[str, str | Path]


def _aux_references(aux: AuxSources | None, base: Path) -> dict[str, str]:
    """`aux` (NAME=SOURCE strings, or a mapping) as a metadataset's `aux:` entries, written
    from `base`, the blend file's folder (see `_aux_reference`).

    Raises:
        ConfigError: a NAME that is no identifier or comes twice, a SOURCE that is no folder.
    """
    if aux is None:
        return {}
    if isinstance(aux, Mapping):
        pairs = list(aux.items())
    elif isinstance(aux, (str, bytes)) or not isinstance(aux, Sequence):
        raise ConfigError(f"aux must be a list of 'NAME=SOURCE' strings or a mapping, not "
                          f"{aux!r:.60}.")
    else:
        pairs = [_aux_pair(spec) for spec in aux]
    references: dict[str, str] = {}
    for name, source in pairs:
        if not (isinstance(name, str) and _AUX_NAME.fullmatch(name)) or keyword.iskeyword(name):
            raise ConfigError(f"--aux {name!r}: NAME must be a Python identifier, the argument "
                              "a cooker is given the source as.")
        if not isinstance(source, (str, os.PathLike)):
            raise ConfigError(f"--aux {name}: the source must be a path or URL, not "
                              f"{source!r:.60}.")
        if name in references:
            raise ConfigError(f"--aux names {name} twice; give each source its own name.")
        references[name] = _aux_reference(source, base)
    return references


def _aux_pair(spec: object) -> tuple[str, str]:
    if not isinstance(spec, str) or "=" not in spec or spec.endswith("="):
        raise ConfigError(f"--aux {spec!r:.80}: write NAME=SOURCE, e.g. images=./images.")
    name, _, source = spec.partition("=")
    return name, source


def _aux_reference(source: str | os.PathLike[str], base: Path) -> str:
    """How Energon's metadataset names `source`: a URL as given; a prepared dataset's folder
    by its path from `base`; any other folder (of media files, or a filesystem dataset, which
    `energon prepare-media` gave an index of media metadata) as `filesystem://` and that path.
    Any URL passes (Energon's own `filesystem://` too, which no store opens), so this asks
    only whether it is one, not `locate`."""
    if is_url(source):
        return os.fspath(source)
    check_local_path(source, "An --aux source")
    folder = Path(source)
    if not folder.is_dir():
        raise ConfigError(f"--aux source {str(folder)!r} is not a folder; give the folder of "
                          "the files (or a prepared dataset) the cookers read.")
    try:
        prepared = metadata.read_info_json(folder) is not None
    except DatasetError as e:
        raise ConfigError(f"--aux source {folder} is not a usable Energon dataset: {e}") from None
    written = os.path.relpath(folder.resolve(), base)
    return written if prepared else f"filesystem://{written}"


def _check_dataset(path: Path, out: Path) -> None:
    if path.is_file() and path.suffix in _YAML_SUFFIXES:
        if out.resolve() in metadataset_files(path):
            raise ConfigError(
                f"{path} reads {out}, so the blend would include itself; write it elsewhere."
            )
        return
    try:
        info = metadata.read_info_json(path)
    except DatasetError as e:
        raise ConfigError(f"{path} is not a usable Energon dataset: {e}") from None
    if info is None:
        raise ConfigError(
            f"{path} is not a prepared Energon dataset (no {META_DIR}/{INFO_JSON}) nor a "
            "metadataset .yaml; run `shardcook finalize` on it first."
        )


#: A split part name: what Energon's split.yaml keys and a MetadatasetV2's `splits` look like.
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def _check_split(split: str) -> None:
    if not isinstance(split, str) or not _SPLIT_NAME.fullmatch(split):
        raise ConfigError(
            f"--split-part {split!r} is not a split part name; use letters, digits, '_', '-' or "
            "'.' (e.g. train)."
        )


def _enclosing_dataset(path: Path) -> Path | None:
    """The dataset folder `path` lies in (a folder with `.nv-meta/` above it), if any."""
    return next((d for d in path.parents if (d / META_DIR).is_dir()), None)


def _is_input(target: Path, at: Location) -> bool:
    """The local path `target` is the blended dataset `at` itself: each lies in the other,
    their links followed (`Store.inside`); a folder in a bucket holds no local path."""
    return at.store.inside(str(target)) and LocalStore(target).inside(at.store.where(""))


def _check_out(out: Path, inputs: Sequence[Location], force: bool) -> None:
    """Refuses an output that would replace a dataset's file, an input, or (without `force`)
    any existing file: nothing is written when this raises."""
    if out.suffix != ".yaml":
        raise ConfigError(f"{out}: the blend file must end in .yaml (Energon requires it).")
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; name the .yaml file to write.")
    target = out.resolve()
    if any(_is_input(target, at) for at in inputs):
        raise ConfigError(f"{out} is one of the blend's own inputs; write the blend elsewhere.")
    if any(part in (META_DIR, OURS_DIR) for part in target.parts):
        raise ConfigError(
            f"{out} is inside a dataset's {META_DIR} or {OURS_DIR} folder; writing there would "
            "break the dataset, so write the blend elsewhere."
        )
    if target.exists():
        dataset = _enclosing_dataset(target)
        if dataset is not None:
            raise ConfigError(
                f"{out} already exists inside the dataset {dataset}; blend never replaces a "
                "dataset's files, so write it elsewhere."
            )
        if not force:
            raise ConfigError(f"{out} already exists; add --force to replace it.")


def write_blend(
    out: str | Path,
    entries: Sequence[BlendEntry | str],
    *,
    split: str = "train",
    check: bool = True,
    force: bool = False,
    aux: AuxSources | None = None,
) -> Path:
    """Writes a MetadatasetV2 YAML that samples the given datasets by weight.

    Paths are written relative to the YAML's folder (Energon resolves them from there), so the
    file keeps working when the folder tree moves as a whole; a dataset's URL is written as it
    is (Energon opens it through the Multi-Storage Client; its metadata is checked through a
    scratch folder in the temporary folder). The file is written under a
    temporary name, loaded by Energon (when `check`), and only then renamed to `out`.

    Args:
        out: The `.yaml` file to write.
        entries: `BlendEntry`s or `PATH=WEIGHT` strings; a PATH is a prepared dataset folder,
            a metadataset `.yaml`, or a JSONL dataset's `.jsonl` (indexed by finalize).
        split: The split part the blend defines (and reads from every dataset).
        check: Load the written file's `split` with Energon to make sure it is valid.
        force: Replace an existing file at `out` (never one inside a dataset or an input).
        aux: Auxiliary sources (`NAME=SOURCE` strings, or a mapping of NAME to SOURCE) given to
            every blended dataset that is not a metadataset: a JSONL file or a crude dataset
            whose cookers read them (see `_aux_reference` for how SOURCE is written).

    Returns:
        The path written.

    Raises:
        ConfigError: No entries, a bad entry or split name, a path that is not a dataset (a
            `.jsonl` without its index), `out` not `.yaml`, inside a dataset, one of the inputs,
            or existing without `force`; an `aux` name that is no identifier, a source that is
            no folder.

    Example:
        >>> write_blend("mix.yaml", ["data/laion=0.7", "data/cc12m=0.3"])
    """
    import yaml

    check_local_path(out, "The blend file")
    out = Path(out)
    _check_split(split)
    if isinstance(entries, (str, bytes)) or not isinstance(entries, Sequence) or not all(
            isinstance(e, (str, BlendEntry)) for e in entries):
        raise ConfigError("entries must be a list of BlendEntry or 'PATH=WEIGHT' strings, not "
                          f"{entries!r:.60}.")
    parsed = [parse_blend_entry(e) if isinstance(e, str) else e for e in entries]
    located = [locate(entry.path, "The blended dataset") for entry in parsed]
    if not parsed:
        raise ConfigError("Give at least one PATH=WEIGHT to blend.")
    _check_out(out, located, force)
    base = out.resolve().parent
    aux_references = _aux_references(aux, base)
    blend = []
    for entry, at in zip(parsed, located, strict=True):
        _check_entry(at, out)
        if not (math.isfinite(entry.weight) and entry.weight > 0):
            raise ConfigError(f"{entry.path}: the weight must be a positive number.")
        written = _reference(entry.path, base)
        item: dict[str, Any] = {"path": written, "weight": float(entry.weight)}
        # Energon refuses auxiliary sources on a metadataset, whose datasets name their own
        if aux_references and not str(written).endswith(_YAML_SUFFIXES):
            item["aux"] = dict(aux_references)
        blend.append(item)
    if aux_references and not any("aux" in item for item in blend):
        raise ConfigError("--aux names sources for the blended datasets, but every one is a "
                          "metadataset, which takes none; give them in its own file.")
    doc = {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        "splits": {split: {"blend": blend}},
    }
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"Cannot create the folder of {out} ({e.strerror or e}).") from None
    # Energon needs the .yaml suffix and resolves paths from the file's folder: same folder
    tmp = out.with_name(f".{out.stem}.tmp{os.getpid()}.yaml")
    try:
        tmp.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        if check:
            _check_loads(tmp, out, split)
        os.replace(tmp, out)
    except OSError as e:
        raise ConfigError(f"Cannot write {out} ({e.strerror or e}).") from None
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _reference(path: str | os.PathLike[str], base: Path) -> str:
    """How the blend file names the blended dataset `path`: a URL as given, which Energon opens
    itself; a local path by its path from `base`, the file's folder, which Energon resolves it
    from (asked of the text, as Energon asks it)."""
    if is_url(path):
        return os.fspath(path)
    return os.path.relpath(Path(path).resolve(), base)


def _check_entry(at: Location, out: Path) -> None:
    """Checks that a blended dataset is one Energon can load and that its metadata names only
    trusted code."""
    what = dataset_kind(at)
    what.refuse_cache("`shardcook blend`")
    dataset = what.records
    if dataset is not None:  # a JSONL file names no code
        _check_jsonl(dataset)
    else:
        with readable(at) as files:
            _check_dataset(files.resolve(), out)
            _refuse_untrusted_code(files.resolve())


def _refuse_untrusted_code(path: Path) -> None:
    """Refuses a dataset whose metadata (or a metadataset naming code anywhere below it) would
    make Energon's load check import a module off the allowlist or run a Python file."""
    untrusted = trust.blend_code_problems(path, "; leave that dataset out of the blend")
    if untrusted:
        raise ConfigError(untrusted[0])


def _check_loads(path: Path, out: Path, split: str) -> None:
    """Loads the blend at `path` and its `split` of every dataset with Energon."""
    from megatron.energon import WorkerConfig, load_dataset

    try:
        load_dataset(str(path)).get_datasets(
            training=False, split_part=split,
            worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0))
    except Exception as e:  # noqa: BLE001 - any failure means the blend is unusable
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        if isinstance(e, KeyError):
            detail = f"no split part {split!r} in a blended dataset"
        raise ConfigError(
            f"Energon cannot load split {split!r} of the blend for {out} ({detail}); "
            "nothing was written."
        ) from None
