"""What manifest.json (docs/FORMAT.md §6) and report.json hold, and the end-of-run summary
(`RunFolder` reads and writes them)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shardcook.config import RunConfig, output_affecting
from shardcook.config.sections import _SECTION_CLASSES
from shardcook.errors import ConfigError, DatasetError
from shardcook.output.folder import OutputFolder
from shardcook.pipeline.plan import WorkUnit

FORMAT_VERSION = 1

#: A JSON object as read from or written to manifest.json, report.json and the unit markers.
JsonObject = dict[str, Any]


def new_manifest(cfg: RunConfig, encoding: str, source: JsonObject, num_inputs: int,
                 extra: JsonObject | None = None) -> JsonObject:
    """The manifest written before any work: what is being made (counts filled in at the end)."""
    from shardcook import __version__

    manifest = {
        "format_version": FORMAT_VERSION,
        "shardcook_version": __version__,
        "encoding": encoding,
        "config": cfg.to_dict(),
        "source": source,
        "num_inputs": num_inputs,
        "num_samples": None,
        "num_skipped": None,
        "shards": None,
        "complete": False,
    }
    manifest.update(extra or {})
    return manifest


def _flat(config: JsonObject) -> JsonObject:
    """The options a recorded config (`RunConfig.to_dict()`) is compared on: every section of
    `RunConfig` it records, each option it lacks (one added since) at its default; an optional
    section it does not record (chatml, video) left out."""
    cfg = RunConfig()
    for name, cls in _SECTION_CLASSES.items():
        values = config.get(name)
        if not isinstance(values, dict):
            continue
        section = cls()
        fields = {f.name for f in dataclasses.fields(section)}
        for key, value in values.items():
            if key in fields:
                setattr(section, key, value)
        setattr(cfg, name, section)
    return output_affecting(cfg)


def compare_manifest(old: JsonObject, new: JsonObject) -> list[str]:
    """The differences between an earlier run's manifest and this run's, as `name: old -> new`:
    the encoding, every option of either config's sections (`output_affecting`; the model's
    through the encoder facts a job adds to the manifest), the inputs and either manifest's
    other entries."""
    diffs = []
    if old.get("encoding") != new.get("encoding"):
        diffs.append(f"encoding: {old.get('encoding')} -> {new.get('encoding')}")
    a, b = _flat(old.get("config") or {}), _flat(new["config"])
    for key in dict.fromkeys([*b, *a]):  # an option of a section only one run has, too
        if a.get(key) != b.get(key):
            diffs.append(f"{key}: {a.get(key)!r} -> {b.get(key)!r}")
    if old.get("num_inputs") != new.get("num_inputs"):
        diffs.append(f"number of inputs: {old.get('num_inputs')} -> {new.get('num_inputs')}")
    compared = ("config", "encoding", "num_inputs", "shardcook_version", "format_version",
                *FINISHED)
    for key in dict.fromkeys([*new, *old]):  # a fact only one run records (`compile`), too
        if key not in compared and old.get(key) != new.get(key):
            diffs.append(f"{key}: {old.get(key)!r} -> {new.get(key)!r}")
    return diffs


def check_resume(folder: OutputFolder, manifest: JsonObject,
                 compare: Callable[[JsonObject, JsonObject], list[str]] = compare_manifest,
                 ) -> None:
    """Raises ConfigError if `folder` holds a run made with different options (`compare`: the
    job's differences between the earlier manifest and this one)."""
    try:
        old = folder.read_manifest()
    except DatasetError as e:
        raise ConfigError(f"{e}; rerun with --overwrite to start over.") from None
    if old is None:
        return
    diffs = compare(old, manifest)
    if diffs:
        raise ConfigError(
            f"Output folder {str(folder)!r} holds a run made with different options "
            f"({'; '.join(diffs)}); rerun with the same options to resume, or add --overwrite."
        )


def collect(folder: OutputFolder, units: list[WorkUnit]) -> tuple[list[JsonObject], list[int]]:
    """(records of the finished units, numbers of the units that are not finished)."""
    done = folder.read_markers([unit.unit for unit in units])
    records = [done[unit.unit] for unit in units if unit.unit in done]
    missing = [unit.unit for unit in units if unit.unit not in done]
    return records, missing


def build_report(records: list[JsonObject], *, encoding: str, num_inputs: int, wall_seconds: float,
                 stage_seconds: dict[str, float], world_size: int, units_resumed: int,
                 inputs_this_run: int, finalize_seconds: float | None,
                 scratch_peak_bytes: int | None = None,
                 prepared_peak_bytes: int | None = None) -> JsonObject:
    """report.json: counts, every skip with its reason, shards, timings, for an output in
    object storage the most scratch space one process used at once (`scratch_peak_bytes`), and
    where the processor counts them the most bytes of prepared inputs one process held waiting
    for it (`prepared_peak_bytes`)."""
    skipped = [s for r in records for s in r["skipped"]]
    by_reason = Counter(s["reason"] for s in skipped)
    written = sum(r["written"] for r in records)
    shards = {r["shard"]: r["written"] for r in records if r["shard"] is not None}
    stages = dict(stage_seconds)
    if finalize_seconds is not None:
        stages["finalize"] = finalize_seconds
    media = media_totals(records)
    return {
        "encoding": encoding,
        "num_inputs": num_inputs,
        "num_written": written,
        "num_skipped": sum(1 for s in skipped if s["key"] is not None),
        "num_ignored_files": sum(1 for s in skipped if s["key"] is None),
        "skipped_by_reason": dict(sorted(by_reason.items())),
        "empty_captions": sum(r["empty_captions"] for r in records),
        "num_shards": len(shards),
        "shards": dict(sorted(shards.items())),
        "units": {"total": len(records), "resumed": units_resumed,
                  "this_run": len(records) - units_resumed},
        "world_size": world_size,
        "wall_seconds": round(wall_seconds, 3),
        "inputs_this_run": inputs_this_run,
        "inputs_per_second": round(inputs_this_run / wall_seconds, 2) if wall_seconds > 0 else None,
        "stage_seconds": {k: round(v, 3) for k, v in sorted(stages.items())},
        "skipped": skipped,
        **({"media_totals": media} if media else {}),
        **({"scratch_peak_bytes": scratch_peak_bytes} if scratch_peak_bytes is not None else {}),
        **({"prepared_peak_bytes": prepared_peak_bytes}
           if prepared_peak_bytes is not None else {}),
    }


def media_totals(records: list[JsonObject]) -> dict[str, int]:
    """The units' per-sample media counts summed (empty when no unit recorded any)."""
    totals: Counter[str] = Counter()
    for r in records:
        totals.update(r.get("media_totals", {}))
    return dict(sorted(totals.items()))


#: What a finished run's manifest records of its results (not of what it was asked to make).
FINISHED = ("num_samples", "num_skipped", "shards", "complete", "media_totals")


def finish_manifest(manifest: JsonObject, report: JsonObject) -> JsonObject:
    done = dict(manifest)
    done.update(num_samples=report["num_written"], num_skipped=report["num_skipped"],
                shards=report["shards"], complete=True)
    if "media_totals" in report:
        done["media_totals"] = report["media_totals"]
    return done


def summary_lines(report: JsonObject, out: Path | str) -> list[str]:
    """The human summary printed at the end of a run."""
    lines = [
        f"{report['encoding']} dataset in {out}",
        f"  inputs:  {report['num_inputs']:,}",
        f"  written: {report['num_written']:,} samples in {report['num_shards']:,} shards",
        f"  skipped: {report['num_skipped']:,} inputs"
        + (f", {report['num_ignored_files']:,} extra files ignored"
           if report["num_ignored_files"] else ""),
    ]
    for reason, n in report["skipped_by_reason"].items():
        lines.append(f"    {reason}: {n:,}")
    if report["empty_captions"]:
        lines.append(f"  empty captions (kept): {report['empty_captions']:,}")
    units = report["units"]
    if units["resumed"]:
        lines.append(f"  resumed: {units['resumed']:,} of {units['total']:,} units were "
                     "already done")
    rate = report["inputs_per_second"]
    lines.append(
        f"  time: {report['wall_seconds']:.2f} s"
        + (f", {rate:,.1f} inputs/s" if rate else "")
        + (f" on {report['world_size']} ranks" if report["world_size"] > 1 else "")
    )
    stages = ", ".join(f"{k} {v:.2f} s" for k, v in report["stage_seconds"].items())
    if stages:
        lines.append(f"  stages (summed over threads and ranks): {stages}")
    return lines


def as_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)
