"""The `shardcook` command line: parse options, call one library function, print its result.

Heavy libraries are imported inside the commands so `shardcook --help`, `info` and `validate`
start fast. The commands live by group (`dataset`, `pipelines`, `demo`); they are registered
here, in the order `shardcook --help` lists them.
"""

from __future__ import annotations

from shardcook.cli.app import app
from shardcook.cli.dataset import blend, finalize, info, preview, validate
from shardcook.cli.demo import demo
from shardcook.cli.pipelines import chatml, encode, raw

__all__ = ["app", "main"]

for command in (finalize, validate, info, raw, chatml, blend, encode, demo, preview):
    app.command()(command)

# Primus's command names, word for word: `primus-cli direct -- data diffusion-encoded ...` is
# `shardcook diffusion-encoded ...`.
app.command("diffusion-encoded", help="Primus's name for `encode` (same options).")(encode)
app.command("diffusion-raw", help="Primus's name for `raw` (same options).")(raw)


def main() -> None:
    """The console script `shardcook` and `python -m shardcook`."""
    app()
