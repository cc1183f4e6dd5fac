"""Proves a dataset whole: metadata present, well-formed and consistent with a fresh Rust scan of
every shard and with index.sqlite, unique keys, splits that exist, the first sample of each split
with its layout's parts and loaded through Energon with its layout's cooker (tensors and pickles
loaded safely); with `deep`, every part of every sample decoded, each `.pth` archive checked
against its CRCs. The rules (required parts, checkers) come from the dataset's layout."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from shardcook.dataset import metadata, undo
from shardcook.dataset.check import legacy, trust
from shardcook.dataset.check import scans as checks
from shardcook.dataset.check.automodelcache import cache_problems
from shardcook.dataset.check.samples import (
    Checker,
    SplitAgreement,
    load_agreement,
    load_checker,
    load_split_checker,
)
from shardcook.dataset.index.build import (
    compile_excludes,
    list_shards,
    lost_shards,
    shard_name_problem,
)
from shardcook.dataset.jsonl import file as jsonl
from shardcook.dataset.kind import AUTOMODEL_CACHE, dataset_kind
from shardcook.dataset.location import cache_view, dataset_view
from shardcook.dataset.summary import (
    NO_SAMPLE_TABLES,
    DatasetSummary,
    jsonl_summary,
    read_metadata,
    summarize,
)
from shardcook.dataset.view import DatasetView
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts import LAYOUTS, Layout
from shardcook.layouts.names import DATASET_YAML, INDEX_UUID, META_DIR, SPLIT_YAML

T = TypeVar("T")


@dataclass
class ValidationReport:
    """`ok` is True when no problem was found; each problem is one sentence. The report is
    truthy exactly when `ok`, so `if not validate(path):` catches every problem."""

    directory: str
    problems: list[str] = field(default_factory=list)
    summary: DatasetSummary | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.ok

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "problems": self.problems,
            "warnings": self.warnings,
            "summary": self.summary.to_dict() if self.summary else None,
        }


def _read(report: ValidationReport, read: Callable[[Path], T], root: Path) -> T | None:
    """`read(root)`, or None with its DatasetError recorded as a problem."""
    try:
        return read(root)
    except DatasetError as e:
        report.problems.append(str(e))
        return None


def _sample_class(report: ValidationReport, root: Path,
                  dataset: metadata.DatasetYaml | None) -> bool:
    """Checks the code dataset.yaml names before Energon would import it: every module on the
    allowlist, no Python file to run, the sample class there. True when Energon may load the
    dataset; a class of a known layout whose package is not installed here (e.g. Megatron-Bridge's
    ChatMLWebdataset) is a warning, anything else unverifiable a problem."""
    if dataset is None:
        return False
    label = f"{META_DIR}/{DATASET_YAML}"
    fix = (f": if you trust it, load it with Energon yourself; else delete {label} and run "
           f"`shardcook finalize --force {root}` to write one for its layout")
    untrusted = trust.code_problems(dataset.content, label, fix)
    if untrusted:
        report.problems += untrusted
        return False
    named = f"{dataset.module}.{dataset.cls}"
    try:
        module = trust.import_installed(dataset.module, root)
    except Exception as e:  # noqa: BLE001 (an installed package may fail in any way on import)
        if f"{dataset.module}:{dataset.cls}" in {lay.sample_type for lay in LAYOUTS.values()}:
            report.warnings.append(
                f"Energon's load check was skipped: the sample class {named} is not importable "
                f"here ({e}); each split's first sample was read with shardcook's reader")
        else:
            report.problems.append(f"{label} names the sample class {named}, which cannot be "
                                   f"imported here ({e})")
        return False
    if not isinstance(getattr(module, dataset.cls, None), type):
        report.problems.append(f"{label} names the sample class {named}, which does not exist")
        return False
    return True


def _excluded(root: Path, record: metadata.FinalizeRecord | None,
              split_yaml: metadata.SplitYaml | None) -> set[str]:
    """The shards left out on purpose, as finalize.json or else split.yaml records them."""
    names = set(split_yaml.exclude) if split_yaml else set()
    if record is not None and record.exclude:
        kept = set(list_shards(root, record.exclude))
        names |= {s for s in list_shards(root) if s not in kept}
    return names


def _run_record_problems(root: Path, counts: dict[str, int], info_name: str,
                         record: metadata.FinalizeRecord | None,
                         split_yaml: metadata.SplitYaml | None) -> list[str]:
    """The shards the run that wrote the folder recorded (its manifest and progress markers)
    against the index: a shard lost since (unless left out on purpose), or one whose count is
    not the run's."""
    recorded = metadata.recorded_shards(root)
    left_out = set(split_yaml.exclude) if split_yaml else set()
    patterns = compile_excludes(record.exclude if record else [])
    lost = [s for s in lost_shards(root, list(counts))
            if s not in left_out and not any(p.search(s) for p in patterns)]
    fix = (f"rerun the command that wrote {root} (it writes only what is missing), or leave the "
           "shard out with `shardcook finalize --force --exclude`")
    problems = [f"shard {s} is missing, though the run that wrote {root} recorded it"
                + (f" ({recorded[s]} samples)" if recorded[s] is not None else "") + f"; {fix}"
                for s in lost]
    problems += [f"shard {s} holds {n} samples by {info_name}, but the run that wrote it recorded "
                 f"{recorded[s]}, so it is not that run's shard; {fix}"
                 for s, n in counts.items() if recorded.get(s) not in (None, n)]
    return problems


