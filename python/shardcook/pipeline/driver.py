"""One whole run, shared by `raw` and `encode`: setup checks, planning, this rank's units,
gathering, report and manifest, finalize (rank 0)."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from shardcook.config import RunConfig
from shardcook.errors import ConfigError, DatasetError, ShardcookError
from shardcook.pipeline import report as rep
from shardcook.pipeline.folders import OutputFolder, run_folder
from shardcook.pipeline.plan import WorkUnit, plan_units, units_for_rank
from shardcook.pipeline.report import JsonObject
from shardcook.pipeline.run import Processor, RunStats, run_units
from shardcook.sources.base import Source

log = logging.getLogger(__name__)


@contextmanager
def progress_bars(enabled: bool, units: int, samples: int) -> Iterator[Callable[[str, int], None]]:
    """Yields an `on_progress(kind, n)` callback driving rich bars (a no-op when disabled)."""
    if not enabled:
        yield lambda kind, n: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        Task,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Rate(TextColumn):
        def render(self, task: Task) -> Text:  # images/s for the samples bar
            speed = task.finished_speed or task.speed
            return super().render(task) if speed is None else Text(f"{speed:,.1f}/s")

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  Rate(""), TimeElapsedColumn(), TimeRemainingColumn(),
                  transient=False) as bar:
        tasks = {"unit": bar.add_task("units", total=units),
                 "samples": bar.add_task("inputs", total=samples)}
        yield lambda kind, n: bar.advance(tasks[kind], n)


def _setup(cfg: RunConfig, folder: OutputFolder, manifest: JsonObject) -> None:
    """Rank 0: check the output folder, refuse a different earlier run, write the manifest."""
    if cfg.output.overwrite:
        kept = folder.clear()
        if kept:
            log.warning("--overwrite kept %d file(s) shardcook did not write in %s: %s",
                        len(kept), folder,
                        ", ".join(kept[:5]) + (", ..." if len(kept) > 5 else ""))
        folder.check_writable()
    else:
        folder.check()
        rep.check_resume(folder, manifest)
    folder.remove_partial_shards()
    folder.write_manifest(manifest)


def run_pipeline(
    cfg: RunConfig,
    *,
    encoding: str,
    make_processor: Callable[[RunConfig], Processor],
    batch_size: int = 32,
    prefetch: int = 2,
    manifest_extra: JsonObject | None = None,
    backend: str = "gloo",
    make_source: Callable[[RunConfig], Source] | None = None,
    make_units: Callable[[Source], list[WorkUnit]] | None = None,
    finish: Callable[[Path | str, JsonObject], None] | None = None,
) -> JsonObject | None:
    """Runs the whole pipeline on this process's rank; returns the report on rank 0.

    `make_source`, `make_units` and `finish` replace the defaults (`open_source`, consecutive
    units of `shard_size`, `finalize` by --split ratios) for pipelines with their own input kinds,
    shard names and metadata (`chatml`); `finish(out, report)` runs on rank 0 after the report,
    `out` the folder's location (a path, or a URL for object storage).
    `prefetch` batches wait, read and prepared, for the processor.

    Raises:
        ConfigError: bad setup, before any work (on every rank).
        DatasetError: units missing after all ranks finished, or finalize/validate failed.
    """
    from shardcook import distributed
    from shardcook.sources import open_source

    t_start = time.perf_counter()
    dist = distributed.init(backend)
    folder: OutputFolder | None = None
    try:
        error: str | None = None
        source = None
        try:
            folder = run_folder(cfg.output)
            if dist.is_main:
                folder.check_access()  # a store that refuses us, before any input is read
            source = (make_source or open_source)(cfg)
            manifest = rep.new_manifest(cfg, encoding, source.describe(), len(source),
                                        manifest_extra)
            # a split finalize would refuse fails now, not after the work
            if cfg.output.finalize and finish is None:
                from shardcook.dataset.splits import split_by_ratio

                planned = plan_units(len(source), cfg.output.shard_size)
                split_by_ratio([u.name for u in planned], cfg.output.split)
        except ConfigError as e:
            error = str(e)
        errors = dist.gather(error)
        error = next((e for e in errors if e), None)
        if error is None and dist.is_main:
            assert folder is not None  # made before the source
            try:
                _setup(cfg, folder, manifest)
            except ConfigError as e:
                error = str(e)
        error = dist.broadcast(error)
        if error is not None:
            raise ConfigError(error)
        assert source is not None and folder is not None
        processor = make_processor(cfg)

        units = (make_units(source) if make_units is not None
                 else plan_units(len(source), cfg.output.shard_size))
        mine = units_for_rank(units, dist.rank, dist.world_size)
        show = dist.is_main and not cfg.output.quiet and sys.stderr.isatty()
        with progress_bars(show, len(mine), sum(len(u) for u in mine)) as on_progress:
            stats = run_units(folder, source, mine, processor, batch_size=batch_size,
                              prefetch=prefetch, on_progress=on_progress)
        all_stats: list[RunStats] = dist.gather(stats)
        result: JsonObject | None = None
        failure: ShardcookError | None = None
        if dist.is_main:
            try:
                result = _finish(cfg, folder, units, manifest, all_stats, dist.world_size,
                                 encoding, t_start, finish)
            except ShardcookError as e:
                failure = e
        error = dist.broadcast(None if failure is None else str(failure))
        if failure is not None:
            raise failure
        if error is not None:
            raise DatasetError(error)
        return result
    finally:
        if folder is not None:
            folder.close()
        dist.close()


def _finish(cfg: RunConfig, folder: OutputFolder, units: list[WorkUnit], manifest: JsonObject,
            all_stats: list[RunStats], world_size: int, encoding: str, t_start: float,
            finish: Callable[[Path | str, JsonObject], None] | None = None) -> JsonObject:
    out = folder.location
    records, missing = rep.collect(folder, units)
    if missing:
        raise DatasetError(
            f"{len(missing)} work unit(s) are not finished (e.g. unit {missing[0]}); "
            "rerun the same command to complete them."
        )
    stages: dict[str, float] = {}
    for s in all_stats:
        for k, v in s.stage_seconds.items():
            stages[k] = stages.get(k, 0.0) + v
    inputs_this_run = sum(s.inputs for s in all_stats)
    scratch = [s.scratch_peak_bytes for s in all_stats if s.scratch_peak_bytes is not None]

    def report(finalize_seconds: float | None) -> JsonObject:
        return rep.build_report(
            records, encoding=encoding, num_inputs=manifest["num_inputs"],
            wall_seconds=time.perf_counter() - t_start, stage_seconds=stages,
            world_size=world_size, units_resumed=sum(s.units_resumed for s in all_stats),
            inputs_this_run=inputs_this_run, finalize_seconds=finalize_seconds,
            scratch_peak_bytes=max(scratch) if scratch else None)

    result = report(None)
    folder.write_results(rep.finish_manifest(manifest, result), result)
    if cfg.output.finalize:
        if not result["shards"]:
            raise DatasetError(
                f"every input was skipped, so {out} holds no shards to finalize; "
                f"see {folder.report_path} for the reasons."
            )
        t0 = time.perf_counter()
        if finish is not None:
            finish(out, result)
        else:
            from shardcook.dataset import finalize

            finalize(out, encoding=encoding, split=tuple(cfg.output.split), force=True)
        result = report(time.perf_counter() - t0)
        folder.write_results(rep.finish_manifest(manifest, result), result)
    if not cfg.output.quiet:
        print("\n".join(rep.summary_lines(result, out)), file=sys.stderr)
    return result
