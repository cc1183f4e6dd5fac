"""The typer application every command registers on: the root callback (--version, logging)
and `fail`, the one way a command refuses bad input (one line on stderr, exit 2)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Annotated, NoReturn

import typer

from shardcook.docsite import docs_url

app = typer.Typer(
    name="shardcook",
    help="Prepare image+text datasets for Megatron-Energon, and prove them whole.\n\n"
         f"Documentation: {docs_url()}",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from shardcook import __version__
        from shardcook.buildinfo import build_info, build_lines

        typer.echo("\n".join([f"shardcook {__version__}", *build_lines(build_info())]))
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
    nproc_per_node: Annotated[
        int | None, typer.Option(help="raw, encode, chatml, ingest (and Primus's `data ...`): "
                                      "start N torchrun workers on this machine, as Primus does.")
    ] = None,
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)
    for chatty in ("botocore", "boto3", "s3transfer", "multistorageclient", "httpx",
                   "httpx2"):
        # the object-storage client's own INFO lines ("Found credentials in environment
        # variables") and the hub client's per request ("HTTP Request: HEAD ...") are not the
        # run's news
        logging.getLogger(chatty).setLevel(logging.WARNING)
    logging.getLogger("multistorageclient.retry").addFilter(_not_an_error)
    from shardcook.cli.launch import remember
    from shardcook.errors import ConfigError

    try:
        remember(ctx, nproc_per_node)
    except ConfigError as e:
        fail(e)


def _not_an_error(record: logging.LogRecord) -> bool:
    """False for the object-storage client's ERROR lines: it logs each error it gives up on and
    then raises it, and the command says that error in its own one sentence."""
    return record.levelno < logging.ERROR


#: Seconds a worker whose error rank 0 says waits before it exits: torchrun stops every worker
#: once one exits, and rank 0 must not be stopped before it has said the error.
RANK_ZERO_GRACE_S = 5.0


def fail(e: Exception) -> NoReturn:
    """Prints `error: E` on stderr and exits 2 (bad input, nothing written); a worker whose
    error rank 0 says exits 2 without repeating it, after rank 0 (or torchrun stops it)."""
    from shardcook.errors import SaidByRankZero

    if isinstance(e, SaidByRankZero):
        time.sleep(RANK_ZERO_GRACE_S)
    else:
        typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)
