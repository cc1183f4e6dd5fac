"""The commands on a dataset folder that exists, or its URL in object storage: finalize, validate,
info, preview, report, and blend (several datasets into one Energon metadataset)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from shardcook.cli.app import fail
from shardcook.cli.options import DatasetArg, DatasetScratchOpt, EncodingOpt, HfTokenFileOpt
from shardcook.errors import ShardcookError

#: More tiles than this make a sheet too large to look at (and to hold in memory).
MAX_PREVIEW_COUNT = 1024


def finalize(
    directory: DatasetArg,
    encoding: EncodingOpt = None,
    split: Annotated[
        str | None,
        typer.Option(help="train,val,test ratios by whole shard [default: as recorded, else by "
                          "train-/val-/test- shard names, else 1,0,0]."),
    ] = None,
    split_parts: Annotated[
        list[str] | None,
        typer.Option("--split-parts", help="NAME:PATTERN, repeatable; replaces --split."),
    ] = None,
    shuffle_seed: Annotated[
        int | None, typer.Option(help="Shuffle shards with this seed before cutting splits.")
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(help="Leave out shards whose path matches, repeatable [default: as recorded]."),
    ] = None,
    sample_type: Annotated[
        str | None,
        typer.Option(help="dataset.yaml's class: CrudeWebdataset, a sample class of "
                     "megatron.energon such as CaptioningSample (with --field-map), or "
                     "module:Class (default: the encoding's)."),
    ] = None,
    field_map: Annotated[
        str | None,
        typer.Option(help="JSON object of sample field to part name for a sample class, e.g. "
                     '\'{"image": "jpg", "caption": "txt"}\'.'),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Rebuild an indexed folder, replacing damaged metadata.")
    ] = False,
    sqlite: Annotated[
        bool, typer.Option("--sqlite/--no-sqlite", help="Write index.sqlite (key lookups only).")
    ] = True,
    validate: Annotated[
        bool, typer.Option("--validate/--no-validate", help="Validate after indexing.")
    ] = True,
    scratch_dir: DatasetScratchOpt = None,
) -> None:
    """Write Energon's metadata (index, splits, dataset.yaml) for a folder of shards, then
    validate it."""
    from shardcook.dataset import finalize as run
    from shardcook.dataset.sampletype import parse_field_map
    from shardcook.dataset.splits import parse_split_parts

    try:
        result = run(
            directory,
            encoding=encoding,
            split=split,
            split_parts=parse_split_parts(split_parts) if split_parts else None,
            shuffle_seed=shuffle_seed,
            exclude=exclude,
            sample_type=sample_type,
            field_map=parse_field_map(field_map) if field_map is not None else None,
            sqlite=sqlite,
            force=force,
            validate=validate,
            scratch_dir=scratch_dir,
        )
    except ShardcookError as e:
        fail(e)
    index = result.index
    seconds = index.seconds
    typer.echo(
        f"indexed {index.num_samples:,} samples in {len(index.shard_counts):,} shards "
        f"in {seconds:.2f} s ({index.num_samples / max(seconds, 1e-9):,.0f} samples/s)"
    )
    for name, shards in index.splits.items():
        samples = sum(index.shard_counts[s] for s in shards)
        typer.echo(f"  {name}: {len(shards)} shards, {samples:,} samples")
    if result.validation is not None:
        typer.echo("validated: ok")


def validate(
    directory: DatasetArg,
    encoding: EncodingOpt = None,
    deep: Annotated[bool, typer.Option(help="Read every sample, not one per split.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    scratch_dir: DatasetScratchOpt = None,
) -> None:
    """Check that a dataset is whole; exit 0 when it is, 1 otherwise."""
    from shardcook.dataset import validate as run

    try:
        report = run(directory, encoding=encoding, deep=deep, scratch_dir=scratch_dir)
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
        typer.echo("ok: the dataset is whole" if report.ok else f"{len(report.problems)} problem(s)")
    raise typer.Exit(0 if report.ok else 1)


def info(
    directory: DatasetArg,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
    scratch_dir: DatasetScratchOpt = None,
) -> None:
    """Show what a dataset holds (no checks; fast)."""
    from shardcook.dataset import info as run

    try:
        summary = run(directory, scratch_dir=scratch_dir)
    except ShardcookError as e:
        fail(e)
    typer.echo(json.dumps(summary.to_dict(), indent=2) if as_json else "\n".join(summary.lines()))


def _check_preview_options(out: Path | None, count: int) -> None:
    """Raises ConfigError for an --out that is not a .png in an existing folder, or a bad --count."""
    from shardcook.errors import ConfigError
    from shardcook.paths import check_local_path

    if not 1 <= count <= MAX_PREVIEW_COUNT:
        raise ConfigError(f"--count must be between 1 and {MAX_PREVIEW_COUNT}, not {count}.")
    if out is None:
        return
    check_local_path(out, "--out")
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--out {str(out)!r} must name a .png file.")
    if out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a folder; name the .png file to write.")
    if not out.parent.is_dir():
        raise ConfigError(f"--out {str(out)!r}: the folder {str(out.parent)!r} does not exist.")


def preview(
    directory: DatasetArg,
    out: Annotated[Path | None, typer.Option(help="The PNG to write (default: DIRNAME-preview.png here).")] = None,
    count: Annotated[int, typer.Option(help="How many samples.")] = 16,
    model_path: Annotated[str | None, typer.Option(help="Encoded datasets: decode latents with this FLUX folder's VAE (or a hub id).")] = None,
    hf_token_file: HfTokenFileOpt = None,
    scratch_dir: DatasetScratchOpt = None,
) -> None:
    """A contact sheet PNG of the first samples with their captions (raw: the images; encoded:
    latents decoded by --model-path's VAE, else channels 0-2 as false colour)."""
    from shardcook.preview import preview as run

    try:
        _check_preview_options(out, count)
        path = run(directory, out, count=count, model_path=model_path,
                   hf_token_file=hf_token_file, scratch_dir=scratch_dir)
    except ShardcookError as e:
        fail(e)
    typer.echo(f"wrote {path}")


def report(
    directory: DatasetArg,
    out: Annotated[Path | None, typer.Option(help="The .html file to write (default: DIRNAME-report.html here).")] = None,
    samples: Annotated[int, typer.Option(help="How many samples the page shows.")] = 48,
    split: Annotated[str | None, typer.Option(help="Show only this split's samples (default: all).")] = None,
    scratch_dir: DatasetScratchOpt = None,
) -> None:
    """One self-contained HTML page of a dataset: its facts, validate's verdict, skipped inputs,
    duplicates, latent statistics, plots and a grid of samples; no network needed to view it."""
    from shardcook.htmlreport import write_report

    try:
        path = write_report(directory, out, samples=samples, split=split, scratch_dir=scratch_dir)
    except ShardcookError as e:
        fail(e)
    typer.echo(f"wrote {path}")


def blend(
    out: Annotated[Path, typer.Argument(help="The metadataset .yaml to write.", show_default=False)],
    datasets: Annotated[
        list[str], typer.Argument(help="PATH=WEIGHT per dataset (weight 1 if omitted).", show_default=False)
    ],
    split: Annotated[str, typer.Option(help="The split part the blend defines and reads.")] = "train",
    force: Annotated[bool, typer.Option(help="Replace an existing file (never a dataset's own).")] = False,
) -> None:
    """Write an Energon MetadatasetV2 .yaml that mixes datasets by sampling weight."""
    from shardcook.energon.blend import write_blend

    try:
        path = write_blend(out, datasets, split=split, force=force)
    except ShardcookError as e:
        fail(e)
    typer.echo(f"wrote {path}")
