"""`ingest`'s configuration: Primus's `mlperf_flux1.yaml` keys as written (`datasets` of
`name`/`manifest_url`/`split_name`, `empty_encodings`, `output.output_dir` with its
`${VAR:default}` form, `pipeline.max_workers`/`prefetch_depth`/`max_files`), plus local inputs
(`paths`) and a manifest file with a `base_url`; checked whole before any work."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from shardcook.errors import ConfigError
from shardcook.jobs.ingest.download import Retry

#: Split names become shard prefixes (`train-shard-000000.tar`), so lowercase letters only.
SPLIT_NAME = re.compile(r"[a-z]+")
ARROW_SUFFIX = ".arrow"
_ENV_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


@dataclass(frozen=True)
class IngestDataset:
    """One split's inputs: local Arrow files (`paths`), or a manifest to download."""

    split: str
    name: str = ""
    paths: tuple[Path, ...] = ()
    manifest_url: str | None = None
    manifest: Path | None = None
    base_url: str | None = None


@dataclass(frozen=True)
class EmptyEncodings:
    manifest_url: str
    output_subdir: str = "empty_encodings"


@dataclass
class IngestConfig:
    #: A local path, or a URL in object storage.
    output_dir: str | None = None
    datasets: list[IngestDataset] = field(default_factory=list)
    empty_encodings: EmptyEncodings | None = None
    max_workers: int = 4
    prefetch_depth: int = 6
    max_files: int | None = None
    retry: Retry = field(default_factory=Retry)
    finalize: bool = True


def expand_env(text: str) -> str:
    """Primus's `${VAR:default}` (and `${VAR}`) in a path, from the environment."""
    def value(m: re.Match[str]) -> str:
        found = os.environ.get(m.group(1))
        if found is None and m.group(2) is None:
            raise ConfigError(f"{text!r} names ${{{m.group(1)}}}, which is not set; set it or "
                              "give a default as ${VAR:default}")
        return found if found is not None else m.group(2)
    return _ENV_DEFAULT.sub(value, text)


def _mapping(value: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping of {', '.join(keys)}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise ConfigError(f"{where} has unknown key(s) {', '.join(unknown)}; known: "
                          f"{', '.join(keys)}")
    return value


def _count(value: Any, where: str, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{where} must be a whole number of at least 1, not {value!r}")
    return value


def check_split(split: str) -> str:
    if not SPLIT_NAME.fullmatch(split):
        raise ConfigError(f"split name {split!r} must be lowercase letters (train, val, ...)")
    return split


def dataset_from(entry: Any, n: int) -> IngestDataset:
    where = f"datasets[{n}]"
    d = _mapping(entry, where, ("name", "manifest_url", "split_name", "paths", "manifest",
                                "base_url"))
    split = check_split(str(d.get("split_name", "train")))
    paths = d.get("paths") or []
    if isinstance(paths, str) or not isinstance(paths, list):
        raise ConfigError(f"{where}.paths must be a list of Arrow files or folders")
    for key in ("manifest_url", "manifest", "base_url"):
        if d.get(key) is not None and not isinstance(d[key], str):
            raise ConfigError(f"{where}.{key} must be a string, not {d[key]!r}")
    sources = sum(bool(x) for x in (paths, d.get("manifest_url"), d.get("manifest")))
    if sources != 1:
        raise ConfigError(f"{where} needs exactly one of manifest_url, manifest (with base_url) "
                          "or paths")
    if d.get("manifest") and not d.get("base_url"):
        raise ConfigError(f"{where}.manifest needs base_url, the address its files are under")
    if d.get("base_url") and not d.get("manifest"):
        raise ConfigError(f"{where}.base_url goes with manifest (a local `MD5 FILENAME` file)")
    return IngestDataset(split=split, name=str(d.get("name", split)),
                         paths=tuple(Path(expand_env(str(p))) for p in paths),
                         manifest_url=d.get("manifest_url"),
                         manifest=(Path(expand_env(str(d["manifest"])))
                                   if d.get("manifest") else None),
                         base_url=d.get("base_url"))


def from_yaml(path: Path) -> IngestConfig:
    """The config in a YAML file (Primus's `mlperf_flux1.yaml` keys); ConfigError naming the
    first wrong key."""
    from shardcook.config import read_config_file

    raw = read_config_file(path)  # the same file rules as every --config
    top = _mapping(raw, f"--config {path}", ("datasets", "empty_encodings", "output", "pipeline"))
    cfg = IngestConfig()
    datasets = top.get("datasets") or []
    if not isinstance(datasets, list):
        raise ConfigError(f"{path}: datasets must be a list")
    cfg.datasets = [dataset_from(entry, n) for n, entry in enumerate(datasets)]
    out = _mapping(top.get("output"), "output", ("output_dir",))
    if out.get("output_dir"):
        cfg.output_dir = expand_env(str(out["output_dir"]))
    empty = _mapping(top.get("empty_encodings"), "empty_encodings",
                     ("manifest_url", "output_subdir"))
    if empty:
        subdir = str(empty.get("output_subdir", "empty_encodings"))
        if (len(PurePosixPath(subdir).parts) != 1 or "\\" in subdir or subdir.startswith(".")
                or subdir in {d.split for d in cfg.datasets}):
            raise ConfigError(f"empty_encodings.output_subdir {subdir!r} must be one plain folder "
                              "name inside the output folder, not hidden nor a split's")
        if not isinstance(empty.get("manifest_url"), str):
            raise ConfigError("empty_encodings needs manifest_url, the address of its .uri file")
        cfg.empty_encodings = EmptyEncodings(empty["manifest_url"], subdir)
    pipe = _mapping(top.get("pipeline"), "pipeline", ("max_workers", "prefetch_depth",
                                                       "max_files", "stall_timeout_s"))
    cfg.max_workers = _count(pipe.get("max_workers", 4), "pipeline.max_workers") or 4
    cfg.prefetch_depth = _count(pipe.get("prefetch_depth", 6), "pipeline.prefetch_depth") or 6
    cfg.max_files = _count(pipe.get("max_files"), "pipeline.max_files", allow_none=True)
    if pipe.get("stall_timeout_s") is not None:
        cfg.retry = replace(cfg.retry, stall_s=pipe["stall_timeout_s"])
    return cfg


def check(cfg: IngestConfig) -> None:
    """Everything a run needs, before any work."""
    if cfg.output_dir is None:
        raise ConfigError("give --output-dir (or output.output_dir in --config)")
    if not cfg.datasets:
        raise ConfigError("give Arrow files or folders, --manifest-url, or datasets in --config")
    splits = [d.split for d in cfg.datasets]
    if len(set(splits)) != len(splits):
        raise ConfigError(f"two datasets write the same split ({', '.join(splits)}); give each "
                          "its own split_name")
    for name, value in (("max_workers", cfg.max_workers), ("prefetch_depth", cfg.prefetch_depth)):
        _count(value, f"--{name.replace('_', '-')}")
    _count(cfg.max_files, "--max-files", allow_none=True)
    stall = cfg.retry.stall_s
    if not isinstance(stall, (int, float)) or isinstance(stall, bool) or not 0 < stall < 1e6:
        raise ConfigError(f"the stall timeout must be a number of seconds above 0 (and under "
                          f"1,000,000), not {stall!r}")
