"""`shardcook ingest`: MLCommons's pre-encoded Arrow files (local, or downloaded from a manifest)
into one `preencoded_numpy` dataset, one shard per file, laid out as Primus's `data
diffusion-ingest` writes it: `OUTPUT_DIR/SPLIT/` holds each split's shards and the dataset at
`OUTPUT_DIR` names them by the split parts `SPLIT: SPLIT/.*`. The work is the shared engine's
(`pipeline/driver.py`) running `IngestJob` (`job.py`): resume, torchrun, a bucket as the output
folder, the report."""

from __future__ import annotations

from shardcook.config import RunConfig
from shardcook.config.ingest import IngestConfig
from shardcook.errors import ConfigError
from shardcook.jobs.ingest.job import IngestJob
from shardcook.pipeline.report import JsonObject


def run_config(cfg: IngestConfig, *, overwrite: bool = False, quiet: bool = True,
               scratch_dir: str | None = None, upload_queue: int = 4) -> RunConfig:
    """The engine's config of an ingest run (where and how its shards are written)."""
    if cfg.output_dir is None:
        raise ConfigError("give --output-dir (or output.output_dir in --config)")
    run = RunConfig()
    out = run.output
    out.output_dir, out.finalize, out.overwrite, out.quiet = (
        str(cfg.output_dir), cfg.finalize, overwrite, quiet)
    out.scratch_dir, out.upload_queue = scratch_dir, upload_queue
    return run


def run_ingest(cfg: IngestConfig, *, overwrite: bool = False, quiet: bool = True,
               scratch_dir: str | None = None, upload_queue: int = 4) -> JsonObject:
    """The whole ingest into the one dataset `OUTPUT_DIR` (its manifest, progress markers and
    report.json in `OUTPUT_DIR/.shardcook/`), on this process's rank; returns the report on
    rank 0 (an empty one elsewhere).

    Raises:
        ConfigError: bad options, unreadable manifest, unsafe names, an input the run would
            delete, a foreign output folder, before any shard is written.
        DatasetError: finalize found the result invalid.
    """
    from shardcook.pipeline.driver import run_pipeline

    report = run_pipeline(*ingest_job(cfg, overwrite=overwrite, quiet=quiet,
                                      scratch_dir=scratch_dir, upload_queue=upload_queue))
    return report if report is not None else {}


def ingest_job(cfg: IngestConfig, *, overwrite: bool = False, quiet: bool = True,
               scratch_dir: str | None = None, upload_queue: int = 4,
               ) -> tuple[RunConfig, IngestJob]:
    """The engine's config of the run and its job."""
    run = run_config(cfg, overwrite=overwrite, quiet=quiet, scratch_dir=scratch_dir,
                     upload_queue=upload_queue)
    return run, IngestJob(run, cfg)
