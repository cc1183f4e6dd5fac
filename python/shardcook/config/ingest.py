"""`ingest`'s settings, declared once: `IngestOptions` are its command-line options (each field
with its help, panel and rules; `cli/ingest.py` makes the options from them), `IngestConfig`
the whole run, and `from_yaml` the translation of Primus's `mlperf_flux1.yaml` keys as written
(`datasets` of `name`/`manifest_url`/`split_name`, `empty_encodings`, `output.output_dir` with
its `${VAR:default}` form, `pipeline.max_workers`/`prefetch_depth`/`max_files`/
`stall_timeout_s`), plus local inputs (`paths`) and a manifest file with a `base_url`. A value
is checked by its field's type and rules wherever it was given, in the one sentence
(`fields.refusal`); the run is checked whole (`check`) before any work."""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcook.errors import ConfigError
from shardcook.fields import Rule, bounded, check_rules, flag, matching, option, typed

ARROW_SUFFIX = ".arrow"
_ENV_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")

SRC, RUN = "Inputs", "Run"
AT_LEAST_1 = bounded(1)
#: Split names become shard prefixes (`train-shard-000000.tar`), so lowercase letters only.
SPLIT_NAME = matching(r"[a-z]+", "lowercase letters (train, val, ...)")
#: More concurrent downloads only share the same bandwidth, and each is a thread.
MAX_DOWNLOADS = 64
#: Below a million seconds: a larger timeout would wait on a dead server for weeks.
STALL = Rule(lambda v: 0 < v < 1e6, "a number of seconds above 0 (and under 1,000,000)")


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a download is retried (delay doubles, capped)."""

    attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    #: A server that sends nothing for this long, or a transfer slower than 64 KiB per this
    #: long, is given up on and the attempt retried.
    stall_s: float = 60.0


@dataclass
class IngestOptions:
    """`shardcook ingest`'s options (besides its inputs and --config)."""

    split: str = option("train", "The split the inputs or manifest become (train, val).", SRC,
                        rules=[SPLIT_NAME])
    manifest_url: str | None = option(
        None, "An MLCommons manifest URL ending in .uri or .md5 (the base URL and the "
              "`MD5 FILENAME` list side by side).", SRC)
    manifest: str | None = option(
        None, "A local file of `MD5 FILENAME` lines; give --base-url.", SRC)
    base_url: str | None = option(None, "The address --manifest's files are under.", SRC)
    output_dir: str | None = option(
        None, "The dataset folder to write (each split in a folder of its own there): a local "
              "path, or msc://PROFILE/path or s3://bucket/path in object storage.", RUN)
    max_workers: int = option(4, "Concurrent downloads.", RUN,
                              rules=[bounded(1, MAX_DOWNLOADS, why="each is a thread")])
    prefetch_depth: int = option(6, "Most downloaded Arrow files on disk at once.", RUN,
                                 rules=[AT_LEAST_1])
    max_files: int | None = option(None, "Only the first N files of each split (for a trial).",
                                   RUN, rules=[AT_LEAST_1])
    stall_timeout: float = option(
        60.0, "Seconds a download may go without moving 64 KiB before it is retried.", RUN,
        rules=[STALL])
    finalize: bool = option(True, "Index and validate at the end.", RUN,
                            flags=("--finalize/--no-finalize",))
    overwrite: bool = option(False, "Delete what an earlier run wrote in --output-dir first.",
                             RUN)


#: The options in --help's order.
INGEST_OPTIONS = tuple(f.name for f in dataclasses.fields(IngestOptions))
_DECLARED = {f.name: f for f in dataclasses.fields(IngestOptions)}
_HINTS = typing.get_type_hints(IngestOptions)
#: How the options are named in a sentence, where not as their flag.
_SPELLED = {"stall_timeout": "the stall timeout"}
#: Primus's `pipeline` keys -> the options they set.
PIPELINE_KEYS = {"max_workers": "max_workers", "prefetch_depth": "prefetch_depth",
                 "max_files": "max_files", "stall_timeout_s": "stall_timeout"}


def checked(name: str, value: Any, where: str | None = None) -> Any:
    """`value` of the option `name` as its type, checked by its rules; `where` is how a config
    file spells it (in backticks), else the option's flag."""
    value = typed(where or flag(name), value, _HINTS[name], none="null", quote=where is not None)
    check_rules(f"`{where}`" if where else _SPELLED.get(name, flag(name)), value,
                _DECLARED[name])
    return value


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
    max_workers: int = IngestOptions.max_workers
    prefetch_depth: int = IngestOptions.prefetch_depth
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


#: The keys of a `datasets` entry: Primus's, then a local manifest's and local files'.
DATASET_KEYS = ("name", "manifest_url", "split_name", "paths", "manifest", "base_url")


def dataset_from(d: dict[str, Any], n: int,
                 spelled: Callable[[str], str | None] = lambda k: None) -> IngestDataset:
    """The dataset of one `datasets` entry (`DATASET_KEYS` only); `spelled(key)` is how the
    command line spells a key (None: as the config's `datasets[n].key`)."""
    where = f"datasets[{n}]"
    split = checked("split", d.get("split_name", "train"),
                    None if spelled("split") else f"{where}.split_name")
    paths = d.get("paths") or []
    if isinstance(paths, str) or not isinstance(paths, list):
        raise ConfigError(f"{where}.paths must be a list of Arrow files or folders")
    for key in ("manifest_url", "manifest", "base_url"):
        checked(key, d.get(key), None if spelled(key) else f"{where}.{key}")
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


