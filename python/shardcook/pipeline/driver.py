"""One whole run of a `Job` (`jobs/`: raw, encode, chatml, ingest): setup checks, planning,
this worker's units, report and manifest, finalize. Workers in a process group (torchrun's,
srun's tasks given MASTER_ADDR/PORT) check and set up on rank 0 and gather at the end, rank 0
finalizing; workers without one (srun's tasks, job array tasks: `workers.where`) each check and
join the folder, do their share and read the ledger (`pipeline/ledger.py`): the one that finds
every unit recorded finalizes."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from shardcook.config import RunConfig
from shardcook.config.sections import OutputConfig
from shardcook.errors import (
    ConfigError,
    DatasetError,
    ErrorKind,
    SaidByRankZero,
    ShardcookError,
)
from shardcook.layouts import Layout
from shardcook.layouts.names import MANIFEST_JSON, OURS_DIR, REPORT_HTML
from shardcook.output import overwrite
from shardcook.output.folder import OutputFolder, run_folder
from shardcook.output.lock import Holder
from shardcook.output.records import record_json
from shardcook.pipeline import ledger
from shardcook.pipeline import report as rep
from shardcook.pipeline.plan import WorkUnit, plan_units
from shardcook.pipeline.report import JsonObject
from shardcook.pipeline.run import Processor, RunStats, run_units
from shardcook.runtime.workers import Place, where
from shardcook.sources.base import Source

if TYPE_CHECKING:
    from shardcook.dataset.view import DatasetView

log = logging.getLogger(__name__)


class RunConfigError(SaidByRankZero, ConfigError):
    """The setup error every rank stops with, as a rank other than 0 raises it."""

    kind: ErrorKind = "config"


class RunDatasetError(SaidByRankZero, DatasetError):
    """Rank 0's finishing error, as the other ranks raise it."""

    kind: ErrorKind = "dataset"


class Job(Protocol):
    """What a job gives the engine: its layout, source, units, processor, manifest facts and
    finalize.

    The engine reads where this worker stands once (`workers.where`) and calls, in order:
    `running(place)` around the whole run; `source` and `units` on every rank before any work
    (a ConfigError there stops every rank); `processor` once the output folder is set up, with
    this worker's place and units; `finalize` on rank 0 after every rank is done, with
    --finalize, with the run's dataset view. Each is handed the run's one output folder where
    it needs it; a job opens none of its own.
    """

    #: The dataset's layout: its encoding is recorded in the manifest and report.
    layout: Layout
    #: Inputs per reader batch, and how many batches wait, read and prepared, for the processor.
    batch_size: int
    prefetch: int
    #: The process group's backend (nccl when the processor runs on a GPU).
    backend: str
    #: Facts the manifest records besides the run's config and source (encode: its encoders).
    manifest_extra: JsonObject | None

    def running(self, place: Place) -> AbstractContextManager[object]:
        """What the job sets for the length of the run of the worker at `place` (encode: its
        GPU and torch's thread count)."""
        ...

    def source(self, cfg: RunConfig, folder: OutputFolder) -> Source:
        """The inputs, opened and checked; `folder` is the run's output folder, not yet set up
        (ingest reads an earlier run's inputs from its manifest)."""
        ...

    def units(self, source: Source) -> list[WorkUnit]:
        """The run's work units; ConfigError for a plan finalize would refuse."""
        ...

    def processor(self, cfg: RunConfig, folder: OutputFolder, place: Place,
                  units: list[WorkUnit]) -> Processor[Any]:
        """What turns loaded inputs into sample parts on the worker at `place`, whose share of
        the run is `units`; `folder` is the run's output folder (the job writes through it,
        never a second one)."""
        ...

    def finalize(self, view: DatasetView, report: JsonObject) -> None:
        """Indexes and checks the finished dataset: `view` is the run's output folder as a
        dataset (`dataset.finalize_run` takes it with the job's `layout`)."""
        ...

    def resume_differences(self, old: JsonObject, new: JsonObject) -> list[str]:
        """Why the run whose manifest is `old` cannot be resumed as `new` (none: it can)."""
        ...

    def finish_units(self, folder: OutputFolder, records: list[JsonObject],
                     failed: list[JsonObject]) -> JsonObject:
        """Rank 0, once every rank is done: the job's last work before the report (ingest: the
        empty-caption encodings, written into the run's `folder`), given the finished units'
        records and the units a failed input left unfinished; returns what the job adds to
        report.json."""
        ...


