"""`shardcook ingest` from an MLCommons-style manifest served over HTTP on 127.0.0.1: shards hold
the source's bytes exactly, timesteps survive, a wrong MD5 and a dropped connection are handled,
downloads stay within the prefetch bound and are deleted, unsafe names are refused."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import numpy as np
import pytest
from shardcook import read_shard
from shardcook.config.ingest import IngestConfig, IngestDataset, Retry
from shardcook.errors import ConfigError
from shardcook.jobs.ingest.run import run_ingest

from tests.helpers.mlperf import (
    COLUMNS,
    bf16_bits,
    expected_values,
    npy_bytes,
    serve,
    write_arrow_set,
    write_manifest,
)

PARTS = dict(zip(COLUMNS, ("t5.bytes", "clip.bytes", "mean.bytes", "logvar.bytes"), strict=True))
FAST = Retry(attempts=3, base_delay_s=0.01)


def _config(out: Path, datasets: list[IngestDataset], **kw: int) -> IngestConfig:
    return IngestConfig(output_dir=out, datasets=datasets, retry=FAST, **kw)


def _check_shards(folder: Path, rows: dict[str, tuple[int, int, int | None]],
                  skip_files: frozenset[int] = frozenset()) -> int:
    """Every sample's tensors equal the source's bf16 bits and its json carries key and
    timestep as the source had them; returns the count."""
    seen = 0
    for shard in sorted(folder.glob("*.tar")):
        for key, parts in read_shard(shard):
            file_index, row, t = rows[key]
            assert file_index not in skip_files
            for column, part in PARTS.items():
                array = np.load(io.BytesIO(parts[part]), allow_pickle=False)
                assert array.dtype == np.uint16
                assert np.array_equal(array, bf16_bits(expected_values(file_index, row, column)))
            meta = json.loads(parts["json"])
            assert meta == ({"key": key} if t is None else {"key": key, "timestep": t})
            seen += 1
    return seen


def test_manifest_over_http_bit_exact_with_md5_failure_and_dropped_connection(tmp_path):
    served = tmp_path / "served"
    train = write_arrow_set(served, 4, 5, timesteps=False, prefix="cc12m")
    val = write_arrow_set(served, 2, 8, timesteps=True, prefix="coco", key_prefix="v")
    bad, dropped = train.files[2].name, train.files[1].name
    out = tmp_path / "out"
    with serve(served, drop_once={dropped}) as (base, requests):
        write_manifest(served, "cc12m", train.files, base, wrong_md5={bad})
        write_manifest(served, "coco", val.files, base)
        cfg = _config(out, [
            IngestDataset(split="train", manifest_url=f"{base}/cc12m.uri"),
            IngestDataset(split="val", manifest_url=f"{base}/coco.md5")])
        report = run_ingest(cfg)

    assert requests.count(dropped) == 2  # cut once, then fetched whole
    assert requests.count(bad) == FAST.attempts
    assert [f["file"] for f in report["failed"]] == [bad]
    assert report["failed"][0]["stage"] == "download"
    assert "MD5" in report["failed"][0]["reason"]
    on_disk = json.loads((out / ".shardcook/report.json").read_text())
    assert [f["file"] for f in on_disk["failed"]] == [bad]
    # no shard for the failed file; the others keep their manifest position as shard number
    assert sorted(p.name for p in (out / "train").glob("*.tar")) == [
        "train-shard-000000.tar", "train-shard-000001.tar", "train-shard-000003.tar"]
    assert _check_shards(out / "train", train.rows, skip_files=frozenset({2})) == 15
    assert _check_shards(out / "val", val.rows) == 16
    assert not (out / ".shardcook/downloads").exists()
    assert not (out / "train/.shardcook").exists() and not (out / "val/.shardcook").exists()
    # the served files are the user's: untouched
    assert all(p.is_file() for p in train.files + val.files)


def test_val_timesteps_reach_info_and_validate(tmp_path):
    from shardcook.dataset import info, validate

    val = write_arrow_set(tmp_path / "in", 2, 8, timesteps=True)
    run_ingest(_config(tmp_path / "out", [IngestDataset(split="val", paths=(val.folder,))]))
    summary = info(tmp_path / "out")
    assert summary.val_timesteps == dict.fromkeys(range(8), 2)
    assert summary.parts["t5.bytes"] == "bfloat16[6, 8] (uint16 .npy)"
    assert summary.subflavors == {"encoding": "preencoded_numpy"}
    report = validate(tmp_path / "out", deep=True)
    assert report.ok, report.problems


def test_prefetch_bound_holds_downloads_on_disk(tmp_path):
    served = tmp_path / "served"
    train = write_arrow_set(served, 8, 4, timesteps=False)
    out = tmp_path / "out"
    downloads = out / ".shardcook" / "downloads" / "train"
    peak = [0, 0]  # files, bytes
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            try:
                sizes = [p.stat().st_size for p in downloads.iterdir()]
            except OSError:
                sizes = []
            peak[0] = max(peak[0], len(sizes))
            peak[1] = max(peak[1], sum(sizes))

    biggest = max(p.stat().st_size for p in train.files)
    watcher = threading.Thread(target=watch)
    with serve(served, delay_s=0.05) as (base, _):
        write_manifest(served, "m", train.files, base)
        watcher.start()
        try:
            report = run_ingest(_config(out, [IngestDataset(split="train",
                                                            manifest_url=f"{base}/m.uri")],
                                        max_workers=4, prefetch_depth=2))
        finally:
            stop.set()
            watcher.join()
    assert not report["failed"]
    assert 1 <= peak[0] <= 2 and report["peak_downloads_on_disk"] <= 2
    assert peak[1] <= 2 * biggest
    assert _check_shards(out / "train", train.rows) == 32


@pytest.mark.parametrize("name", ["../escape.arrow", "/etc/escape.arrow", "sub/x.arrow", ".."])
def test_manifest_names_escaping_the_folder_are_refused(tmp_path, name):
    served = tmp_path / "served"
    write_arrow_set(served, 1, 2, timesteps=False)
    (served / "m.md5").write_text(f"{'a' * 32}  {name}\n")
    out = tmp_path / "out"
    with serve(served) as (base, requests):
        (served / "m.uri").write_text(base)
        with pytest.raises(ConfigError, match="not a plain file name"):
            run_ingest(_config(out, [IngestDataset(split="train",
                                                   manifest_url=f"{base}/m.uri")]))
    assert not out.exists()
    assert not (tmp_path / "escape.arrow").exists()
    assert all(r.startswith("m.") for r in requests)


def test_local_inputs_are_kept_byte_for_byte(tmp_path):
    train = write_arrow_set(tmp_path / "in", 3, 4, timesteps=False)
    before = {p: p.read_bytes() for p in train.files}
    run_ingest(_config(tmp_path / "out", [IngestDataset(split="train", paths=(train.folder,))]))
    assert {p: p.read_bytes() for p in train.files} == before
    assert _check_shards(tmp_path / "out" / "train", train.rows) == 12


def test_primus_config_with_empty_encodings_and_a_local_manifest(tmp_path):
    import subprocess
    import sys

    served = tmp_path / "served"
    val = write_arrow_set(served, 2, 4, timesteps=True)
    empty = {"t5_empty.npy": npy_bytes(np.zeros((4, 8), np.uint16)),
             "clip_empty.npy": npy_bytes(np.ones((8,), np.uint16))}
    for name, data in empty.items():
        (served / name).write_bytes(data)
    out = tmp_path / "out"
    with serve(served) as (base, requests):
        write_manifest(served, "empty", [served / n for n in empty], base)
        write_manifest(tmp_path, "local", val.files, base)  # local.md5, read from disk
        (tmp_path / "mlperf.yaml").write_text(
            "datasets:\n"
            "  - name: coco\n"
            f"    manifest: {tmp_path / 'local.md5'}\n"
            f"    base_url: {base}\n"
            "    split_name: val\n"
            "empty_encodings:\n"
            f"  manifest_url: {base}/empty.uri\n"
            "  output_subdir: empty_encodings\n"
            "output:\n"
            f"  output_dir: ${{SHARDCOOK_TEST_ROOT:{tmp_path}}}/out\n"
            "pipeline:\n  max_workers: 2\n  prefetch_depth: 1\n  max_files: null\n")
        for _ in range(2):  # the second run finds everything done and fetches nothing new
            run = subprocess.run([sys.executable, "-m", "shardcook", "diffusion-ingest",
                                  "--config", str(tmp_path / "mlperf.yaml")],
                                 capture_output=True, text=True, timeout=300, check=False)
            assert run.returncode == 0, run.stderr
    assert {n: (out / "empty_encodings" / n).read_bytes() for n in empty} == empty
    assert sorted(r for r in requests if r.endswith((".npy", ".arrow"))) == sorted(
        [*empty, *(f.name for f in val.files)])
    assert _check_shards(out / "val", val.rows) == 8


def test_shard_n_is_file_n_whatever_order_downloads_finish_in(tmp_path):
    served = tmp_path / "served"
    train = write_arrow_set(served, 4, 3, timesteps=False)
    out = tmp_path / "out"
    # the first file arrives last: the others finish while it is still downloading
    with serve(served, delays={train.files[0].name: 1.0}) as (base, requests):
        write_manifest(served, "m", train.files, base)
        run_ingest(_config(out, [IngestDataset(split="train", manifest_url=f"{base}/m.uri")],
                           max_workers=4, prefetch_depth=4))
        asked = [r for r in requests if r.endswith(".arrow")]
    # every file fetched once; the first, held back 1 s, is answered last (the requests of the
    # 4 download threads reach the server in any order, so that order is not asserted)
    assert sorted(asked) == sorted(f.name for f in train.files)
    for n in range(4):
        keys = [key for key, _ in read_shard(out / "train" / f"train-shard-{n:06d}.tar")]
        assert keys and all(train.rows[k][0] == n for k in keys), (n, keys)
