"""What `ingest` reads: each split's Arrow files (local files and folders, or a manifest's
entries), numbered within the split, checked before any work."""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcook.config.ingest import ARROW_SUFFIX, IngestConfig, IngestDataset, Retry, check
from shardcook.errors import ConfigError
from shardcook.files import file_kind
from shardcook.jobs.ingest.download import (
    ManifestEntry,
    fetch_manifest,
    http_url,
    parse_md5_manifest,
)
from shardcook.layouts.names import OURS_DIR, shard_name, split_shard_prefix
from shardcook.output.folder import OutputFolder
from shardcook.storage.urls import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Input:
    """One input file of a split: a user's local file (never deleted) or a URL to download."""

    split: str
    index: int  # within the split: the shard number
    name: str
    local: Path | None = None
    url: str | None = None
    md5: str | None = None
    #: An earlier run recorded `url` with its password hidden: it cannot be downloaded.
    withheld: bool = False

    @property
    def source(self) -> str:
        """Where the file is, as recorded and shown: a URL's password hidden (`redact`)."""
        return str(self.local) if self.local else redact(str(self.url))

    def describe(self) -> dict[str, Any]:
        return {"split": self.split, "file": self.name, "md5": self.md5, "source": self.source}

    @classmethod
    def recorded(cls, entry: dict[str, Any], index: int) -> Input:
        """The input an earlier run recorded (`describe`)."""
        source = str(entry.get("source"))
        remote = source.startswith(("http://", "https://"))
        return cls(str(entry.get("split")), index, str(entry.get("file")),
                   None if remote else Path(source), source if remote else None,
                   entry.get("md5"), withheld=remote and "***@" in source)


def _regular_file(path: Path) -> Path:
    """`path` when it is a regular file (or a link to one), else ConfigError saying what it is."""
    try:
        mode = path.stat().st_mode
    except OSError:
        raise ConfigError(f"input {str(path)!r} does not exist; give Arrow files or "
                          "folders") from None
    if not stat.S_ISREG(mode):
        raise ConfigError(f"input {str(path)!r} is {file_kind(mode)}, not a regular file; give "
                          "Arrow files or folders")
    return path


def _local_files(paths: tuple[Path, ...]) -> list[Path]:
    """The Arrow files given: each file as is, each folder's `*.arrow` in name order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            inside = sorted(_regular_file(p) for p in path.iterdir() if p.suffix == ARROW_SUFFIX)
            if not inside:
                raise ConfigError(f"{str(path)!r} holds no {ARROW_SUFFIX} files")
            found += inside
        else:
            found.append(_regular_file(path))
    return found


def _refuse_duplicates(inputs: list[Input]) -> None:
    """Each local file once: the same file twice would be two shards of the same rows."""
    seen: dict[Path, Path] = {}
    for one in inputs:
        if one.local is None:
            continue
        real = one.local.resolve()
        if real in seen:
            raise ConfigError(f"input {str(one.local)!r} is given twice (also as "
                              f"{str(seen[real])!r}); give each Arrow file once")
        seen[real] = one.local


def this_runs_inputs(cfg: IngestConfig, skipped: list[dict[str, Any]]) -> list[Input]:
    """Every input file of every split this run names, numbered within its split; manifests are
    read here (names checked), and their entries that are not Arrow files are added to
    `skipped`.

    Raises:
        ConfigError: bad options or inputs, or none at all.
    """
    check(cfg)
    inputs: list[Input] = []
    for d in cfg.datasets:
        entries = _entries(d, cfg.retry, skipped)
        if cfg.max_files is not None:
            entries = entries[:cfg.max_files]
        for index, (name, local, url, md5) in enumerate(entries):
            inputs.append(Input(d.split, index, name, local, url, md5))
    _refuse_duplicates(inputs)
    if not inputs:
        raise ConfigError("the inputs list no Arrow files")
    return inputs


def _entries(d: IngestDataset, retry: Retry, skipped: list[dict[str, Any]],
             ) -> list[tuple[str, Path | None, str | None, str | None]]:
    if d.paths:
        return [(p.name, p, None, None) for p in _local_files(d.paths)]
    if d.manifest_url is not None:
        base, listed = fetch_manifest(d.manifest_url, retry)
    else:
        assert d.manifest is not None and d.base_url is not None
        try:
            text = d.manifest.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"cannot read the manifest {str(d.manifest)!r} ({e})") from None
        base = http_url(d.base_url, "base_url").rstrip("/")
        listed = parse_md5_manifest(text, str(d.manifest))
    return [(e.name, None, f"{base}/{e.name}", e.md5)
            for e in _arrow_entries(d.split, base, listed, skipped)]


def _arrow_entries(split: str, base: str, listed: list[ManifestEntry],
                   skipped: list[dict[str, Any]]) -> list[ManifestEntry]:
    """The manifest's Arrow files; the others MLCommons lists beside them (`dataset_info.json`,
    `state.json`) are skipped, as Primus skips them, and recorded."""
    arrow = [e for e in listed if e.name.endswith(ARROW_SUFFIX)]
    for e in listed:
        if not e.name.endswith(ARROW_SUFFIX):
            log.info("%s: not an Arrow file, skipped", e.name)
            skipped.append({"split": split, "file": e.name, "md5": e.md5,
                            "source": redact(f"{base}/{e.name}"), "reason": "not an Arrow file"})
    return arrow


def refuse_inputs_inside(folder: OutputFolder, overwrite: bool, inputs: list[Input],
                         cfg: IngestConfig) -> None:
    """Refuses a local input (or manifest) that lies in what a run into `folder` deletes:
    shardcook's folders, the shards it redoes and, with `overwrite`, everything the earlier run
    wrote (as `plan_overwrite` names it); before anything is deleted."""
    splits = {one.split for one in inputs}
    cleared = [OURS_DIR, *(f"{s}/{OURS_DIR}" for s in splits)]
    for one in inputs:
        shard = f"{one.split}/{shard_name(one.index, split_shard_prefix(one.split))}"
        cleared += [shard, f"{shard}.idx"]
    given = [*(i.local for i in inputs if i.local is not None),
             *(d.manifest for d in cfg.datasets if d.manifest)]
    found = folder.local_file_in(given, cleared, overwrite=overwrite)
    if found is not None:
        path, where = found
        raise ConfigError(f"input {str(path)!r} lies in {str(where)!r}, which ingest "
                          "deletes; move it out of the output folder first")