class JobBasics:
    """What most jobs do: read the inputs the config names, resume only the same run, report
    nothing more."""

    def source(self, cfg: RunConfig, folder: OutputFolder) -> Source:
        from shardcook.sources import open_source

        return open_source(cfg)

    def resume_differences(self, old: JsonObject, new: JsonObject) -> list[str]:
        return rep.compare_manifest(old, new)

    def finish_units(self, folder: OutputFolder, records: list[JsonObject],
                     failed: list[JsonObject]) -> JsonObject:
        return {}


def shard_size_given(cfg: RunConfig) -> bool:
    """Whether the user set --shard-size (on the command line or in the config file, or in
    Python a value other than the default), which a run keeps as given."""
    o = cfg.output
    return ("output", "shard_size") in cfg.chosen or o.shard_size != OutputConfig().shard_size


def ratio_units(cfg: RunConfig, source: Source) -> list[WorkUnit]:
    """Consecutive units of --shard-size inputs; with --finalize, --split's ratios are checked
    against them now, not after the work. When --shard-size was not given and its default
    leaves a split with a non-zero ratio no shard, the inputs are split as one input per shard
    would split them, in shards as large as that allows (`splits.fit_shard_size`): the size is
    set in `cfg`, so the manifest records the size used, and a resume picks it again."""
    from shardcook.dataset.index.splits import empty_splits, fit_shard_size, train_need

    o = cfg.output
    given = shard_size_given(cfg)
    if not given:
        o.shard_size = fit_shard_size(len(source), o.shard_size, o.split)
    units = plan_units(len(source), o.shard_size)
    if o.finalize and "train" in empty_splits(len(source), o.shard_size, o.split):
        train = f"{o.split[0] / sum(o.split):.3g}"
        if given:  # an explicit setting is not overridden
            raise ConfigError(
                f"the train split would be empty: {len(units)} shard(s) of --shard-size "
                f"{o.shard_size:,} with train ratio {train} need at least "
                f"{train_need(o.split)} shards; give a lower --shard-size (or none, and "
                "shardcook picks one the split can cut) or raise the train ratio")
        raise ConfigError(
            f"the train split would be empty: {len(source)} input(s) with train ratio {train} "
            f"need at least {train_need(o.split)} inputs, even at one input per shard; add "
            "inputs or raise the train ratio (--split)")
    return units


def fit_line(num_inputs: int, asked: int, used: int, split: list[float]) -> str:
    """What `ratio_units` chose instead of the default --shard-size, and why, in one line."""
    from shardcook.dataset.index.splits import SPLIT_NAMES, empty_splits, inputs_by_split

    empty = empty_splits(num_inputs, asked, split)
    shares = [f"{n:,} {name}" for name, n in
              zip(SPLIT_NAMES, inputs_by_split(num_inputs, used, split), strict=True) if n]
    listed = f"{', '.join(shares[:-1])} and {shares[-1]}" if len(shares) > 1 else shares[0]
    return (f"--split {','.join(f'{r:g}' for r in split)} leaves the {' and '.join(empty)} "
            f"split{'s' if len(empty) > 1 else ''} empty at {asked:,} inputs per shard "
            f"({num_inputs:,} inputs); writing {used:,} input{'s' if used > 1 else ''} per "
            f"shard instead: {-(-num_inputs // used):,} shards, {listed} inputs, as one input "
            "per shard would split them (give --shard-size to choose the size yourself).")


