"""`shardcook ingest` (Primus's `diffusion-ingest`): MLCommons's pre-encoded Arrow files into a
`preencoded_numpy` dataset; its options are the run config's `ingest` section and the `output`
options it takes (`shardcook.config.ingest`), the logic is in `shardcook.jobs.ingest.run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from shardcook.cli.app import fail
from shardcook.cli.launch import start_workers, workers_asked
from shardcook.cli.options import OldSplitOpt, given, take_old_split, with_config_options
from shardcook.config.ingest import INGEST_OPTIONS
from shardcook.config.sections import SOURCE
from shardcook.errors import ShardcookError


@with_config_options(INGEST_OPTIONS)
def ingest(
    ctx: typer.Context,
    inputs: Annotated[list[Path] | None, typer.Argument(
        help="Arrow IPC stream files, or folders of *.arrow (kept: never deleted).",
        show_default=False)] = None,
    config: Annotated[Path | None, typer.Option(
        help="YAML with Primus's mlperf_flux1.yaml keys (datasets, empty_encodings, output, "
             "pipeline); `output` also takes the output options below.",
        rich_help_panel=SOURCE)] = None,
    old_split: OldSplitOpt = None,
    **options: Any,
) -> None:
    """MLPerf Flux.1's pre-encoded Arrow files (local, or downloaded from an MLCommons manifest
    with MD5 checks) into one finalized preencoded_numpy dataset with a folder per split, one
    shard per file, as Primus writes it. Resumable; each downloaded file is deleted once
    converted. Alias: diffusion-ingest."""
    from shardcook.config.ingest import ingest_config
    from shardcook.jobs.ingest.run import ingest_job, run_ingest
    from shardcook.layouts.names import OURS_DIR, REPORT_HTML
    from shardcook.pipeline.driver import check_setup

    chosen = {n for n in options if given(ctx, n)} | ({"split_part"} if old_split else set())
    try:
        take_old_split(ctx, old_split, options)
        run, cfg = ingest_config(options, chosen, list(inputs or ()), config)
        if workers_asked(ctx):  # the whole setup checked here, not once per worker
            check_setup(*ingest_job(cfg, run))
    except ShardcookError as e:
        fail(e)
    start_workers(ctx)
    try:
        report = run_ingest(cfg, run)
    except ShardcookError as e:
        fail(e)
    if not report:  # a torchrun worker other than rank 0
        return
    for split_name, done in report["splits"].items():
        typer.echo(f"{cfg.output_dir}, split {split_name}: {done['samples']:,} samples in "
                   f"{len(done['shards'])} shards")
    typer.echo(f"{report['bytes_converted'] / 1e6:,.1f} MB of Arrow converted in "
               f"{report['wall_seconds']} s")
    if run.output.report_html:
        typer.echo(f"page: {run.output.location}/{OURS_DIR}/{REPORT_HTML}")
    for f in report["failed"]:
        typer.echo(f"failed: {f['file']} ({f['stage']}): {f['reason']}", err=True)
    if report["failed"]:
        typer.echo(f"{len(report['failed'])} file(s) failed (see .shardcook/report.json); rerun "
                   "the same command to retry them once they are fixed or reachable", err=True)
        raise typer.Exit(1)
