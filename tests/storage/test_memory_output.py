"""A run whose output folder is a `MemoryStore` goes through the one `RunFolder` as a bucket's
does (staged, then uploaded, every record through the store) and leaves there the shards, their
`.tar.idx` and the dataset a run into a local folder leaves."""

from __future__ import annotations

from pathlib import Path

from shardcook.config import resolve
from shardcook.storage.location import Location
from shardcook.storage.memory import MemoryStore

from tests.helpers.raw import make_folder, run_raw

#: New on every finalize (index.uuid), or the same rows built another way (index.sqlite).
_DIFFER = {".nv-meta/index.uuid", ".nv-meta/index.sqlite"}


def _config(src: Path, out: str, tmp_path: Path):
    return resolve({"input_dir": str(src), "output_dir": out, "image_size": 32,
                    "shard_size": 3, "quiet": True, "scratch_dir": str(tmp_path / "scratch")})


def test_a_raw_run_into_memory_writes_what_it_writes_into_a_folder(tmp_path: Path):
    src = make_folder(tmp_path / "in", 8, photos=2)
    run_raw(_config(src, str(tmp_path / "out"), tmp_path))
    memory = MemoryStore("memory://runs")
    cfg = _config(src, str(tmp_path / "unused"), tmp_path)
    cfg.output.place("output_dir", Location("memory://runs/out", memory.folder("out")))

    report = run_raw(cfg)

    assert report is not None and report["num_written"] == 8
    local = {p.relative_to(tmp_path / "out").as_posix(): p.read_bytes()
             for p in (tmp_path / "out").rglob("*") if p.is_file()}
    there = {name.removeprefix("out/"): data for name, data in memory.objects.items()}
    shards = sorted(n for n in local if n.endswith(".tar"))
    assert shards == ["000000.tar", "000001.tar", "000002.tar"]
    assert {n: there.get(n) for n in shards} == {n: local[n] for n in shards}
    assert {n: there.get(f"{n}.idx") for n in shards} == {n: local[f"{n}.idx"] for n in shards}
    meta = {n for n in local if n.startswith(".nv-meta/")}
    assert {n: there.get(n) for n in meta - _DIFFER} == {n: local[n] for n in meta - _DIFFER}
    assert sorted(n for n in there if n.startswith(".shardcook/progress/")) == sorted(
        n for n in local if n.startswith(".shardcook/progress/"))
    assert list((tmp_path / "scratch").iterdir()) == []  # nothing staged is left
