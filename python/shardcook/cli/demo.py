"""`shardcook demo`: the whole tool in a minute on generated data (logic in shardcook.demo)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shardcook.cli.app import fail
from shardcook.errors import ShardcookError


def demo(
    output_dir: Annotated[Path, typer.Option(
        help="Where to put the demo's images, encoders and datasets: a new or "
             "empty folder, or an earlier demo's.")] = Path("shardcook-demo"),
) -> None:
    """Try shardcook in a minute, no GPU and no network: generated images, tiny random-weight
    encoders (demo weights, not a real model), raw + encode, finalize, validate, load."""
    from shardcook.demo import run_demo

    try:
        result = run_demo(output_dir)
    except ShardcookError as e:
        fail(e)
    typer.echo("\n".join(result.lines))
    typer.echo(f"done in {result.seconds:.1f} s")