def finalize_by_ratio(cfg: RunConfig, view: DatasetView, layout: Layout) -> None:
    """`finalize` of a job with one shard sequence, cut into splits by --split's ratios; the
    media filter is the run's own, whose rows it recorded."""
    from shardcook.dataset.finalize import finalize_run

    finalize_run(view, layout, split=tuple(cfg.output.split), media=cfg.output.media_filter)


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


def _check_folder(cfg: RunConfig, job: Job, folder: OutputFolder, manifest: JsonObject) -> None:
    """Refuses what the output folder holds (something foreign, a different earlier run or its
    damaged ledger, what --overwrite may not delete), writing nothing."""
    if cfg.output.overwrite:
        folder.plan_overwrite()
    else:
        folder.check_ours()
        rep.check_resume(folder, manifest, job.resume_differences)
        ledger.read_split(folder)


def _setup(cfg: RunConfig, job: Job, folder: OutputFolder, manifest: JsonObject, place: Place,
           units: int) -> ledger.Split:
    """Rank 0: check the output folder, take it for this run, refuse a different earlier run,
    write the manifest; returns the split of the units the run started with."""
    _check_folder(cfg, job, folder, manifest)  # before the lock writes anything there
    folder.lock(Holder.this_run())
    if cfg.output.overwrite:
        overwrite.say_kept(folder, folder.clear())
    else:
        # again: a run that held the folder may have ended
        rep.check_resume(folder, manifest, job.resume_differences)
    folder.check_writable()
    folder.remove_partial_shards()
    folder.write_manifest(manifest)
    return ledger.record_split(folder, place, units)


def _opened(cfg: RunConfig, job: Job, folder: OutputFolder, *, say: bool,
            ) -> tuple[Source, JsonObject, list[WorkUnit]]:
    """The job's source, the run's manifest and its units (ConfigError for bad input); the
    units first, as they may choose the shard size the manifest records, which `say` logs."""
    source = job.source(cfg, folder)
    asked = cfg.output.shard_size
    units = job.units(source)
    if say and cfg.output.shard_size != asked:
        log.info(fit_line(len(source), asked, cfg.output.shard_size, cfg.output.split))
    manifest = rep.new_manifest(cfg, job.layout.encoding, source.describe(), len(source),
                                job.manifest_extra)
    return source, manifest, units


def check_setup(cfg: RunConfig, job: Job) -> None:
    """Every check a run makes before any work, here and without writing (in a bucket, a test
    object is written and deleted): the output folder's place and access, the inputs, the
    units, and what the folder holds. `--nproc-per-node` calls it before it starts workers, so
    bad input is one sentence from one process, not one per worker.

    Raises:
        ConfigError: the first problem found.
    """
    folder = run_folder(cfg.output)
    try:
        with job.running(where()):
            folder.check_access()
            _, manifest, _ = _opened(cfg, job, folder, say=False)  # the workers say it
            _check_folder(cfg, job, folder, manifest)
    finally:
        folder.close()


def run_pipeline(cfg: RunConfig, job: Job) -> JsonObject | None:
    """Runs `job` on this process's rank; returns the report on rank 0.

    Raises:
        ConfigError: bad setup, before any work (on every rank).
        DatasetError: units missing after all ranks finished, or finalize/validate failed.
    """
    place = where()
    with job.running(place):
        return _run(cfg, job, place)


