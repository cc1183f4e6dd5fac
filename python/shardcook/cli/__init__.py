"""The `shardcook` command line: parse options, call one library function, print its result.

Heavy libraries are imported inside the commands so `shardcook --help`, `info` and `validate`
start fast. The commands live by group (`dataset`, `pipelines`, `demo`); they are registered
here, in the order `shardcook --help` lists them.
"""

from __future__ import annotations

import typer

from shardcook.cli.app import app
from shardcook.cli.dataset import blend, finalize, info, preview, validate
from shardcook.cli.demo import demo
from shardcook.cli.pipelines import chatml, encode, raw

__all__ = ["app", "main"]

for command in (finalize, validate, info, raw, chatml, blend, encode, demo, preview):
    app.command()(command)

# Primus's command names, word for word: `primus-cli direct -- data diffusion-encoded ...` is
# `shardcook data diffusion-encoded ...`, also `shardcook diffusion-encoded ...`.
data = typer.Typer(name="data", no_args_is_help=True, help="Primus's command group: "
                   "`data diffusion-encoded` is `encode`, `data diffusion-raw` is `raw`.")
for group in (app, data):
    group.command("diffusion-encoded", help="Primus's name for `encode` (same options).")(encode)
    group.command("diffusion-raw", help="Primus's name for `raw` (same options).")(raw)
app.add_typer(data)


def main() -> None:
    """The console script `shardcook` and `python -m shardcook`."""
    app()
