"""The `shardcook` command line: parse options, call one library function, print its result.

Heavy libraries are imported inside the commands so `shardcook --help`, `info` and `validate`
start fast.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from shardcook.errors import ShardcookError

app = typer.Typer(
    name="shardcook",
    help="Prepare image+text datasets for Megatron-Energon, and prove them whole.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

log = logging.getLogger("shardcook")


def _version(value: bool) -> None:
    if value:
        from shardcook import __version__

        typer.echo(f"shardcook {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)


def _fail(e: Exception) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)


Dir = Annotated[Path, typer.Argument(help="The dataset folder.", show_default=False)]


@app.command()
def finalize(
    directory: Dir,
    encoding: Annotated[
        Optional[str], typer.Option(help="preencoded or raw (default: from the manifest).")
    ] = None,
    split: Annotated[str, typer.Option(help="train,val,test ratios by whole shard.")] = "1,0,0",
    split_parts: Annotated[
        Optional[list[str]],
        typer.Option("--split-parts", help="NAME:PATTERN, repeatable; replaces --split."),
    ] = None,
    shuffle_seed: Annotated[
        Optional[int], typer.Option(help="Shuffle shards with this seed before cutting splits.")
    ] = None,
    exclude: Annotated[
        Optional[list[str]], typer.Option(help="Leave out shards whose path matches, repeatable.")
    ] = None,
    force: Annotated[bool, typer.Option(help="Rebuild an already indexed folder.")] = False,
    sqlite: Annotated[
        bool, typer.Option("--sqlite/--no-sqlite", help="Write index.sqlite (key lookups only).")
    ] = True,
    validate: Annotated[
        bool, typer.Option("--validate/--no-validate", help="Validate after indexing.")
    ] = True,
) -> None:
    """Write Energon's metadata (index, splits, dataset.yaml) for a folder of shards, then
    validate it."""
    from shardcook.finalize import finalize as run
    from shardcook.splits import parse_split_parts

    try:
        result = run(
            directory,
            encoding=encoding,
            split=split,
            split_parts=parse_split_parts(split_parts) if split_parts else None,
            shuffle_seed=shuffle_seed,
            exclude=exclude or (),
            sqlite=sqlite,
            force=force,
            validate=validate,
        )
    except ShardcookError as e:
        _fail(e)
    index = result.index
    seconds = index.seconds
    typer.echo(
        f"indexed {index.num_samples:,} samples in {len(index.shard_counts):,} shards "
        f"in {seconds:.2f} s ({index.num_samples / max(seconds, 1e-9):,.0f} samples/s)"
    )
    for name, shards in index.splits.items():
        typer.echo(f"  {name}: {len(shards)} shards, {sum(index.shard_counts[s] for s in shards):,} samples")
    if result.validation is not None:
        typer.echo("validated: ok")


@app.command()
def validate(
    directory: Dir,
    encoding: Annotated[
        Optional[str], typer.Option(help="preencoded or raw (default: from dataset.yaml).")
    ] = None,
    deep: Annotated[bool, typer.Option(help="Read every sample, not one per split.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check that a dataset is whole; exit 0 when it is, 1 otherwise."""
    from shardcook.validate import validate as run

    report = run(directory, encoding=encoding, deep=deep)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for problem in report.problems:
            typer.echo(f"problem: {problem}")
        if report.summary:
            typer.echo("\n".join(report.summary.lines()))
        typer.echo("ok: the dataset is whole" if report.ok else f"{len(report.problems)} problem(s)")
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def info(
    directory: Dir,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Show what a dataset holds (no checks; fast)."""
    from shardcook.inspect import info as run

    try:
        summary = run(directory)
    except ShardcookError as e:
        _fail(e)
    typer.echo(json.dumps(summary.to_dict(), indent=2) if as_json else "\n".join(summary.lines()))


def main() -> None:
    app()