def from_yaml(path: Path) -> tuple[IngestConfig, dict[str, Any]]:
    """The config in a YAML file (Primus's `mlperf_flux1.yaml` keys): its datasets and empty
    encodings, and the options it sets (by option name); ConfigError naming the first wrong
    key."""
    from shardcook.config import config_mapping, read_config_file

    def mapping(value: Any, where: str | None, keys: tuple[str, ...]) -> dict[str, Any]:
        return config_mapping(value, where, keys, path)  # the refusals of every --config

    raw = read_config_file(path)  # the same file rules as every --config
    top = mapping(raw, None, ("datasets", "empty_encodings", "output", "pipeline"))
    cfg = IngestConfig()
    datasets = top.get("datasets") or []
    if not isinstance(datasets, list):
        raise ConfigError(f"{path}: datasets must be a list")
    cfg.datasets = [dataset_from(mapping(entry, f"datasets[{n}]", DATASET_KEYS), n)
                    for n, entry in enumerate(datasets)]
    options: dict[str, Any] = {}
    out = mapping(top.get("output"), "output", ("output_dir",))
    if out.get("output_dir"):
        options["output_dir"] = expand_env(str(out["output_dir"]))
    empty = mapping(top.get("empty_encodings"), "empty_encodings",
                    ("manifest_url", "output_subdir"))
    if empty:
        subdir = str(empty.get("output_subdir", "empty_encodings"))
        check_subdir(subdir)
        if not isinstance(empty.get("manifest_url"), str):
            raise ConfigError("empty_encodings needs manifest_url, the address of its .uri file")
        cfg.empty_encodings = EmptyEncodings(empty["manifest_url"], subdir)
    pipe = mapping(top.get("pipeline"), "pipeline", tuple(PIPELINE_KEYS))
    for key, value in pipe.items():
        if value is not None:
            options[PIPELINE_KEYS[key]] = checked(PIPELINE_KEYS[key], value, f"pipeline.{key}")
    return cfg, options


def check_subdir(subdir: str) -> None:
    """`empty_encodings.output_subdir` is one plain, visible folder name (no `/` at all: `train/`
    is the train split's folder) that no split's folder can have, this command's or a later
    one's into the same folder: split names are lowercase letters only, so it must hold another
    character (`empty_encodings`)."""
    if (not subdir or "/" in subdir or "\\" in subdir or "\x00" in subdir
            or subdir.startswith(".") or SPLIT_NAME.holds(subdir)):
        raise ConfigError(f"empty_encodings.output_subdir {subdir!r} must be one plain folder "
                          "name inside the output folder, not hidden nor a split's: more than "
                          "the lowercase letters a split is named by (empty_encodings, not "
                          "empty)")


def ingest_config(options: IngestOptions, given: set[str], inputs: list[Path],
                  config: Path | None) -> IngestConfig:
    """The run's config: an option given on the command line (`given`) beats the --config
    file's value, which beats the option's default; the inputs come from the command line or
    the config's `datasets`, not both."""
    cfg, from_file = from_yaml(config) if config is not None else (IngestConfig(), {})
    chosen = {name: getattr(options, name) for name in INGEST_OPTIONS}
    chosen.update({k: v for k, v in from_file.items() if k not in given})
    for name in given:
        chosen[name] = checked(name, chosen[name])
    sources = ("manifest_url", "manifest", "base_url")
    if inputs or any(chosen[k] is not None for k in sources[:2]):
        if cfg.datasets:
            raise ConfigError(f"--config {config} lists datasets; give inputs there or on the "
                              "command line, not both")
        cfg.datasets = [dataset_from({
            "split_name": chosen["split"], "paths": [str(p) for p in inputs],
            **{k: chosen[k] for k in sources}}, 0, lambda key: flag(key))]
    cfg.output_dir = chosen["output_dir"]
    cfg.max_workers, cfg.prefetch_depth, cfg.max_files = (
        chosen["max_workers"], chosen["prefetch_depth"], chosen["max_files"])
    cfg.retry = dataclasses.replace(cfg.retry, stall_s=chosen["stall_timeout"])
    cfg.finalize = chosen["finalize"]
    return cfg


def check(cfg: IngestConfig) -> None:
    """Everything a run needs, before any work (the options by their rules too: a config made
    in Python is checked as the command line's)."""
    if cfg.output_dir is None:
        raise ConfigError("give --output-dir (or output.output_dir in --config)")
    if not cfg.datasets:
        raise ConfigError("give Arrow files or folders, --manifest-url, or datasets in --config")
    splits = [d.split for d in cfg.datasets]
    if len(set(splits)) != len(splits):
        raise ConfigError(f"two datasets write the same split ({', '.join(splits)}); give each "
                          "its own split_name")
    for d in cfg.datasets:
        checked("split", d.split)
    if cfg.empty_encodings is not None:
        check_subdir(cfg.empty_encodings.output_subdir)
    for name in ("max_workers", "prefetch_depth", "max_files"):
        checked(name, getattr(cfg, name))
    checked("stall_timeout", cfg.retry.stall_s)
