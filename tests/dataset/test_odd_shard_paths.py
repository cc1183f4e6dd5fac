"""A path whose name makes Energon read it as a shard but that cannot be one (a folder, a FIFO, a
link to /dev/zero, a name with braces) is named for what it is, with what to do about it, by both
validate and finalize; neither opens a FIFO or a device (each runs in a subprocess under a memory
limit and a timeout, so a regression fails here instead of hanging or eating the machine)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
from shardcook import ShardWriter, finalize, validate

from tests.helpers.dataset import raw_parts, write_dataset

#: Enough address space to import torch, far too little to read /dev/zero for long.
MEMORY_LIMIT = 5 << 30


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def shardcook(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", *map(str, args)],
                          capture_output=True, text=True, timeout=120, preexec_fn=limited,
                          check=False)


def make_folder(d):
    (d / "x.tar").mkdir()
    return d / "x.tar", "is a folder"


def make_fifo(d):
    os.mkfifo(d / "zz.tar")
    return d / "zz.tar", "is a FIFO (named pipe)"


def make_device_link(d):
    os.symlink("/dev/zero", d / "zz.tar")
    return d / "zz.tar", "is a link to /dev/zero, a device"


def make_fifo_in_place_of_a_shard(d):
    (d / "000001.tar").unlink()
    os.mkfifo(d / "000001.tar")
    return d / "000001.tar", "is a FIFO (named pipe)"


ODD = {"folder": make_folder, "fifo": make_fifo, "device link": make_device_link,
       "fifo in place of a shard": make_fifo_in_place_of_a_shard}


def metadata_bytes(d):
    return {p: p.read_bytes() for p in sorted(d.glob(".*/*")) + sorted(d.glob("*.idx"))
            if p.is_file()}


@pytest.mark.parametrize("kind", list(ODD))
def test_a_path_that_is_no_shard_is_named_and_never_opened(tmp_path, kind):
    d = write_dataset(tmp_path / "ds")
    path, what = ODD[kind](d)
    sentence = (f"{path} {what}, not a shard, yet its name makes Energon read it as one; remove "
                "it or rename it (or leave it out with --exclude)")
    before = metadata_bytes(d)
    checked = shardcook("validate", d)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert f"problem: {sentence}\n" in checked.stdout
    assert "to index it" not in checked.stdout
    refused = shardcook("finalize", d, "--force")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr == f"error: {sentence}\n"
    assert metadata_bytes(d) == before
    # doing what the sentence says makes the dataset whole again
    if path.is_dir() and not path.is_symlink():
        path.rmdir()
    else:
        path.unlink()
    if kind == "fifo in place of a shard":
        assert validate(d).problems == [f"shard {path.name} is listed in .info.json but missing"]
        finalize(d, force=True)
    assert validate(d).ok


def test_a_shard_name_with_braces_is_told_to_be_renamed(tmp_path):
    d = write_dataset(tmp_path / "ds")
    with ShardWriter(tmp_path / "more") as w:
        w.write("0000000099", raw_parts(99))
    (tmp_path / "more" / "000000.tar").rename(d / "c{1,2}.tar")
    sentence = ("shard 'c{1,2}.tar' has a brace or backslash in its name, which Energon's "
                "split.yaml would brace-expand into other names; rename it (e.g. to 'c_1_2_.tar')")
    assert validate(d).problems == [sentence]
    before = metadata_bytes(d)
    refused = shardcook("finalize", d, "--force")
    assert (refused.returncode, refused.stderr) == (2, f"error: {sentence}\n")
    assert metadata_bytes(d) == before
    (d / "c{1,2}.tar").rename(d / "c_1_2_.tar")
    assert finalize(d, force=True).validation.ok


@pytest.mark.parametrize("make", [os.mkfifo, lambda path: os.symlink("/dev/zero", path)],
                         ids=["fifo", "device link"])
def test_preview_passes_over_a_path_that_is_no_shard(tmp_path, make):
    d = write_dataset(tmp_path / "ds")
    make(d / "0.tar")  # first in name order
    r = shardcook("preview", d, "--out", tmp_path / "sheet.png", "--count", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "sheet.png").stat().st_size > 0