def _layout(report: ValidationReport, layout: Layout | None,
            dataset: metadata.DatasetYaml | None, manifest: dict[str, Any] | None,
            ) -> Layout | None:
    """The layout whose rules apply: `layout` as given, else what dataset.yaml or the manifest
    say (unknown: a problem)."""
    if layout is not None:
        return layout
    source, encoding = f"{META_DIR}/{DATASET_YAML}", dataset.encoding if dataset else None
    if encoding is None and manifest is not None:
        source, encoding = "the manifest", manifest.get("encoding")
    if encoding is None:
        return None
    try:
        return metadata.layout_of(encoding, source)
    except ValueError as e:
        report.problems.append(str(e))
        return None


def validate(
    directory: str | Path, *, encoding: str | None = None, deep: bool = False,
    scratch_dir: str | Path | None = None,
) -> ValidationReport:
    """Checks a finalized dataset and summarizes it.

    Args:
        directory: The dataset folder, or its URL (`msc://PROFILE/path`, `s3://bucket/path`):
            then the shards are checked against their `.tar.idx` files and sizes without being
            downloaded, except each split's first sample; `deep` downloads every shard once, a
            few at a time, into a folder under `scratch_dir` (default: the temporary folder).
            A `.jsonl` file or URL is a JSONL dataset: its index is checked against a fresh
            scan of the file, and its first record (`deep`: every record) parsed as JSON. A
            folder holding metadata.json is a NeMo AutoModel cache
            (`check.automodelcache.cache_problems`: `deep` loads every file, else the first
            of each bucket).
        encoding: A layout's encoding (default: what dataset.yaml or the manifest say); decides
            which parts every sample must have and how samples are checked.
        deep: Read and decode every sample, not only the first of each split.

    Returns:
        A report; `report.ok` is False when any problem was found.

    Raises:
        ConfigError: `encoding` names no known layout, or the URL cannot be opened.
    """
    what = dataset_kind(directory)  # bad usage, like a bad encoding
    location = what.location
    if what.records is not None:
        if encoding is not None:
            raise ConfigError(f"{what.records} is a JSONL dataset, whose records are crude JSON "
                              "samples of no layout, so --encoding does not apply; leave it out.")
        return _validate_jsonl(what.records, deep)
    if what.kind == AUTOMODEL_CACHE:
        if encoding is not None:
            raise ConfigError(f"{location} is a NeMo AutoModel cache, whose metadata.json names "
                              "its model_type, so --encoding does not apply; leave it out.")
        try:
            with cache_view(location, scratch_dir) as cache:
                problems = cache_problems(cache.root, deep, cache.fetched)
                return ValidationReport(str(directory), [cache.shown(p) for p in problems])
        except DatasetError as e:
            return ValidationReport(str(directory), [str(e)])
    # bad usage: raise before reading anything
    layout = metadata.layout_of(encoding, "--encoding") if encoding is not None else None
    try:
        with dataset_view(location, scratch_dir=scratch_dir) as view:
            report = validate_view(view, layout=layout, deep=deep)
            report.problems += _interrupted_finalize(view.root)
    except DatasetError as e:
        return ValidationReport(str(directory), [str(e)])
    return report


