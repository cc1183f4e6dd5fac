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


def run_config(cfg: IngestConfig) -> RunConfig:
    """The engine's config of an ingest run made from an `IngestConfig` alone (in Python): its
    output folder and --finalize, every other output option at its default, quiet. The command
    line's is `config.ingest.ingest_config`'s."""
    if cfg.output_dir is None:
        raise ConfigError("give --output-dir (or output.output_dir in --config)")
    run = RunConfig()
    run.output.output_dir, run.output.finalize, run.output.quiet = (
        str(cfg.output_dir), cfg.finalize, True)
    return run


def run_ingest(cfg: IngestConfig, run: RunConfig | None = None) -> JsonObject:
    """The whole ingest into the one dataset `OUTPUT_DIR` (its manifest, progress markers and
    report.json in `OUTPUT_DIR/.shardcook/`), on this process's rank; returns the report on
    rank 0 (an empty one elsewhere). `run` is the engine's config (where and how the shards are
    written; default: `run_config(cfg)`).

    Raises:
        ConfigError: bad options, unreadable manifest, unsafe names, an input the run would
            delete, a foreign output folder, before any shard is written.
        DatasetError: finalize found the result invalid.
    """
    from shardcook.pipeline.driver import run_pipeline

    report = run_pipeline(*ingest_job(cfg, run))
    return report if report is not None else {}


def ingest_job(cfg: IngestConfig, run: RunConfig | None = None) -> tuple[RunConfig, IngestJob]:
    """The engine's config of the run (`run`, default `run_config(cfg)`) and its job."""
    run = run if run is not None else run_config(cfg)
    return run, IngestJob(run, cfg)
