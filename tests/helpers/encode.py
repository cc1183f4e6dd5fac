"""Helpers for the `shardcook encode` tests: running encode in-process and reading tensors back
safely (the tiny FLUX-layout encoders are the `tiny_flux` fixture in tests/conftest.py)."""

from __future__ import annotations

import io
from pathlib import Path

TINY = {"image_size": 64, "t5_max_length": 32}


def encode_args(model: Path, src: Path, out: Path, *extra: str) -> list[str]:
    return ["encode", "--model-path", str(model), "--input-dir", str(src), "--output-dir",
            str(out), "--image-size", str(TINY["image_size"]), "--t5-max-length",
            str(TINY["t5_max_length"]), "--precision", "fp32", "--quiet", "--workers", "1",
            *extra]


def run_in_process(args: list[str], expect: int = 0):
    """Runs the CLI in this process (no interpreter start-up); returns the CliRunner result."""
    from shardcook.cli import app
    from typer.testing import CliRunner

    r = CliRunner().invoke(app, args)
    assert r.exit_code == expect, (r.exit_code, r.output, r.exception)
    return r


def load_tensor(data: bytes):
    import torch

    return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


def samples(out: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of every shard by key: part name -> bytes (via the Rust reader)."""
    from shardcook import read_shard

    got = {}
    for shard in sorted(out.glob("*.tar")):
        for key, parts in read_shard(shard):
            got[key] = dict(parts)
    return got
