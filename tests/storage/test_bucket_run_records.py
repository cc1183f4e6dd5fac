"""A run's records in object storage, on the real S3 server: a store that stops answering reads
after every unit was recorded is named as unreachable, never counted as missing work, by
`shardcook status` and by a rerun; an output URL whose last segment is longer than a local file
name may be works end to end (finalize's local view is named otherwise)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.raw import make_folder, run_cli
from tests.helpers.s3server import add_profile
from tests.helpers.tcpproxy import TcpProxy

PREFIX = "data/set"


def _marker_read(cut: threading.Event) -> Callable[[bytes], bool]:
    """Once `cut` is set, a request for a unit marker (`GET .../.shardcook/progress/...`): a
    store that still lists but no longer answers those reads."""
    return lambda line: (cut.is_set() and line.startswith(b"GET ")
                         and b"/.shardcook/progress/" in line)


def _raw_args(src: Path, out: str, *extra: str) -> list[str]:
    return ["raw", "--input-dir", str(src), "--output-dir", out, "--shard-size", "2",
            "--image-size", "32", "--workers", "1", "--quiet", *extra]


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("bucket_records") / "in", 14, photos=0)


def test_a_store_that_stops_answering_reads_is_named_not_missing_work(src, s3_store,
                                                                      s3_server, tmp_path):
    """Every unit recorded, then the store stops answering the markers' reads: status and the
    same command each say, in one sentence (exit 2), that the store cannot be reached; neither
    counts the units as missing (status said "7 of 7 units are missing", the run redid them
    and said "7 work unit(s) are not finished")."""
    cut = threading.Event()
    proxy = TcpProxy(s3_server.port, drop=_marker_read(cut))
    try:
        url = add_profile(s3_store, "cut" + s3_store.profile, endpoint_url=proxy.endpoint)
        url = f"{url}/{PREFIX}"
        env = {"AWS_MAX_ATTEMPTS": "1"}  # the client's own retries: one try each
        args = _raw_args(src, url, "--no-finalize", "--scratch-dir", str(tmp_path / "s"))
        run_cli(*args, env_extra=env)
        shards = {k: s3_store.get(k) for k in s3_store.keys(f"{PREFIX}/") if k.endswith(".tar")}
        assert len(shards) == 7
        cut.set()
        for r in (run_cli("status", url, env_extra=env, check=False),
                  run_cli(*args, env_extra=env, check=False)):
            assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
            last = r.stderr.strip().splitlines()[-1]  # after the retries' warnings
            assert "cannot be reached: reading .shardcook/progress/" in last, last
            assert "missing" not in r.stdout and "not finished" not in last
            assert "DO-NOT-PRINT" not in r.stdout + r.stderr
        assert {k: s3_store.get(k) for k in shards} == shards  # nothing redone
    finally:
        proxy.stop()
    # the store answers again (another profile on the bucket): the same command completes it
    direct = s3_store.url(PREFIX)
    run_cli(*_raw_args(src, direct, "--no-finalize", "--scratch-dir", str(tmp_path / "s")))
    assert run_cli("status", direct, check=False).returncode == 0
    assert {k: s3_store.get(k) for k in shards} == shards


def test_an_output_url_with_a_segment_longer_than_a_file_name(src, s3_store, tmp_path):
    """A last segment of 300 bytes (an object key may have 1,024; a local file name 255):
    the run writes, finalizes and validates in the bucket (finalize's local view was named
    after the segment, and failed with "File name too long" after the shards were uploaded)."""
    url = s3_store.url(f"long/{'x' * 300}")
    r = run_cli(*_raw_args(src, url, "--scratch-dir", str(tmp_path / "s")), check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    status = run_cli("status", url, "--json", check=False)
    assert status.returncode == 0 and json.loads(status.stdout)["complete"], status.stdout
    assert run_cli("validate", url, check=False).returncode == 0
    assert any(k.endswith("/.nv-meta/dataset.yaml") for k in s3_store.keys("long/"))
