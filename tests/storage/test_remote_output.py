"""`raw`, `encode` and `chatml` writing into object storage (`--output-dir msc://...`, `s3://...`)
against the real S3 server: the objects equal a local run's files, a resume from another scratch
folder is byte-identical, the upload queue bounds the scratch space, `--overwrite` keeps its
rules, and a bad store is one sentence before anything is written. The bucket is read with boto3,
not with the client under test."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.raw import make_folder, run_cli
from tests.helpers.s3server import add_profile

PREFIX = "data/set"
#: Finalize's own files in a local run, which a --no-finalize run in the bucket does not have.
FINALIZE_ONLY = (".nv-meta/", ".shardcook/finalize.json")


def _raw_args(src: Path, out: str, *extra: str) -> list[str]:
    return ["raw", "--input-dir", str(src), "--output-dir", out, "--shard-size", "2",
            "--image-size", "64", "--workers", "1", *extra]


@pytest.fixture(scope="module")
def local_raw(tmp_path_factory):
    """12 inputs (4 photos) and a finalized local `raw` run of them: the reference."""
    tmp = tmp_path_factory.mktemp("remote_raw")
    src = make_folder(tmp / "in", 12, photos=4)
    ref = tmp / "ref"
    run_cli(*_raw_args(src, str(ref), "--quiet"))
    return src, ref


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _objects(store, prefix: str = PREFIX, *, rows: bool = False) -> dict[str, bytes]:
    """The objects under `prefix`; without the shards' index rows (`.shardcook/index/`, which
    only a bucket run writes) unless `rows`."""
    return {k[len(prefix) + 1:]: store.get(k) for k in store.keys(prefix + "/")
            if rows or not k.startswith(f"{prefix}/.shardcook/index/")}


def _shards_and_indexes(files: dict[str, bytes]) -> dict[str, str]:
    return {n: hashlib.sha256(b).hexdigest() for n, b in files.items()
            if n.endswith((".tar", ".tar.idx"))}


def _scratch_left(scratch: Path) -> list[str]:
    return sorted(p.relative_to(scratch).as_posix() for p in scratch.rglob("*"))


def _indexed(root: Path) -> dict[str, bytes]:
    """The files of a local --no-finalize run plus the `.tar.idx` finalize would write (the
    same native call)."""
    from shardcook import _native

    _native.index_shards(root, sorted(p.name for p in root.glob("*.tar")), None)
    return _files(root)


def test_raw_into_a_bucket_equals_a_local_run(local_raw, s3_store, tmp_path):
    src, ref = local_raw
    scratch = tmp_path / "scratch"
    r = run_cli(*_raw_args(src, s3_store.url(PREFIX), "--no-finalize", "--scratch-dir",
                           str(scratch)))
    local = {n: b for n, b in _files(ref).items() if not n.startswith(FINALIZE_ONLY)}
    remote = _objects(s3_store, rows=True)
    # the same names: 6 shards, their .tar.idx (finalize's, byte for byte), the markers,
    # the manifest and the report; and each shard's index rows, for finalize there
    shards = [n for n in remote if n.endswith(".tar")]
    rows = {n for n in remote if n.startswith(".shardcook/index/")}
    assert len(shards) == 6 and rows == {f".shardcook/index/{s}.sqlite" for s in shards}
    assert sorted(set(remote) - rows) == sorted(local)
    assert _shards_and_indexes(remote) == _shards_and_indexes(local)
    for name, data in local.items():
        if name.startswith(".shardcook/progress/"):
            assert remote[name] == data
    report = json.loads(remote[".shardcook/report.json"])
    assert report["num_written"] == 12 and report["num_shards"] == 6
    biggest = max(len(remote[n]) + len(remote[n + ".idx"]) +
                  len(remote[f".shardcook/index/{n}.sqlite"]) for n in shards)
    assert 0 < report["scratch_peak_bytes"] <= 5 * biggest  # 4 queued + 1 written, at most
    assert "scratch_peak_bytes" not in json.loads(local[".shardcook/report.json"])
    manifest = json.loads(remote[".shardcook/manifest.json"])
    assert manifest["complete"] and manifest["shards"] == report["shards"]
    # the summary names the URL; the scratch folder is left empty
    assert f"dataset in {s3_store.url(PREFIX)}" in r.stderr
    assert _scratch_left(scratch) == []
    # an s3:// URL of the same bucket resumes the same run: everything is found done
    run_cli(*_raw_args(src, s3_store.s3_url(PREFIX), "--no-finalize", "--quiet",
                       "--scratch-dir", str(scratch)))
    again = _objects(s3_store)
    assert json.loads(again[".shardcook/report.json"])["units"]["resumed"] == 6
    assert _shards_and_indexes(again) == _shards_and_indexes(local)


def test_a_run_into_a_bucket_finalizes_there_and_energon_reads_it(local_raw, s3_store, tmp_path):
    """The default run (finalize and validate at the end) on a URL: the bucket then holds what
    the local run's folder holds, the index equal to it, and Energon reads every sample from the
    bucket."""
    from megatron.energon.epathlib import EPath

    from tests.helpers.raw import energon_parts
    from tests.helpers.shards import assert_same_index

    src, ref = local_raw
    run_cli(*_raw_args(src, s3_store.url(PREFIX), "--quiet", "--scratch-dir",
                       str(tmp_path / "scratch")))
    assert sorted(_objects(s3_store)) == sorted(_files(ref))
    s3_store.download_folder(PREFIX, tmp_path / "copy")
    assert_same_index(tmp_path / "copy", ref)
    read = energon_parts(EPath(s3_store.url(PREFIX)))
    assert {k: parts for k, (_, parts) in read.items()} == {
        k: parts for k, (_, parts) in energon_parts(ref).items()}
    assert len(read) == 12
    assert run_cli("validate", s3_store.url(PREFIX), "--deep").returncode == 0
    assert _scratch_left(tmp_path / "scratch") == []


def _shard_reads(records, prefix: str, status: str = "20[06]") -> list[str]:
    """The shards of `prefix` the S3 server sent bytes of, once per GET with that status (200:
    whole, 206: a ranged read), by its request log."""
    pattern = re.compile(rf'"GET /[^/ ]+/{re.escape(prefix)}/([^ ?]+\.tar) HTTP/[0-9.]+" '
                         rf'{status} ')
    plain = (re.sub(r"\x1b\[[0-9;]*m", "", r.getMessage()) for r in records)  # werkzeug colours 206
    return sorted(m[1] for line in plain if (m := pattern.search(line)))


def _whole_shard_reads(records, prefix: str) -> list[str]:
    return _shard_reads(records, prefix, "200")


def test_finalize_of_a_bucket_run_reads_no_shard_again(local_raw, s3_store, caplog, tmp_path):
    """A run into a bucket leaves each shard's index rows beside it, so finalize there reads
    no shard, and writes what `energon prepare` writes on a copy of the same objects; a shard
    replaced since (same size, other bytes) is read again."""
    import tarfile

    from tests.helpers.shards import assert_same_index, energon_prepare

    src, _ = local_raw
    run_cli(*_raw_args(src, s3_store.url(PREFIX), "--no-finalize", "--quiet",
                       "--scratch-dir", str(tmp_path / "scratch")))
    shard = s3_store.get(f"{PREFIX}/000001.tar")
    with tarfile.open(fileobj=io.BytesIO(shard)) as tar:
        txt = next(m for m in tar.getmembers() if m.name.endswith(".txt"))
    changed = bytearray(shard)
    changed[txt.offset_data] ^= 0x20  # the caption's first letter's case
    for name, data in _objects(s3_store).items():  # Energon's copy: the objects, no rows
        s3_store.put(f"theirs/{name}", data)

    finalize = ["finalize", s3_store.url(PREFIX), "--encoding", "raw", "--split", "0.5,0.5,0",
                "--scratch-dir", str(tmp_path / "scratch")]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        assert run_cli(*finalize).returncode == 0
    assert _whole_shard_reads(caplog.records, PREFIX) == []
    rows_used = Counter(_shard_reads(caplog.records, PREFIX))  # validate's first samples
    caplog.clear()
    ref = energon_prepare(s3_store.url("theirs"), "--split-ratio", "0.5,0.5,0")
    assert ref.returncode == 0, ref.stdout + ref.stderr
    s3_store.download_folder(PREFIX, tmp_path / "ours")
    s3_store.download_folder("theirs", tmp_path / "theirs")
    assert_same_index(tmp_path / "ours", tmp_path / "theirs")

    s3_store.put(f"{PREFIX}/000001.tar", bytes(changed))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="werkzeug"):
        assert run_cli(*finalize, "--force").returncode == 0
    # the replaced shard alone is read again: its headers walked, no shard downloaded whole
    assert _whole_shard_reads(caplog.records, PREFIX) == []
    again = Counter(_shard_reads(caplog.records, PREFIX))
    assert {name for name in again | rows_used if again[name] != rows_used[name]} == {"000001.tar"}
    assert again["000001.tar"] > rows_used["000001.tar"]


def _wait_for_markers(store, n: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if len(store.keys(f"{PREFIX}/.shardcook/progress/")) >= n:
            return
        time.sleep(0.01)


def test_killed_run_resumed_from_another_scratch_folder_is_byte_identical(local_raw, s3_store,
                                                                         tmp_path):
    src, ref = local_raw
    first, second = tmp_path / "machine-a", tmp_path / "machine-b"
    args = _raw_args(src, s3_store.url(PREFIX), "--no-finalize", "--quiet",
                     "--upload-queue", "1")
    proc = subprocess.Popen([sys.executable, "-m", "shardcook", *args, "--scratch-dir",
                             str(first)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _wait_for_markers(s3_store, 2, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    markers = s3_store.keys(f"{PREFIX}/.shardcook/progress/")
    assert 2 <= len(markers) < 6
    # every marker names a shard that is in the bucket, whole
    local = _files(ref)
    for key in markers:
        shard = json.loads(s3_store.get(key))["shard"]
        assert s3_store.get(f"{PREFIX}/{shard}") == local[shard]
    # the worst moment for one unit: its shard was uploaded but its marker never written
    s3_store.server.client().delete_object(Bucket=s3_store.bucket, Key=markers[-1])

    run_cli(*args, "--scratch-dir", str(second))
    remote = _objects(s3_store)
    report = json.loads(remote[".shardcook/report.json"])
    assert report["units"]["resumed"] == len(markers) - 1
    assert report["num_written"] == 12
    assert _shards_and_indexes(remote) == _shards_and_indexes(local)
    assert sorted(remote) == sorted(n for n in local if not n.startswith(FINALIZE_ONLY))
    assert _scratch_left(second) == []


def test_upload_queue_bounds_the_scratch_space(local_raw, s3_store, s3_server, tmp_path):
    """Uploads through a slow link: with --upload-queue 1 at most one shard waits while the
    next is written; with a longer queue the same run stages more (so the bound is what holds
    the first run back)."""
    from tests.helpers.tcpproxy import TcpProxy

    src, _ = local_raw
    proxy = TcpProxy(s3_server.port, bytes_per_second=50_000)
    try:  # a second profile on the same bucket, through the proxy
        slow = add_profile(s3_store, "slow" + s3_store.profile, endpoint_url=proxy.endpoint)
        staged = {}
        for queue in (1, 4):
            scratch = tmp_path / f"scratch{queue}"
            most = max(_watch(lambda s=scratch: sum(1 for _ in s.glob("*/*.tar")), run_cli,
                              *_raw_args(src, f"{slow}/q{queue}", "--no-finalize", "--quiet",
                                         "--scratch-dir", str(scratch), "--upload-queue",
                                         str(queue))), default=0)
            objects = _objects(s3_store, f"q{queue}", rows=True)
            report = json.loads(objects[".shardcook/report.json"])
            sizes = sorted(len(b) + len(objects[n + ".idx"]) +
                           len(objects[f".shardcook/index/{n}.sqlite"])
                           for n, b in objects.items() if n.endswith(".tar"))
            staged[queue] = most
            if queue == 1:
                assert most <= 2, f"{most} shards staged at once"
                assert sizes[-1] <= report["scratch_peak_bytes"] <= sizes[-1] + sizes[-2]
            assert _scratch_left(scratch) == []
        assert staged[4] > 2, "the link was not slow enough to test the bound"
    finally:
        proxy.stop()


def test_a_store_gone_mid_run_stops_it_in_one_sentence_and_a_resume_completes(
        local_raw, s3_store, s3_server, tmp_path):
    from shardcook.storage.bucket import TRIES

    from tests.helpers.tcpproxy import TcpProxy

    src, ref = local_raw
    proxy = TcpProxy(s3_server.port, bytes_per_second=100_000)
    try:
        slow = add_profile(s3_store, "gone" + s3_store.profile, endpoint_url=proxy.endpoint)
        proc = subprocess.Popen(
            [sys.executable, "-m", "shardcook", *_raw_args(
                src, f"{slow}/{PREFIX}", "--no-finalize", "--quiet", "--upload-queue", "1",
                "--scratch-dir", str(tmp_path / "a"))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_for_markers(s3_store, 1, proc)
        proxy.cut()
        out, err = proc.communicate(timeout=120)
    finally:
        proxy.stop()
    assert proc.returncode == 2, err
    last = err.strip().splitlines()[-1]  # the shard (or its unit's marker) and the store
    assert re.match(rf"error: (uploading \d{{6}}\.tar(\.idx)?|writing the marker of unit \d+ "
                    rf"\(\d{{6}}\.tar\)) to {re.escape(slow)}/{PREFIX} failed {TRIES} times \(",
                    last), last
    assert "Traceback" not in err and "DO-NOT-PRINT" not in err + out
    markers = s3_store.keys(f"{PREFIX}/.shardcook/progress/")
    assert 1 <= len(markers) < 6
    local = _files(ref)
    for key in markers:  # a marker only for a unit whose shard and index are in the bucket
        shard = json.loads(s3_store.get(key))["shard"]
        assert s3_store.get(f"{PREFIX}/{shard}") == local[shard]
        assert s3_store.get(f"{PREFIX}/{shard}.idx") == local[f"{shard}.idx"]
    assert _scratch_left(tmp_path / "a") == []
    # the store is back (here: through another profile on the same bucket); the same command
    # completes the run with the same bytes
    run_cli(*_raw_args(src, s3_store.url(PREFIX), "--no-finalize", "--quiet",
                       "--scratch-dir", str(tmp_path / "b")))
    remote = _objects(s3_store)
    assert json.loads(remote[".shardcook/report.json"])["units"]["resumed"] == len(markers)
    assert _shards_and_indexes(remote) == _shards_and_indexes(local)


def test_two_torchrun_nodes_sharing_no_folder_write_one_bucket(local_raw, s3_store, tmp_path):
    """Two c10d "nodes" on 127.0.0.1, each with its own scratch folder and no folder in
    common: the same objects as one process writes."""
    from tests.helpers.s3server import free_port

    src, ref = local_raw
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                "--nproc_per_node=1", "--rdzv_backend=c10d",
                f"--rdzv_endpoint=127.0.0.1:{free_port()}", "-m", "shardcook"]
    nodes = [subprocess.Popen(
        [*torchrun, *_raw_args(src, s3_store.url(PREFIX), "--no-finalize", "--quiet",
                               "--scratch-dir", str(tmp_path / f"node{n}"))],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for n in range(2)]
    results = [(p.wait(timeout=300), p.communicate()[1]) for p in nodes]
    assert [rc for rc, _ in results] == [0, 0], results
    remote, local = _objects(s3_store), _files(ref)
    assert json.loads(remote[".shardcook/report.json"])["world_size"] == 2
    assert sorted(remote) == sorted(n for n in local if not n.startswith(FINALIZE_ONLY))
    assert _shards_and_indexes(remote) == _shards_and_indexes(local)
    for n in range(2):
        assert _scratch_left(tmp_path / f"node{n}") == []


def test_a_two_node_run_killed_mid_way_is_completed_from_another_machine(
        local_raw, s3_store, s3_server, tmp_path):
    """Two torchrun "nodes" writing through a slow link are killed after the first units are
    recorded; one process elsewhere (its own scratch folder, none of theirs) completes the run:
    the same objects as an uninterrupted run."""
    from tests.helpers.s3server import free_port
    from tests.helpers.tcpproxy import TcpProxy

    src, ref = local_raw
    proxy = TcpProxy(s3_server.port, bytes_per_second=100_000)
    try:
        slow = add_profile(s3_store, "slow" + s3_store.profile, endpoint_url=proxy.endpoint)
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
                    "--nproc_per_node=1", "--rdzv_backend=c10d",
                    f"--rdzv_endpoint=127.0.0.1:{free_port()}", "-m", "shardcook"]
        nodes = [subprocess.Popen(
            [*torchrun, *_raw_args(src, f"{slow}/{PREFIX}", "--no-finalize", "--quiet",
                                   "--upload-queue", "1", "--scratch-dir",
                                   str(tmp_path / f"node{n}"))],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            for n in range(2)]
        _wait_for_markers(s3_store, 1, nodes[0])
        for node in nodes:  # the whole node: torchrun and its worker
            for pid in _process_tree(node.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            node.wait()
        assert all(n.returncode == -signal.SIGKILL for n in nodes), "the run ended first"
    finally:
        proxy.stop()
    done = len(s3_store.keys(f"{PREFIX}/.shardcook/progress/"))
    assert 1 <= done < 6
    run_cli(*_raw_args(src, s3_store.url(PREFIX), "--no-finalize", "--quiet", "--scratch-dir",
                       str(tmp_path / "elsewhere")))
    remote, local = _objects(s3_store), _files(ref)
    report = json.loads(remote[".shardcook/report.json"])
    # what was recorded is kept (a marker already on its way through the proxy may land after
    # the kill), the rest is redone
    assert done <= report["units"]["resumed"] < 6
    assert report["num_written"] == 12
    assert _shards_and_indexes(remote) == _shards_and_indexes(local)
    assert sorted(remote) == sorted(n for n in local if not n.startswith(FINALIZE_ONLY))
    assert _scratch_left(tmp_path / "elsewhere") == []


def _process_tree(pid: int) -> list[int]:
    """`pid` and every process started below it (torchrun starts its workers in sessions of
    their own, so killing its process group leaves them running)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo += children.get(tree[-1], [])
    return tree


