"""Shard helpers shared by the tests: making shards with our writer and with Python's tarfile, and
running Energon's own `energon prepare` as the reference."""

from __future__ import annotations

import io
import json
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml
from shardcook import ShardWriter

ENERGON = [sys.executable, "-m", "megatron.energon.cli.main"]


def write_shards(
    directory: Path, n_shards: int, per_shard: int, parts=None, start: int = 0
) -> None:
    """`n_shards` shards of `per_shard` samples; parts default to a caption and a small json."""
    with ShardWriter(directory, shard_size=per_shard) as w:
        for i in range(start, start + n_shards * per_shard):
            w.write(
                f"{i:010d}",
                parts(i)
                if parts
                else {
                    "txt": f"caption {i}".encode(),
                    "json": json.dumps({"i": i}).encode(),
                },
            )


def tarfile_shard(
    path: Path, members: list[tuple[str, bytes | None]], fmt=tarfile.PAX_FORMAT
) -> None:
    """A shard written by Python's tarfile; a member with data None is a directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))


def energon_prepare(directory: Path, *args: str) -> subprocess.CompletedProcess:
    """Runs `energon prepare --non-interactive` (the reference implementation)."""
    return subprocess.run(
        [
            *ENERGON,
            "prepare",
            "--non-interactive",
            "--sample-type",
            "CrudeWebdataset",
            *args,
            str(directory),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def sqlite_rows(path: Path) -> dict[str, set]:
    db = sqlite3.connect(path)
    try:
        return {
            table: set(db.execute(f"SELECT * FROM {table}").fetchall())
            for table in ("samples", "sample_parts")
        }
    finally:
        db.close()


def assert_same_index(ours: Path, theirs: Path, sqlite: bool = True) -> None:
    """Every file Energon defines must match: .tar.idx bytes, .info.json text, split.yaml as YAML,
    index.sqlite rows as sets."""
    idx = sorted(p.relative_to(theirs) for p in theirs.glob("**/*.tar.idx"))
    assert idx, "energon wrote no .tar.idx"
    assert idx == sorted(p.relative_to(ours) for p in ours.glob("**/*.tar.idx"))
    for rel in idx:
        assert (ours / rel).read_bytes() == (theirs / rel).read_bytes(), rel
    meta_o, meta_t = ours / ".nv-meta", theirs / ".nv-meta"
    assert (meta_o / ".info.json").read_text() == (meta_t / ".info.json").read_text()
    assert yaml.safe_load((meta_o / "split.yaml").read_text()) == yaml.safe_load(
        (meta_t / "split.yaml").read_text()
    )
    if sqlite:
        assert sqlite_rows(meta_o / "index.sqlite") == sqlite_rows(meta_t / "index.sqlite")
