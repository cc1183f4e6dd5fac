"""Datasets written by shardcook's first ingest, before it ran on the shared engine: its
manifest (`encoding`, `tool`, `inputs`, `shards`, no `format_version`) and its progress markers
(`shard`, `samples`, `shapes` and the input) had a format of their own. Such a dataset is
resumed and extended as the engine's: its inputs are read from the old manifest and each old
marker becomes the record the engine writes for the same file (the same unit numbers: inputs in
split order, as both number them)."""

from __future__ import annotations

from typing import Any

from shardcook.output.folder import OutputFolder
from shardcook.pipeline.plan import WorkUnit
from shardcook.pipeline.report import JsonObject


def is_first_ingests(manifest: JsonObject) -> bool:
    """The manifest is in the first ingest's format."""
    return "format_version" not in manifest and isinstance(manifest.get("inputs"), list)


def recorded_inputs(manifest: JsonObject) -> Any:
    """The inputs an earlier run's manifest records (either format; unchecked)."""
    if is_first_ingests(manifest):
        return manifest["inputs"]
    source = manifest.get("source")
    return source.get("inputs") if isinstance(source, dict) else None


def upgrade_markers(folder: OutputFolder, units: list[WorkUnit],
                    done: dict[int, JsonObject]) -> None:
    """Rewrites those of `done` (the finished `units`' markers) that are in the first ingest's
    format as the engine's records, in `done` and on disk."""
    for unit in units:
        old = done.get(unit.unit)
        if old is None or "written" in old or not isinstance(old.get("samples"), int):
            continue
        done[unit.unit] = {"unit": unit.unit, "start": unit.start, "stop": unit.stop,
                           "shard": old.get("shard"), "inputs": 1, "written": old["samples"],
                           "empty_captions": 0, "skipped": []}
        folder.write_marker(unit.unit, done[unit.unit])
