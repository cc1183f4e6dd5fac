"""`ingest`'s settings. Its options are the run config's `ingest` section and the `output`
options it takes (`INGEST_OPTIONS`, declared in `config.sections`; `cli/ingest.py` makes the
command line from them); `IngestConfig` is what the job reads (each split's inputs, the empty
encodings, the download settings); `from_yaml` translates Primus's `mlperf_flux1.yaml` keys as
written (`datasets` of `name`/`manifest_url`/`split_name`, `empty_encodings`,
`output.output_dir` with its `${VAR:default}` form, `pipeline.max_workers`/`prefetch_depth`/
`max_files`/`stall_timeout_s`), plus local inputs (`paths`), a manifest file with a `base_url`
and the `output` options of every run (`output.scratch_dir`, ...); `ingest_config` resolves the
command line and that file into both. A value is checked by its field's type and rules wherever
it was given, in the one sentence (`fields.refusal`); the run is checked whole (`check`) before
any work."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcook.config.checks import check_output
from shardcook.config.sections import (
    SPLIT_NAME,
    IngestSourceConfig,
    RunConfig,
    option_field,
    option_key,
)
from shardcook.errors import ConfigError
from shardcook.fields import check_rules, flag, typed

ARROW_SUFFIX = ".arrow"
_ENV_DEFAULT = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")

#: The `output` options `ingest` takes, as every run command does: the keys of --config's
#: `output` mapping too (Primus's has `output_dir`).
OUTPUT_OPTIONS = ("output_dir", "finalize", "report_html", "overwrite", "scratch_dir",
                  "upload_queue")
#: `ingest`'s options in --help's order within each panel: what it reads, where it writes, how
#: it downloads.
INGEST_OPTIONS = ("split_part", "manifest_url", "manifest", "base_url", "max_files",
                  *OUTPUT_OPTIONS, "max_workers", "prefetch_depth", "stall_timeout")


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a download is retried (delay doubles, capped)."""

    attempts: int = 6
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    #: A server that sends nothing for this long, or a transfer slower than 64 KiB per this
    #: long, is given up on and the attempt retried.
    stall_s: float = 60.0


#: Primus's `pipeline` keys -> the options they set.
PIPELINE_KEYS = {"max_workers": "max_workers", "prefetch_depth": "prefetch_depth",
                 "max_files": "max_files", "stall_timeout_s": "stall_timeout"}


def checked(name: str, value: Any, where: str | None = None, *, said: str | None = None
            ) -> Any:
    """`value` of the option `name` as its type, checked by its rules; `where` is how a config
    file spells it (in backticks), else the option's flag (`said`: how a sentence names a
    setting made in Python)."""
    declared, hint = option_field(name)
    value = typed(where or flag(name), value, hint, none="null", quote=where is not None)
    check_rules(f"`{where}`" if where else said or flag(name), value, declared)
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
    max_workers: int = IngestSourceConfig.max_workers
    prefetch_depth: int = IngestSourceConfig.prefetch_depth
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
    split = checked("split_part", d.get("split_name", "train"),
                    None if spelled("split_part") else f"{where}.split_name")
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
    out = mapping(top.get("output"), "output", OUTPUT_OPTIONS)
    for key, value in out.items():
        if key == "output_dir" and value:
            options[key] = expand_env(str(value))
        elif key != "output_dir" and value is not None:
            options[key] = checked(key, value, f"output.{key}")
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


def ingest_config(values: dict[str, Any], given: set[str], inputs: list[Path],
                  config: Path | None) -> tuple[RunConfig, IngestConfig]:
    """The run's config (its `output` and `ingest` sections) and what its job reads, from the
    options by name (`values`): one given on the command line (`given`) beats the --config
    file's value, which beats the option's default; the inputs come from the command line or
    the config's `datasets`, not both. Everything is checked before any work.

    Raises:
        ConfigError: the first option, input or setting that cannot work.
    """
    cfg, from_file = from_yaml(config) if config is not None else (IngestConfig(), {})
    chosen = {name: values[name] for name in INGEST_OPTIONS}
    chosen.update({k: v for k, v in from_file.items() if k not in given})
    for name in given:
        chosen[name] = checked(name, chosen[name])
    sources = ("manifest_url", "manifest", "base_url")
    if inputs or any(chosen[k] is not None for k in sources[:2]):
        if cfg.datasets:
            raise ConfigError(f"--config {config} lists datasets; give inputs there or on the "
                              "command line, not both")
        cfg.datasets = [dataset_from({
            "split_name": chosen["split_part"], "paths": [str(p) for p in inputs],
            **{k: chosen[k] for k in sources}}, 0, lambda key: flag(key))]
    run = RunConfig(ingest=IngestSourceConfig())
    for name, value in chosen.items():
        section, key = option_key(name)
        setattr(getattr(run, section), key, value)
    run.output.quiet = True  # the command says its own summary
    ingest = run.ingest
    assert ingest is not None
    cfg.output_dir, cfg.finalize = run.output.output_dir, run.output.finalize
    cfg.max_workers, cfg.prefetch_depth, cfg.max_files = (
        ingest.max_workers, ingest.prefetch_depth, ingest.max_files)
    cfg.retry = dataclasses.replace(cfg.retry, stall_s=ingest.stall_timeout)
    check(cfg)
    run.output.where("scratch_dir")  # a local folder: refuses a URL
    check_output(run.output)
    return run, cfg


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
        checked("split_part", d.split)
    if cfg.empty_encodings is not None:
        check_subdir(cfg.empty_encodings.output_subdir)
    for name in ("max_workers", "prefetch_depth", "max_files"):
        checked(name, getattr(cfg, name))
    checked("stall_timeout", cfg.retry.stall_s, said="the stall timeout")
