"""How long `shardcook report` takes on a large dataset, and how large the page is.

Usage:
    python benches/report_scale.py                      # 10,000,000 samples under bench-out/
    python benches/report_scale.py --samples 1000000 --out /tmp/big

Writing ten million real samples takes hours and tens of GB, so the dataset is built cheaply, the
way only a bench may: `--templates` real shards of 1,000 samples each (a 16x16 JPEG, a caption and
meta.json per sample) are written with `shardcook.ShardWriter` and finalized; the dataset's shards
are hard links to them (and their `.tar.idx`), one name per 1,000 samples; and its metadata
(`.info.json`, `split.yaml` 90/10, `index.uuid`, `finalize.json`) and `index.sqlite` (Energon's
schema and indexes, one `samples` row and three `sample_parts` rows per sample, keys made unique
by the shard's number) are written for all of them, as finalize would. The report reads only the
index, the metadata and its samples, so what it sees is a 10 M-sample dataset; its duplicate
counts see the copies.

The dataset is kept (and reused when it is already there with the same size): the command is
then timed `--rounds` times, each a new process, as a user would run it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from PIL import Image
from shardcook import ShardWriter, finalize
from shardcook.dataset import metadata
from shardcook.dataset.index.splits import collapse
from shardcook.layouts.names import INDEX_SQLITE, META_DIR

PER_SHARD = 1000
#: Energon 7.4.1's index tables and indexes, as the native indexer writes them.
SCHEMA = (
    "CREATE TABLE samples (tar_file_id INTEGER NOT NULL, sample_key TEXT NOT NULL UNIQUE, "
    "sample_index INTEGER NOT NULL, byte_offset INTEGER, byte_size INTEGER)",
    "CREATE TABLE sample_parts (tar_file_id INTEGER, sample_index INTEGER, part_name TEXT, "
    "content_byte_offset INTEGER, content_byte_size INTEGER)",
    "CREATE INDEX idx_samples_by_tar_and_idx ON samples(tar_file_id, sample_index)",
    "CREATE INDEX idx_sample_parts_seq ON sample_parts(tar_file_id, sample_index, "
    "content_byte_offset)",
    "CREATE INDEX idx_sample_parts_full ON sample_parts(tar_file_id, sample_index, part_name, "
    "content_byte_offset, content_byte_size)",
)


def write_templates(stage: Path, templates: int) -> None:
    jpgs = []
    for c in range(64):
        b = io.BytesIO()
        Image.new("RGB", (16, 16), (c * 4, 255 - c * 4, (c * 37) % 256)).save(b, "JPEG")
        jpgs.append(b.getvalue())
    with ShardWriter(stage, shard_size=PER_SHARD) as w:
        for i in range(templates * PER_SHARD):
            size = [16, 16 + i % 7 * 8]
            meta = {"source": f"img{i}.jpg", "orig_size": size, "crop": [0, 0], "size": size}
            w.write(f"{i:09d}", {"jpg": jpgs[i % 64], "txt": f"a tiny square number {i}".encode(),
                                 "meta.json": json.dumps(meta).encode()})
    finalize(stage, encoding="raw")


def template_rows(stage: Path) -> list[tuple[list[tuple[object, ...]], list[tuple[object, ...]]]]:
    """Per template shard: its samples rows and sample_parts rows, without tar_file_id."""
    out = []
    with contextlib.closing(sqlite3.connect(stage / META_DIR / INDEX_SQLITE)) as db:
        for tar_id in range(len(metadata.read_info_json(stage).shard_counts)):  # type: ignore[union-attr]
            samples = db.execute("SELECT sample_key, sample_index, byte_offset, byte_size FROM "
                                 "samples WHERE tar_file_id = ? ORDER BY sample_index",
                                 (tar_id,)).fetchall()
            parts = db.execute("SELECT sample_index, part_name, content_byte_offset, "
                               "content_byte_size FROM sample_parts WHERE tar_file_id = ? "
                               "ORDER BY sample_index, content_byte_offset", (tar_id,)).fetchall()
            out.append((samples, parts))
    return out


def build(out: Path, samples: int, templates: int) -> None:
    stage = out.with_name(out.name + "-templates")
    shutil.rmtree(stage, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    write_templates(stage, templates)
    rows = template_rows(stage)
    out.mkdir(parents=True)
    (out / META_DIR).mkdir()
    names = [f"{i:06d}.tar" for i in range(samples // PER_SHARD)]
    for i, name in enumerate(names):
        for suffix in ("", ".idx"):
            os.link(stage / f"{i % templates:06d}.tar{suffix}", out / f"{name}{suffix}")
    shutil.copy(stage / META_DIR / "dataset.yaml", out / META_DIR / "dataset.yaml")
    info = metadata.read_info_json(stage)
    assert info is not None
    metadata.write_info_json(out, info.energon_version or "7.4.1",
                             dict.fromkeys(names, PER_SHARD))
    cut = len(names) * 9 // 10
    parts = {"train": names[:cut], "val": names[cut:]}
    metadata.write_split_yaml(out, {k: collapse(v) for k, v in parts.items()}, [])
    metadata.write_index_uuid(out)
    metadata.write_finalize_record(out, metadata.FinalizeRecord(
        encoding="raw", split=[0.9, 0.1, 0.0]))
    index = out / META_DIR / INDEX_SQLITE
    with contextlib.closing(sqlite3.connect(index)) as db:
        db.executescript("PRAGMA page_size = 65536; PRAGMA journal_mode = OFF; "
                         "PRAGMA synchronous = OFF; PRAGMA cache_size = -262144;")
        for statement in SCHEMA:
            db.execute(statement)
        for tar_id, name in enumerate(names):
            samples_rows, part_rows = rows[tar_id % templates]
            db.executemany("INSERT INTO samples VALUES (?, ?, ?, ?, ?)",
                           ((tar_id, f"{name}/{key}", *rest) for key, *rest in samples_rows))
            db.executemany("INSERT INTO sample_parts VALUES (?, ?, ?, ?, ?)",
                           ((tar_id, *row) for row in part_rows))
        db.commit()
    print(f"built {samples:,} samples in {len(names):,} shards in {time.perf_counter() - t:.0f} s "
          f"(index.sqlite {index.stat().st_size / 2**20:,.0f} MiB)", flush=True)


def built(out: Path, samples: int) -> bool:
    try:
        info = metadata.read_info_json(out)
    except Exception:  # noqa: BLE001 (anything unreadable is rebuilt)
        return False
    return (info is not None and sum(info.shard_counts.values()) == samples
            and (out / META_DIR / INDEX_SQLITE).is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--templates", type=int, default=16)
    parser.add_argument("--out", type=Path, default=Path("bench-out/report-scale"))
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.samples % PER_SHARD or args.samples < args.templates * PER_SHARD:
        sys.exit(f"--samples must be a multiple of {PER_SHARD} and at least --templates of them")
    if not built(args.out, args.samples):
        build(args.out, args.samples, args.templates)
    page = args.out.with_suffix(".html")
    for _ in range(args.rounds):
        t = time.perf_counter()
        subprocess.run(["shardcook", "report", str(args.out), "--out", str(page)], check=True)
        print(f"report of {args.samples:,} samples in {time.perf_counter() - t:.1f} s, "
              f"{page.stat().st_size:,} bytes", flush=True)


if __name__ == "__main__":
    main()