def _run(cfg: RunConfig, job: Job, place: Place) -> JsonObject | None:
    t_start = time.perf_counter()
    if place.launcher == "array" or (place.count > 1 and not place.collective):
        return _run_alone(cfg, job, place, t_start)
    from shardcook.runtime import distributed

    dist = distributed.init(place.index, place.count, job.backend)
    folder: OutputFolder | None = None
    try:
        error: str | None = None
        source = None
        units: list[WorkUnit] = []
        split: ledger.Split | None = None
        try:
            folder = run_folder(cfg.output)
            if dist.is_main:
                folder.check_access()  # a store that refuses us, before any input is read
            source, manifest, units = _opened(cfg, job, folder, say=dist.is_main)
        except ConfigError as e:
            error = str(e)
        errors = dist.gather(error)
        error = next((e for e in errors if e), None)
        if error is None and dist.is_main:
            assert folder is not None  # made before the source
            try:
                split = _setup(cfg, job, folder, manifest, place, len(units))
            except (ConfigError, DatasetError) as e:
                error = str(e)
        error, split = dist.broadcast((error, split))
        if error is not None:
            raise ConfigError(error) if dist.is_main else RunConfigError(error)
        assert source is not None and folder is not None and split is not None
        mine = ledger.units_for(units, place, split)
        processor = job.processor(cfg, folder, place, mine)
        stats = _run_share(cfg, job, folder, source, mine, processor, show=dist.is_main)
        all_stats: list[RunStats] = dist.gather(stats)
        result: JsonObject | None = None
        failure: ShardcookError | None = None
        if dist.is_main:
            try:
                result = _finish(cfg, job, folder, units, manifest, all_stats,
                                 dist.world_size, t_start)
            except ShardcookError as e:
                failure = e
        error = dist.broadcast(None if failure is None else str(failure))
        if failure is not None:
            raise failure
        if error is not None:
            raise RunDatasetError(error)
        return result
    finally:
        if folder is not None:
            folder.close()
        dist.close()


def _run_share(cfg: RunConfig, job: Job, folder: OutputFolder, source: Source,
               mine: list[WorkUnit], processor: Processor[Any], show: bool) -> RunStats:
    """Runs this worker's units, with progress bars on a terminal when `show`."""
    show = show and not cfg.output.quiet and sys.stderr.isatty()
    with progress_bars(show, len(mine), sum(len(u) for u in mine)) as on_progress:
        return run_units(folder, source, mine, processor, batch_size=job.batch_size,
                         prefetch=job.prefetch, on_progress=on_progress,
                         media=cfg.output.media_filter)


def _record_added_inputs(folder: OutputFolder, manifest: JsonObject) -> None:
    """A later command that adds inputs to a run (ingest's next split, which `check_resume`
    let through) records their count before any work, as rank 0's `_setup` does, so the
    ledger's units and the manifest agree for `status` while its workers run. Only then: an
    unchanged count may be the finisher's complete manifest, which this must not undo."""
    old = folder.read_manifest()
    if old is not None and old.get("num_inputs") != manifest.get("num_inputs"):
        folder.write_manifest(manifest)


def _run_alone(cfg: RunConfig, job: Job, place: Place, t_start: float) -> JsonObject | None:
    """A worker without a process group (an array task, srun's tasks): checks and joins the
    folder itself, does its share of the ledger's split, then finalizes when it finds every
    unit recorded and wins the claim; otherwise says, in one line even with --quiet, what is
    left and whose it is. Returns the report when it finalized."""
    if cfg.output.overwrite:
        raise ConfigError(
            f"--overwrite deletes what the other workers write; with {place.describe()} and "
            "its fellows sharing the folder, clear it once in one process (or write elsewhere) "
            "and start the workers without --overwrite.")
    folder = run_folder(cfg.output)
    try:
        folder.check_access()  # a store that refuses us, before any input is read
        source, manifest, units = _opened(cfg, job, folder, say=place.leads)
        _check_folder(cfg, job, folder, manifest)  # before the lock writes anything there
        ledger.check_joins(folder, place)  # an array this split has no share for: the same
        me = Holder.this_run()
        folder.share(me)
        folder.check_writable()
        # the first worker writes it (rewriting it could undo the finisher's complete one);
        # every worker then proves it belongs to that run, whatever its job id: the same options
        folder.create_file(f"{OURS_DIR}/{MANIFEST_JSON}", record_json(manifest))
        rep.check_resume(folder, manifest, job.resume_differences)
        _record_added_inputs(folder, manifest)
        split = ledger.record_split(folder, place, len(units))
        mine = ledger.units_for(units, place, split)
        processor = job.processor(cfg, folder, place, mine)
        stats = _run_share(cfg, job, folder, source, mine, processor, show=True)
        records, missing = rep.collect(folder, units)
        if missing:
            _say(f"{place.describe()} is done; {len(missing)} of {len(units)} units remain, "
                 f"owed to {split.owners(missing)} (`shardcook status {folder}` lists them).")
            return None
        if not ledger.claim_finalize(folder, me, place, split):
            _say(f"{place.describe()} is done; every unit is recorded, and "
                 f"{ledger.claimant(folder, split) or 'another worker'} took the finalizing "
                 f"(`shardcook status {folder}` says when the dataset is complete).")
            return None
        # seen from this worker, the others' units were done before it: resumed
        stats.units_resumed = len(units) - stats.units_written
        return _finish(cfg, job, folder, units, manifest, [stats], place.count, t_start,
                       records)
    finally:
        folder.close()


