"""`shardcook ingest` (Primus's `diffusion-ingest`): MLCommons's pre-encoded Arrow files into a
`preencoded_numpy` dataset; the logic is in `shardcook.jobs.ingest.run`."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from shardcook.cli.app import fail
from shardcook.errors import ConfigError, ShardcookError

SRC = "Inputs"
RUN = "Run"


def ingest(
    inputs: Annotated[list[Path] | None, typer.Argument(
        help="Arrow IPC stream files, or folders of *.arrow (kept: never deleted).",
        show_default=False)] = None,
    config: Annotated[Path | None, typer.Option(
        help="YAML with Primus's mlperf_flux1.yaml keys (datasets, empty_encodings, output, "
             "pipeline).", rich_help_panel=SRC)] = None,
    split: Annotated[str, typer.Option(
        help="The split the inputs or manifest become (train, val).",
        rich_help_panel=SRC)] = "train",
    manifest_url: Annotated[str | None, typer.Option(
        help="An MLCommons manifest URL ending in .uri or .md5 (the base URL and the "
             "`MD5 FILENAME` list side by side).", rich_help_panel=SRC)] = None,
    manifest: Annotated[Path | None, typer.Option(
        help="A local file of `MD5 FILENAME` lines; give --base-url.", rich_help_panel=SRC)] = None,
    base_url: Annotated[str | None, typer.Option(
        help="The address --manifest's files are under.", rich_help_panel=SRC)] = None,
    output_dir: Annotated[str | None, typer.Option(
        help="The dataset folder to write (each split in a folder of its own there): a local "
             "path, or msc://PROFILE/path or s3://bucket/path in object storage.",
        rich_help_panel=RUN)] = None,
    max_workers: Annotated[int | None, typer.Option(
        help="Concurrent downloads (default 4).", rich_help_panel=RUN)] = None,
    prefetch_depth: Annotated[int | None, typer.Option(
        help="Most downloaded Arrow files on disk at once (default 6).",
        rich_help_panel=RUN)] = None,
    max_files: Annotated[int | None, typer.Option(
        help="Only the first N files of each split (for a trial).", rich_help_panel=RUN)] = None,
    stall_timeout: Annotated[float | None, typer.Option(
        help="Seconds a download may go without moving 64 KiB before it is retried "
             "(default 60).", rich_help_panel=RUN)] = None,
    finalize: Annotated[bool, typer.Option(
        "--finalize/--no-finalize", help="Index and validate at the end.",
        rich_help_panel=RUN)] = True,
    overwrite: Annotated[bool, typer.Option(
        help="Delete what an earlier run wrote in --output-dir first.",
        rich_help_panel=RUN)] = False,
) -> None:
    """MLPerf Flux.1's pre-encoded Arrow files (local, or downloaded from an MLCommons manifest
    with MD5 checks) into one finalized preencoded_numpy dataset with a folder per split, one
    shard per file, as Primus writes it. Resumable; each downloaded file is deleted once
    converted. Alias: diffusion-ingest."""
    from shardcook.jobs.ingest.config import IngestConfig, dataset_from, from_yaml
    from shardcook.jobs.ingest.run import run_ingest

    try:
        cfg = from_yaml(config) if config is not None else IngestConfig()
        given = bool(inputs) or manifest_url is not None or manifest is not None
        if given and cfg.datasets:
            raise ConfigError(f"--config {config} lists datasets; give inputs there or on the "
                              "command line, not both")
        if given:
            cfg.datasets = [dataset_from({
                "split_name": split, "paths": [str(p) for p in inputs or ()],
                "manifest_url": manifest_url, "base_url": base_url,
                "manifest": str(manifest) if manifest is not None else None}, 0)]
        cfg.output_dir = output_dir or cfg.output_dir
        cfg.max_workers = max_workers if max_workers is not None else cfg.max_workers
        cfg.prefetch_depth = prefetch_depth if prefetch_depth is not None else cfg.prefetch_depth
        cfg.max_files = max_files if max_files is not None else cfg.max_files
        if stall_timeout is not None:
            cfg.retry = replace(cfg.retry, stall_s=stall_timeout)
        cfg.finalize = finalize
        report = run_ingest(cfg, overwrite=overwrite)
    except ShardcookError as e:
        fail(e)
    if not report:  # a torchrun worker other than rank 0
        return
    for split_name, done in report["splits"].items():
        typer.echo(f"{cfg.output_dir}, split {split_name}: {done['samples']:,} samples in "
                   f"{len(done['shards'])} shards")
    typer.echo(f"{report['bytes_converted'] / 1e6:,.1f} MB of Arrow converted in "
               f"{report['wall_seconds']} s")
    for f in report["failed"]:
        typer.echo(f"failed: {f['file']} ({f['stage']}): {f['reason']}", err=True)
    if report["failed"]:
        typer.echo(f"{len(report['failed'])} file(s) failed (see .shardcook/report.json); rerun "
                   "the same command to retry them once they are fixed or reachable", err=True)
        raise typer.Exit(1)