def _watch(look, run, *args: str) -> list:
    """Runs `run(*args)` while calling `look()` every 2 ms; returns what it saw."""
    seen, done = [], threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.append(look())
            time.sleep(0.002)

    t = threading.Thread(target=poll, daemon=True)
    t.start()
    try:
        run(*args)
    finally:
        done.set()
        t.join()
    return seen


def test_finalize_of_a_bucket_run_works_under_the_scratch_dir(local_raw, s3_store, tmp_path):
    """A bucket run's finalize makes its view of the dataset (the small files, shards fetched
    a few at a time) under --scratch-dir, where the run staged its shards, not in the system's
    temporary folder."""
    src, _ = local_raw
    scratch = tmp_path / "scratch"
    seen = _watch(lambda: [p.name for p in scratch.glob("shardcook-view-*")], run_cli,
                  *_raw_args(src, s3_store.url(PREFIX), "--quiet", "--scratch-dir", str(scratch)))
    assert any(seen), "finalize made no view under --scratch-dir"
    assert _scratch_left(scratch) == []


def test_overwrite_in_a_bucket_deletes_only_what_the_run_recorded(local_raw, s3_store,
                                                                   tmp_path):
    src, _ = local_raw
    url = s3_store.url(PREFIX)
    run_cli(*_raw_args(src, url, "--no-finalize", "--quiet"))
    s3_store.put(f"{PREFIX}/notes.txt", b"mine")
    s3_store.put(f"{PREFIX}/.nv-meta/dataset.yaml", b"finalize's")
    s3_store.put(f"{PREFIX}/.nv-meta/mine.yaml", b"mine too")
    s3_store.put(f"{PREFIX}/000099.tar", b"not from this run")
    before = _objects(s3_store)

    # a shard-like name no record names: refused, naming it, nothing deleted
    r = run_cli(*_raw_args(src, url, "--no-finalize", "--quiet", "--image-size", "32",
                           "--overwrite"), check=False)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "000099.tar" in r.stderr and "Traceback" not in r.stderr
    assert _objects(s3_store) == before
    # without it, --overwrite deletes the recorded shards and shardcook's files, keeps the rest
    s3_store.server.client().delete_object(Bucket=s3_store.bucket, Key=f"{PREFIX}/000099.tar")
    run_cli(*_raw_args(src, url, "--no-finalize", "--quiet", "--image-size", "32",
                       "--overwrite"))
    after = _objects(s3_store)
    assert after["notes.txt"] == b"mine" and after[".nv-meta/mine.yaml"] == b"mine too"
    assert ".nv-meta/dataset.yaml" not in after
    assert sorted(n for n in after if n.endswith(".tar")) == sorted(
        n for n in before if n.endswith(".tar") and n != "000099.tar")
    for name in after:
        if name.endswith(".tar"):  # the new run's shards (64 px -> 32 px)
            assert after[name] != before[name]
    assert json.loads(after[".shardcook/manifest.json"])["config"]["image"]["image_size"] == 32
    # a foreign object without --overwrite: the folder is refused as not shardcook's
    s3_store.put("other/readme.txt", b"x")
    r = run_cli(*_raw_args(src, s3_store.url("other"), "--quiet"), check=False)
    assert r.returncode == 2 and "not a shardcook dataset" in r.stderr
    assert s3_store.keys("other/") == ["other/readme.txt"]


