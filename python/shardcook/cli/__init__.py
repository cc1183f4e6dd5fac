"""The `shardcook` command line: parse options, call one library function, print its result.

Heavy libraries are imported inside the commands so `shardcook --help`, `info` and `validate`
start fast. The commands live by group (`dataset`, `pipelines`, `demo`); they are registered
here, in the panels and order `shardcook --help` lists them: as a user meets them.
"""

from __future__ import annotations

import gc
import inspect
import sys
from collections.abc import Callable
from typing import Any

import typer

from shardcook.cli.app import app
from shardcook.cli.dataset import (
    blend,
    finalize,
    info,
    prepare_media,
    preview,
    report,
    validate,
)
from shardcook.cli.demo import demo
from shardcook.cli.ingest import ingest
from shardcook.cli.pipelines import chatml, encode, raw, status
from shardcook.docsite import docs_url

__all__ = ["app", "main"]

# Panel, then (command, its page on the documentation site).
PANELS: tuple[tuple[str, tuple[tuple[Callable[..., Any], str], ...]], ...] = (
    ("Try it", ((demo, "DEMO/"),)),
    ("Make data", ((encode, "ENCODE/"), (raw, "RAW/"), (chatml, "CHATML/"), (ingest, "MLPERF/"),
                   (status, "RUNS/#slurm"))),
    ("Finish and check", ((finalize, "DATASETS/#finalize"),
                          (prepare_media, "DATASETS/#prepare-media"),
                          (validate, "DATASETS/#validate-and-info"),
                          (info, "DATASETS/#validate-and-info"), (preview, "DATASETS/#preview"),
                          (report, "REPORT/"),
                          (blend, "DATASETS/#blend"))),
)


def command_help(text: str, page: str) -> str:
    """`text` (a docstring) with each paragraph on one line, since typer's command list keeps a
    docstring's line breaks mid-sentence; then the address of the command's guide, as a paragraph
    of its own so the list shows only the summary."""
    paragraphs = [" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n")]
    return "\n\n".join([*paragraphs, f"Guide: {docs_url(page)}"])


for panel, commands in PANELS:
    for command, page in commands:
        app.command(help=command_help(command.__doc__ or "", page), rich_help_panel=panel)(command)

# Primus's command names, word for word: `primus-cli direct -- data diffusion-encoded ...` is
# `shardcook data diffusion-encoded ...`, also `shardcook diffusion-encoded ...`.
data = typer.Typer(name="data", no_args_is_help=True, help=command_help(
    "Primus's command group: `data diffusion-encoded` is `encode`, `data diffusion-raw` is `raw`, "
    "`data diffusion-ingest` is `ingest`.", "PRIMUS/"))
groups: tuple[tuple[typer.Typer, str | None], ...] = ((app, "Primus's names"), (data, None))
for group, alias_panel in groups:
    for alias, command in (("diffusion-encoded", encode), ("diffusion-raw", raw)):
        group.command(alias, rich_help_panel=alias_panel, help=command_help(
            f"Primus's name for `{command.__name__}` (same options).", "PRIMUS/"))(command)
app.command("diffusion-ingest", rich_help_panel="Primus's names", help=command_help(
    "Primus's name for `ingest` (same options).", "PRIMUS/"))(ingest)
data.command("diffusion-ingest", help=command_help(
    "Primus's name for `ingest` (same options).", "PRIMUS/"))(ingest)
app.add_typer(data, rich_help_panel="Primus's names")


def main() -> None:
    """The console script `shardcook` and `python -m shardcook`."""
    try:
        app()
    finally:
        # The command is over, its files closed: the collection Python runs over every object
        # at exit took 0.3 s after a finalize of 200 tars in a bucket, to find garbage the
        # process drops anyway. Not once torch is loaded: the compiler it brings (triton)
        # reports each of its objects left uncollected at exit as a leak, on stderr.
        if "torch" not in sys.modules:
            gc.freeze()