def _validate_jsonl(dataset: jsonl.JsonlFile, deep: bool) -> ValidationReport:
    """A JSONL dataset: its index against a fresh scan of the file, the first record (`deep`:
    every record) parsed as Energon's loader parses it, then that record loaded through
    Energon."""
    report = ValidationReport(str(dataset))
    report.problems, offsets = jsonl.index_problems(dataset)
    if offsets is None:
        return report
    report.summary = jsonl_summary(dataset)
    report.problems += jsonl.record_problems(dataset, offsets, every=deep)
    if not report.problems:
        at = dataset.location
        report.problems += checks.energon_load_problems(
            at.given, {"train": [dataset.name]}, None)
    return report


def _interrupted_finalize(root: Path) -> list[str]:
    """A finalize's undo folder that is still there: that finalize was killed (or is running),
    and the metadata may be half old, half new. (finalize validates inside its own undo block,
    so only `validate` asks.)"""
    return [f"{aside} was left by a finalize that was interrupted (or is still running), so the "
            f"metadata may be half written; run that finalize again (`shardcook finalize --force "
            f"{root}` with its options), which first puts the old metadata back"
            for aside in undo.interrupted(root)]


def validate_view(view: DatasetView, *, layout: Layout | None = None, deep: bool = False,
                  energon_check: bool = True, dataset_yaml: bool = True) -> ValidationReport:
    """`validate` on a dataset's view, by the rules of `layout` (default: the one its
    dataset.yaml or manifest names); the report names the dataset as the user gave it.
    Without `energon_check`, each split's first sample gets `--deep`'s checks of every part
    (tensors read without torch, images decoded) instead of being loaded through Energon, which
    imports torch and Energon. Without `dataset_yaml`, a missing dataset.yaml is no problem (the
    index alone is checked: finalize was told not to write one)."""
    report = _validate(view, layout, deep, energon_check, dataset_yaml)
    report.directory = view.name
    report.problems = [view.shown(p) for p in report.problems]
    report.warnings = [view.shown(w) for w in report.warnings]
    return report


