"""The commands on a dataset folder that exists, or its URL in object storage: finalize, validate,
info, preview, report, and blend (several datasets into one Energon metadataset)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from shardcook.cli.app import fail
from shardcook.cli.options import (
    DatasetArg,
    OldSplitOpt,
    declared_in,
    take_old_split,
    with_config_options,
)
from shardcook.config.sections import option_field
from shardcook.dataset.arguments import BlendOptions, DatasetOptions, ReportOptions
from shardcook.errors import ConfigError, ShardcookError
from shardcook.fields import check_rules

# The options of each command, declared in `dataset.arguments`.
MEDIA_OPTIONS = ("media_metadata_by_extension", "media_metadata_by_glob",
                 "media_metadata_by_header")
DATASET = declared_in(DatasetOptions)
FINALIZE_OPTIONS = ("encoding", "split", "split_parts", "shuffle_seed", "shuffle_tars", "exclude",
                    "sample_type", "field_map", "dataset_yaml_name", "skip_dataset_yaml", "force",
                    "sqlite", "sample_tables", "tar_index_only", "fix_duplicates", "validate",
                    "scratch_dir", *MEDIA_OPTIONS)
#: The seed of `energon prepare --shuffle-tars`.
SHUFFLE_TARS_SEED = 42


@with_config_options(FINALIZE_OPTIONS, lookup=DATASET)
def finalize(directory: DatasetArg, **options: Any) -> None:
    """Write Energon's metadata (index, splits, dataset.yaml) for a folder of shards, then
    validate it."""
    from shardcook.dataset import finalize as run
    from shardcook.dataset.index.splits import parse_split_parts
    from shardcook.dataset.sampletype import parse_field_map

    split_parts, field_map = options.pop("split_parts"), options.pop("field_map")
    if options.pop("shuffle_tars"):
        if options["shuffle_seed"] not in (None, SHUFFLE_TARS_SEED):
            fail(ConfigError(f"--shuffle-tars is --shuffle-seed {SHUFFLE_TARS_SEED}, so it cannot "
                             f"be given with --shuffle-seed {options['shuffle_seed']}; give one "
                             "of them"))
        options["shuffle_seed"] = SHUFFLE_TARS_SEED
    try:
        result = run(
            directory,
            split_parts=parse_split_parts(split_parts) if split_parts else None,
            field_map=parse_field_map(field_map) if field_map is not None else None,
            **options,
        )
    except ShardcookError as e:
        fail(e)
    index = result.index
    seconds = index.seconds
    where = f"of {directory}" if result.jsonl else f"in {len(index.shard_counts):,} shards"
    typer.echo(
        f"indexed {index.num_samples:,} samples {where} "
        f"in {seconds:.2f} s ({index.num_samples / max(seconds, 1e-9):,.0f} samples/s)"
    )
    for name, shards in index.splits.items():
        samples = sum(index.shard_counts[s] for s in shards)
        typer.echo(f"  {name}: {len(shards)} shards, {samples:,} samples")
    if index.media_entries is not None:
        typer.echo(f"  media metadata: {index.media_entries:,} files")
    if options["skip_dataset_yaml"]:
        typer.echo("dataset config: left as it was (--skip-dataset-yaml)")
    if result.validation is not None:
        typer.echo("validated: ok")


@with_config_options(("encoding", "deep", "as_json", "scratch_dir"), lookup=DATASET)
def validate(directory: DatasetArg, **options: Any) -> None:
    """Check that a dataset is whole; exit 0 when it is, 1 otherwise."""
    from shardcook.dataset import validate as run

    try:
        as_json = options.pop("as_json")
        report = run(directory, **options)
    except ShardcookError as e:
        fail(e)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for problem in report.problems:
            typer.echo(f"problem: {problem}")
        for warning in report.warnings:
            typer.echo(f"warning: {warning}")
        if report.summary:
            typer.echo("\n".join(report.summary.lines()))
        typer.echo("ok: the dataset is whole" if report.ok
                   else f"{len(report.problems)} problem(s)")
    raise typer.Exit(0 if report.ok else 1)


@with_config_options(("as_json", "scratch_dir"), lookup=DATASET)
def info(directory: DatasetArg, **options: Any) -> None:
    """Show what a dataset holds (no checks; fast)."""
    from shardcook.dataset import info as run

    try:
        summary = run(directory, scratch_dir=options["scratch_dir"])
    except ShardcookError as e:
        fail(e)
    as_json = options["as_json"]
    typer.echo(json.dumps(summary.to_dict(), indent=2) if as_json else "\n".join(summary.lines()))


def _check_preview_out(out: Path | None) -> None:
    """Raises ConfigError for an --out that is not a .png in an existing folder."""
    from shardcook.errors import ConfigError
    from shardcook.storage.local import check_local_path

    if out is None:
        return
    check_local_path(out, "--out")
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--out {str(out)!r} must name a .png file.")
    if out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a folder; name the .png file to write.")
    if not out.parent.is_dir():
        raise ConfigError(f"--out {str(out)!r}: the folder {str(out.parent)!r} does not exist.")


@with_config_options(("out", "count", "model_path", "hf_token_file", "scratch_dir"),
                     lookup=lambda name: option_field(name) if name == "hf_token_file"
                     else DATASET(name))
def preview(directory: DatasetArg, **options: Any) -> None:
    """A contact sheet PNG of the first samples with their captions (raw: the images; encoded:
    latents decoded by --model-path's VAE, else channels 0-2 as false colour)."""
    from shardcook.preview import preview as run

    try:
        check_rules("--count", options["count"], DATASET("count")[0])
        out = options.pop("out")
        _check_preview_out(out)
        path = run(directory, out, **options)
    except ShardcookError as e:
        fail(e)
    typer.echo(f"wrote {path}")


@with_config_options(("out", "samples", "split_part", "scratch_dir"),
                     lookup=declared_in(ReportOptions))
def report(ctx: typer.Context, directory: DatasetArg, old_split: OldSplitOpt = None,
           **options: Any) -> None:
    """One self-contained HTML page of a dataset or a NeMo AutoModel cache: its facts, validate's
    verdict, skipped inputs, duplicates, latent statistics, plots and a grid of samples; no
    network needed to view it. Written into the dataset as .shardcook/report.html (as a run's
    --report-html), or to --out."""
    from shardcook.htmlreport import write_report

    try:
        take_old_split(ctx, old_split, options)
        path = write_report(directory, options.pop("out"), samples=options["samples"],
                            split=options["split_part"], scratch_dir=options["scratch_dir"])
    except ShardcookError as e:
        fail(e)
    typer.echo(f"wrote {path}")


@with_config_options(("split_part", "force", "aux"), lookup=declared_in(BlendOptions))
def blend(
    ctx: typer.Context,
    out: Annotated[Path, typer.Argument(help="The metadataset .yaml to write.",
                                        show_default=False)],
    datasets: Annotated[list[str], typer.Argument(
        help="PATH=WEIGHT per dataset (weight 1 if omitted).", show_default=False)],
    old_split: OldSplitOpt = None,
    **options: Any,
) -> None:
    """Write an Energon MetadatasetV2 .yaml that mixes datasets by sampling weight."""
    from shardcook.energon.blend import write_blend

    try:
        take_old_split(ctx, old_split, options)
        path = write_blend(out, datasets, split=options["split_part"], force=options["force"],
                           aux=options["aux"])
    except ShardcookError as e:
        fail(e)
    typer.echo(f"wrote {path}")


@with_config_options(MEDIA_OPTIONS, lookup=DATASET)
def prepare_media(directory: Annotated[Path, typer.Argument(
        help="A dataset folder, or a plain folder of media files.")], **options: Any) -> None:
    """Record the media metadata (size, format, duration) of a dataset's images, video and
    audio in its index.sqlite, or make a plain folder of media files a filesystem dataset, as
    energon prepare-media does."""
    from shardcook.dataset.arguments import media_filter
    from shardcook.dataset.media.prepare import prepare_media as run

    try:
        chosen = media_filter(options["media_metadata_by_glob"],
                              options["media_metadata_by_header"],
                              options["media_metadata_by_extension"])
        if chosen is None:
            raise ConfigError("pass one of --media-metadata-by-extension, "
                              "--media-metadata-by-glob PATTERNS and --media-metadata-by-header")
        prepared = run(directory, chosen)
    except ShardcookError as e:
        fail(e)
    for skipped in prepared.skipped:
        typer.echo(f"warning: skipped {skipped}")
    others = prepared.taken - prepared.written
    typer.echo(f"stored the media metadata of {prepared.written:,} files" + (
        f" ({others:,} more the filter takes are no image, video or audio file Pillow or PyAV "
        "reads)" if others > 0 else ""))
