"""`--nproc-per-node N`, as Primus spells it before the command (`primus-cli direct --
--nproc-per-node=8 data diffusion-encoded ...`): once the command's options are checked, this
process starts N workers running the same command through torchrun's own launcher
(`torch.distributed.run --standalone`, one machine) and exits with their status."""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass

import typer

from shardcook.errors import ConfigError
from shardcook.runtime.workers import where

#: The commands that run under torchrun (with their Primus names).
PIPELINE_COMMANDS = frozenset({"raw", "encode", "chatml", "ingest", "diffusion-raw",
                               "diffusion-encoded", "diffusion-ingest"})
#: Primus's command group, whose commands are named after it (`data diffusion-raw`).
GROUP = "data"
#: More workers than this on one machine is a typo, not a plan.
MAX_NPROC = 1024


@dataclass(frozen=True)
class Launch:
    """What the root command was asked: N workers running `shardcook ARGV`."""

    nproc: int
    argv: tuple[str, ...]


def _without_nproc(argv: list[str]) -> tuple[str, ...]:
    """The command line with the root's `--nproc-per-node N` (or `=N`) taken out."""
    out: list[str] = []
    it = iter(argv)
    for arg in it:
        if arg == "--nproc-per-node":
            next(it, None)
        elif not arg.startswith("--nproc-per-node="):
            out.append(arg)
    return tuple(out)


def _command(invoked: str | None, argv: tuple[str, ...]) -> str | None:
    """The command that runs: the one invoked, or for Primus's group the one named after it
    (the group itself when none is, as in `data --help`)."""
    if invoked != GROUP or GROUP not in argv:
        return invoked
    after = argv[argv.index(GROUP) + 1:]
    return after[0] if after and not after[0].startswith("-") else GROUP


def remember(ctx: typer.Context, nproc: int | None) -> None:
    """Checks `--nproc-per-node` given before the command and keeps it, with this process's
    command line (`sys.argv`, the workers' command line less that option), for `start_workers`.

    Raises:
        ConfigError: a count out of range, a command that does not run under torchrun, or a
            process that already runs under a launcher, in one sentence.
    """
    if nproc is None:
        return
    if not 1 <= nproc <= MAX_NPROC:
        raise ConfigError(f"--nproc-per-node must be between 1 and {MAX_NPROC}, not {nproc}.")
    argv = _without_nproc(sys.argv[1:])
    command = _command(ctx.invoked_subcommand, argv)
    if command not in PIPELINE_COMMANDS | {GROUP}:
        raise ConfigError(f"--nproc-per-node starts workers for "
                          f"{', '.join(sorted(PIPELINE_COMMANDS))}; "
                          f"{command or 'no command'} runs in one process, drop it.")
    if "WORLD_SIZE" in os.environ:
        raise ConfigError("--nproc-per-node starts torchrun itself, but this process already runs "
                          "under a launcher (WORLD_SIZE is set); drop --nproc-per-node.")
    place = where()
    if place.launcher == "array" or place.count > 1:
        raise ConfigError(f"--nproc-per-node starts a torchrun of its own on this machine, but "
                          f"this process is {place.describe()}, whose fellows would each do the "
                          "same units; drop --nproc-per-node, or run one task per node that "
                          "starts torchrun with --nnodes and --node-rank.")
    if ctx.invoked_subcommand not in argv:  # called in-process (tests, CliRunner), not a shell
        raise ConfigError("--nproc-per-node works from the command line (`shardcook` or "
                          "`python -m shardcook`); in Python, run the command under torchrun.")
    ctx.obj = Launch(nproc, argv)


def workers_asked(ctx: typer.Context) -> bool:
    """Whether `--nproc-per-node` asked for more than one worker."""
    launch = ctx.find_root().obj
    return isinstance(launch, Launch) and launch.nproc > 1


def start_workers(ctx: typer.Context) -> None:
    """Runs the command in `--nproc-per-node` torchrun workers when that was asked (more than
    one), then exits with their status: 0, or the first failed worker's exit code (each
    worker has printed its own sentence). Returns when this process should do the work itself."""
    if not workers_asked(ctx):
        return
    launch = ctx.find_root().obj
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    # the elastic agent's lines about rendezvous and stopping workers are not the user's
    # business; each worker prints its own sentence, the agent which one failed
    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
    args = parse_args(["--standalone", f"--nproc-per-node={launch.nproc}",  # type: ignore[no-untyped-call]
                       "-m", "shardcook", *launch.argv])
    try:
        run(args)  # type: ignore[no-untyped-call]
    except ChildFailedError as e:
        codes = [f.exitcode for _, f in sorted(e.failures.items())]
        raise typer.Exit(next((c for c in codes if c > 0), 1)) from None
    raise typer.Exit(0)