@pytest.mark.parametrize(("url", "words"), [
    ("ftp://host/x", "ftp://"),
    ("msc://nosuchprofile/x", "profile 'nosuchprofile'"),
    ("s3://no-such-bucket-here/x", "bucket exists"),
    ("missing-bucket-profile", "bucket exists"),
    ("scratch-under-a-file", "--scratch-dir"),
])
def test_a_store_that_cannot_work_is_one_sentence_before_anything(local_raw, s3_store, tmp_path,
                                                                  url, words):
    src, _ = local_raw
    work = tmp_path / "work"
    work.mkdir()
    scratch = str(work / "scratch")
    if url == "missing-bucket-profile":
        url = add_profile(s3_store, "nobucket" + s3_store.profile,
                       base_path="no-such-bucket-either") + "/x"
    if url == "scratch-under-a-file":
        url, scratch = s3_store.url("x"), str(tmp_path / "file" / "scratch")
        (tmp_path / "file").write_bytes(b"")
    r = subprocess.run([sys.executable, "-m", "shardcook", *_raw_args(
        src, url, "--scratch-dir", scratch)], capture_output=True, text=True,
        cwd=work, timeout=120, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    assert words in r.stderr and "Traceback" not in r.stderr
    assert "DO-NOT-PRINT" not in r.stderr + r.stdout
    assert s3_store.keys() == []
    assert list(work.iterdir()) == []  # no local folder named like the URL, no scratch


def test_overwrite_rules_on_an_object_listing():
    from shardcook.errors import ConfigError
    from shardcook.output.overwrite import plan_object_deletions

    names = [".shardcook/manifest.json", ".shardcook/progress/000000.json", "000000.tar",
             "000000.tar.idx", ".nv-meta/split.yaml", ".nv-meta/notes.txt", "README.md",
             "empty_encodings/t5_empty.npy", "empty_encodings/mine.npy",
             ".shardcook/../../outside.txt", ".shardcook//x"]
    plan = plan_object_deletions("msc://p/d", names, {"000000.tar"})
    assert sorted(plan.remove) == [".nv-meta/split.yaml", ".shardcook/manifest.json",
                                   ".shardcook/progress/000000.json", "000000.tar",
                                   "000000.tar.idx", "empty_encodings/t5_empty.npy"]
    assert plan.keep == [".nv-meta/notes.txt", ".shardcook/../../outside.txt", ".shardcook//x",
                         "README.md", "empty_encodings/mine.npy"]  # what escapes is never deleted
    for extra, words in (("000001.tar.idx", "holds 000001.tar.idx, named like"),
                         ("train-shard-000000.tar", "holds train-shard-000000.tar, named like"),
                         ("sub/x.tar", "holds 'msc://p/d/sub/x.tar', a tar shardcook did not")):
        with pytest.raises(ConfigError, match=re.escape(words)):
            plan_object_deletions("msc://p/d", [*names, extra], {"000000.tar"})


def test_encode_into_a_bucket(tiny_flux, s3_store, tmp_path):
    from tests.helpers.encode import encode_args, run_in_process

    src = make_folder(tmp_path / "in", 5, photos=2)
    ref = tmp_path / "ref"
    run_in_process(encode_args(tiny_flux, src, ref, "--shard-size", "2", "--no-finalize"))
    run_in_process(encode_args(tiny_flux, src, s3_store.url(PREFIX), "--shard-size", "2",
                               "--scratch-dir", str(tmp_path / "scratch")))
    local, remote = _indexed(ref), _objects(s3_store)
    assert sorted(n for n in remote if not n.startswith(FINALIZE_ONLY)) == sorted(local)
    assert len([n for n in remote if n.endswith(".tar")]) == 3
    for name, data in local.items():  # shards, their .tar.idx, empty_encodings/, markers
        if not name.startswith((".shardcook/manifest", ".shardcook/report")):
            assert remote[name] == data, name
    assert _scratch_left(tmp_path / "scratch") == []
    # finalized in the bucket: our loader reads every sample from there
    from shardcook.energon import get_diffusion_loader

    with get_diffusion_loader(s3_store.url(PREFIX), batch_size=5, num_workers=0,
                              repeat=False) as w:
        keys = [k for b in w.loader for k in b.__key__]
    assert len(keys) == len(set(keys)) == 5


def test_chatml_into_a_bucket(s3_store, tmp_path):
    from tests.helpers.chatml import turns, write_images, write_jsonl

    names = write_images(tmp_path / "in" / "images", 4)
    jsonl = write_jsonl(tmp_path / "in" / "data.jsonl", [
        {"id": f"s{i}", "image": f"images/{names[i % 4]}", "conversations": turns(1)}
        for i in range(10)])
    args = ["chatml", "--input", str(jsonl), "--shard-size", "3", "--val-fraction", "0.3",
            "--quiet", "--no-finalize"]
    ref = tmp_path / "ref"
    run_cli(*args, "--output-dir", str(ref))
    run_cli(*args, "--output-dir", s3_store.url(PREFIX), "--scratch-dir",
            str(tmp_path / "scratch"))
    local, remote = _indexed(ref), _objects(s3_store)
    assert sorted(remote) == sorted(local)
    assert {n.split("-shard-")[0] for n in remote if n.endswith(".tar")} == {"train", "val"}
    assert _shards_and_indexes(remote) == _shards_and_indexes(local)


def test_a_run_into_a_bucket_resolves_its_url_once(local_raw, s3_store, tmp_path, monkeypatch):
    """The output URL is parsed, and its client resolved, once, when the config is resolved:
    the run folder, every store call of the run and finalize take that value."""
    from shardcook.config import resolve
    from shardcook.storage import bucket

    from tests.helpers.raw import run_raw

    resolved: list[str] = []
    real = bucket._client
    monkeypatch.setattr(bucket, "_client",
                        lambda url, what: resolved.append(url) or real(url, what))
    src, ref = local_raw
    values = {"input_dir": str(src), "output_dir": s3_store.url(PREFIX), "shard_size": 2,
              "image_size": 64, "workers": 1, "quiet": True,
              "scratch_dir": str(tmp_path / "scratch")}
    report = run_raw(resolve(values, set(values)))
    assert report is not None and report["num_written"] == 12
    assert sorted(_objects(s3_store)) == sorted(_files(ref))  # finalized there
    assert resolved == [s3_store.url(PREFIX)]