def _say(line: str) -> None:
    print(f"shardcook: {line}", file=sys.stderr)


def _write_report_html(folder: OutputFolder) -> str:
    """`--report-html`: the finished dataset's page, in `.shardcook/` beside report.json;
    returns where."""
    from shardcook.htmlreport import make_report

    name = f"{OURS_DIR}/{REPORT_HTML}"
    page = make_report(folder.location, scratch_dir=folder.scratch)
    folder.write_file(name, page.encode("utf-8"))
    return f"{folder.location}/{name}"


def _most(values: Iterable[int | None]) -> int | None:
    """The largest of the workers' figures that are not None; None when all are."""
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _finish(cfg: RunConfig, job: Job, folder: OutputFolder, units: list[WorkUnit],
            manifest: JsonObject, all_stats: list[RunStats], world_size: int,
            t_start: float, records: list[JsonObject] | None = None) -> JsonObject:
    """Report, manifest, finalize and summary, once every unit is done; `records` are the
    finished units' records when the caller has just read every one (none missing)."""
    out = folder.location
    failed = [f for s in all_stats for f in s.failed]
    missing: list[int] = []
    if records is None:
        records, missing = rep.collect(folder, units)
    missing = [u for u in missing if u not in {f["unit"] for f in failed}]
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
    extra = job.finish_units(folder, records, failed)

    def report(finalize_seconds: float | None) -> JsonObject:
        return {**rep.build_report(
            records, encoding=job.layout.encoding, num_inputs=manifest["num_inputs"],
            wall_seconds=time.perf_counter() - t_start, stage_seconds=stages,
            world_size=world_size, units_resumed=sum(s.units_resumed for s in all_stats),
            inputs_this_run=inputs_this_run, finalize_seconds=finalize_seconds,
            scratch_peak_bytes=_most(s.scratch_peak_bytes for s in all_stats),
            prepared_peak_bytes=_most(s.prepared_peak_bytes for s in all_stats)),
            **extra}

    folder.check_held()  # no other run took the folder over meanwhile
    folder.remove_partial_shards()  # every rank is done: what the writers left is empty
    result = report(None)
    folder.write_results(rep.finish_manifest(manifest, result), result)
    if cfg.output.finalize and (result["shards"] or not failed):
        if not result["shards"]:
            raise DatasetError(
                f"every input was skipped, so {out} holds no shards to finalize; "
                f"see {folder.report_path} for the reasons."
            )
        from shardcook.dataset.location import dataset_view

        t0 = time.perf_counter()
        with dataset_view(folder.location, scratch_dir=folder.scratch) as view:
            job.finalize(view, result)
        result = report(time.perf_counter() - t0)
        folder.write_results(rep.finish_manifest(manifest, result), result)
    page = _write_report_html(folder) if cfg.output.report_html else None
    if not cfg.output.quiet:
        print("\n".join(rep.summary_lines(result, str(out))), file=sys.stderr)
        if page is not None:
            print(f"  page:    {page}", file=sys.stderr)
    return result
