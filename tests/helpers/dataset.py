"""Helpers for the dataset-metadata tests: small finalized datasets of each layout, and the CLI
run in-process (typer's CliRunner) with its exit code, stdout and stderr."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from shardcook import ShardWriter, finalize
from shardcook.cli import app
from typer.testing import CliRunner

from tests.helpers.raw import encode, generated


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str
    #: An exception that escaped the command (a traceback for the user), else None.
    escaped: BaseException | None


def cli(*args: object) -> CliResult:
    """`shardcook ARGS` in this process."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    escaped = result.exception if not isinstance(result.exception, SystemExit) else None
    return CliResult(result.exit_code, result.stdout, result.stderr, escaped)


def one_error_line(r: CliResult) -> str:
    """The single `error:` line of a refused command (asserting it is the only one)."""
    assert r.escaped is None, repr(r.escaped)
    assert "Traceback" not in r.stdout + r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, r.stderr
    return errors[0]


def raw_parts(i: int) -> dict[str, bytes]:
    meta = {"source": f"img{i}.jpg", "orig_size": [48, 64], "crop": [0, 0], "size": [48, 64]}
    return {"jpg": encode(generated(i, (48, 64))), "txt": f"caption {i}".encode(),
            "meta.json": json.dumps(meta).encode()}


def pth(t: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    torch.save(t.contiguous().clone(), buf)
    return buf.getvalue()


def preencoded_parts(i: int) -> dict[str, bytes]:
    meta = {"source": f"img{i}.jpg", "orig_size": [64, 64], "crop": [0, 0], "size": [32, 32]}
    return {
        "latents.pth": pth(torch.zeros(16, 4, 4, dtype=torch.bfloat16)),
        "prompt_embeds.pth": pth(torch.zeros(8, 32, dtype=torch.bfloat16)),
        "pooled_prompt_embeds.pth": pth(torch.zeros(24, dtype=torch.bfloat16)),
        "caption.txt": f"caption {i}".encode(),
        "meta.json": json.dumps(meta).encode(),
    }


def write_dataset(d: Path, parts=raw_parts, *, n_shards: int = 2, per_shard: int = 2,
                  encoding: str | None = "raw", **finalize_args: object) -> Path:
    """`n_shards` shards of `per_shard` samples made by `parts(i)`, finalized."""
    with ShardWriter(d, shard_size=per_shard) as w:
        for i in range(n_shards * per_shard):
            w.write(f"{i:010d}", parts(i))
    finalize(d, encoding=encoding, **finalize_args)
    return d
