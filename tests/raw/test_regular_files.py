"""Sources read only regular files: a folder, FIFO, device or NUL-byte path is skipped with its
reason in report.json (never a hang, an out-of-memory kill or the end of the run)."""

from __future__ import annotations

import errno
import os

import pytest
from shardcook.files import read_regular_file

from tests.helpers.chatml import turns, write_images, write_jsonl
from tests.helpers.raw import report, run_cli


@pytest.fixture
def odd_paths(tmp_path):
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.jpg"
    folder.mkdir()
    return {"fifo": str(fifo), "folder": str(folder), "device": "/dev/zero",
            "nul": str(tmp_path / "a\0b.jpg")}


@pytest.mark.parametrize("kind, reason", [
    ("fifo", "not a regular file (a FIFO)"),
    ("folder", "not a regular file (a folder)"),
    ("device", "not a regular file (a device)"),
    ("nul", "the path contains a NUL byte"),
])
def test_read_regular_file_refuses_what_is_not_a_file(odd_paths, kind, reason):
    with pytest.raises(OSError) as e:
        read_regular_file(odd_paths[kind])
    assert e.value.strerror == reason


def test_read_regular_file_bounds_the_size(tmp_path):
    p = tmp_path / "big.jpg"
    p.write_bytes(b"x" * 1000)
    assert read_regular_file(p, limit=1000) == b"x" * 1000
    with pytest.raises(OSError) as e:
        read_regular_file(p, limit=999)
    assert e.value.errno == errno.EFBIG


def test_chatml_skips_odd_image_paths_with_their_reason(tmp_path, odd_paths):
    names = write_images(tmp_path / "imgs", 2, photos=0)
    records = [{"image": f"imgs/{names[0]}", "conversation": turns(1)}]
    records += [{"image": odd_paths[k], "conversation": turns(1)}
                for k in ("fifo", "folder", "device", "nul")]
    records.append({"image": f"imgs/{names[1]}", "conversation": turns(1)})
    src = write_jsonl(tmp_path / "data.jsonl", records)
    out = tmp_path / "out"
    r = run_cli("chatml", "--input", str(src), "--output-dir", str(out), "--val-fraction", "0",
                "--quiet")
    assert "Traceback" not in r.stderr
    rep = report(out)
    assert rep["num_written"] == 2
    details = sorted(s.get("detail", "") for s in rep["skipped"])
    assert details == sorted(["not a regular file (a FIFO)", "not a regular file (a folder)",
                              "not a regular file (a device)", "the path contains a NUL byte"])
    assert {s["reason"] for s in rep["skipped"]} == {"unreadable_image"}
