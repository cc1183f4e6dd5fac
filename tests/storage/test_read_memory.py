"""`files.read_regular_file`, how every reader of a user's file (a local store's included) reads
it, asks for memory by the file's size, not by its 1 GiB cap: a 9-byte file reads under a
virtual-memory limit (`ulimit -v`) that a 1 GiB buffer would break, and a file larger than its
stat size (/proc's report 0) still reads whole."""

from __future__ import annotations

import resource
import subprocess
import sys

from shardcook.files import read_regular_file

#: Far above what the interpreter and shardcook.files take, far below 1 GiB more.
LIMIT = 768 << 20


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def test_a_small_file_reads_under_a_virtual_memory_limit(tmp_path):
    small = tmp_path / "ledger.json"
    small.write_text('{"a": 1}\n')
    code = ("import sys; from shardcook.files import read_regular_file; "
            "sys.stdout.write(read_regular_file(sys.argv[1]).decode())")
    r = subprocess.run([sys.executable, "-c", code, str(small)], preexec_fn=_limited,
                       capture_output=True, text=True, timeout=120, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, '{"a": 1}\n', "")


def test_a_file_larger_than_its_stat_size_reads_whole():
    with open("/proc/self/status", "rb") as f:
        expected = f.read()
    data = read_regular_file("/proc/self/status")
    assert len(expected) > 100 and data.startswith(b"Name:\t") and b"VmPeak" in data