def _validate(view: DatasetView, layout: Layout | None, deep: bool, energon_check: bool,
              dataset_yaml: bool = True) -> ValidationReport:
    root = view.root
    report = ValidationReport(str(root))
    problems = report.problems
    try:
        counts, splits, dataset = read_metadata(root)
    except DatasetError as e:
        problems.append(str(e))
        return report
    split_yaml = metadata.read_split_yaml(root)
    manifest = _read(report, metadata.read_manifest, root)
    record = _read(report, metadata.read_finalize_record, root)
    _read(report, metadata.read_index_uuid, root)
    # Not finalized by shardcook: `energon prepare` indexed it, maybe an older one (legacy.py)
    by_energon = record is None
    fix = f"; run `shardcook finalize --force {root}`"
    for name, present in ((DATASET_YAML, dataset), (SPLIT_YAML, split_yaml),
                          (INDEX_UUID, (root / META_DIR / INDEX_UUID).is_file() or None)):
        if present is None and not (by_energon and name == INDEX_UUID) and (
                dataset_yaml or name != DATASET_YAML):
            problems.append(f"{META_DIR}/{name} is missing{fix}")
    older = legacy.older_energon_warning(root) if by_energon else None
    if older:
        report.warnings.append(older)
    layout = _layout(report, layout, dataset, manifest)
    info_name = metadata.info_file(root)
    refused = checks.factory_arguments_problem(root, dataset) if dataset else None
    problems += [refused] if refused else []
    energon = energon_check and not refused and _sample_class(report, root, dataset)

    excluded = _excluded(root, record, split_yaml)
    present_shards = set(list_shards(root)) - excluded
    listed = [s for s in counts if os.path.isfile(os.path.join(root, s))]
    files = set(listed)
    problems += [(shard_name_problem(root, s) if os.path.lexists(root / s) else None)
                 or f"shard {s} is listed in {info_name} but missing"
                 for s in counts if s not in files]
    problems += [shard_name_problem(root, s) or f"shard {s} is not listed in {info_name}; run "
                 f"`shardcook finalize --force {root}` to index it"
                 for s in sorted(present_shards - set(counts))]
    problems += _run_record_problems(root, counts, info_name, record, split_yaml)
    problems += view.verify_shards([(s, counts[s]) for s in listed])
    problems += checks.info_files_problems(root)
    problems += view.verify_index(counts, record.sqlite if record else False, by_energon)
    seen: dict[str, str] = {}
    for split, shards in splits.items():
        unknown = [s for s in shards if s not in counts]
        if unknown:
            problems.append(
                f"split {split} names {len(unknown)} shard(s) not in {info_name}, e.g. "
                f"{unknown[0]}"
            )
        for shard in shards:
            if shard in seen and seen[shard] != split:
                report.warnings.append(f"shard {shard} is in both the {seen[shard]} and the "
                                       f"{split} split; its samples are read by both")
            seen.setdefault(shard, split)

    report.summary = summarize(view, counts, splits, dataset)
    # an index.sqlite that is no database is a problem already (sqlite_problems), not this
    if not report.summary.sample_tables and older is None and not report.summary.index_problem:
        report.warnings.append(f"{NO_SAMPLE_TABLES}; validate checked the shards against their "
                               f".tar.idx files and {info_name}, but has no sample rows to check")
    if not problems:
        # Only a structurally sound dataset is worth handing to Energon.
        _check_samples(report, view, splits, listed, layout, dataset, manifest or {}, deep,
                       energon, thorough_first=not energon_check)
    return report


def _check_samples(report: ValidationReport, view: DatasetView, splits: dict[str, list[str]],
                   listed: list[str], layout: Layout | None,
                   dataset: metadata.DatasetYaml | None, manifest: dict[str, Any],
                   deep: bool, energon: bool, *, thorough_first: bool = False) -> None:
    root = view.root
    checker = load_checker(layout)
    field_map = dataset.field_map if dataset else {}
    with view.fetched([shards[0] for shards in splits.values() if shards], first_sample=True):
        # with `deep` every sample gets the checker below; do not report the first ones twice
        report.problems += checks.first_sample_problems(root, splits, layout, field_map,
                                                        manifest, None if deep else checker,
                                                        deep=thorough_first and not deep)
        if energon:
            report.problems += checks.energon_load_problems(root, splits, layout)
    if deep:
        _check_every_sample(report, view, splits, listed, layout, manifest, checker)


def _check_every_sample(report: ValidationReport, view: DatasetView,
                        splits: dict[str, list[str]], listed: list[str], layout: Layout | None,
                        manifest: dict[str, Any], checker: Checker | None) -> None:
    """`--deep`: every shard read once, a window at a time: scanned against its `.tar.idx`,
    every sample checked, also against its split's first (`SplitAgreement`), the layout's split
    checks, parts held twice."""
    root = view.root
    split_checker = load_split_checker(layout)
    facts = load_agreement(layout)
    agreement = SplitAgreement(facts, splits) if facts is not None else None
    # else sqlite_problems looked, in the sample_parts table
    repeated = legacy.PARTS_TABLE not in (legacy.sqlite_tables(root) or set())
    counts = dict.fromkeys(listed)
    for window in view.windows(listed):
        report.problems += view.verify_shards([(s, counts[s]) for s in window])
        report.problems += checks.deep_problems(root, window, layout, manifest, checker,
                                                agreement)
        if split_checker is not None:
            for split, shards in splits.items():
                report.problems += split_checker(root, split, [s for s in shards if s in window])
        if repeated:
            report.problems += checks.repeated_part_problems(root, window)
    if agreement is not None:
        report.problems += agreement.rest()

