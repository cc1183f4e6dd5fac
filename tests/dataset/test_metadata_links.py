"""A dataset whose `.nv-meta` or `.shardcook` (or a file in them) is a symbolic link into another
dataset is refused by finalize, with or without --force, and by the Python API, before anything
is written: every file of both datasets keeps its bytes."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from shardcook import DatasetError, build_index, finalize

from tests.helpers.dataset import cli, one_error_line, write_dataset
from tests.helpers.raw import make_folder, run_cli

META, OURS = ".nv-meta", ".shardcook"


def hashes(*roots: Path) -> dict[str, str]:
    """Every entry under `roots`: a file's sha256, a link's target (links are not followed)."""
    found = {}
    for root in roots:
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                path = Path(folder, name)
                found[str(path)] = (f"-> {os.readlink(path)}" if path.is_symlink()
                                    else hashlib.sha256(path.read_bytes()).hexdigest()
                                    if path.is_file() else "folder")
    return found


def link_folder(ds: Path, name: str) -> Path:
    shutil.rmtree(ds / name, ignore_errors=True)
    (ds / name).symlink_to(Path("..", "victim", name))
    return ds / name


def link_file(ds: Path, name: str) -> Path:
    (ds / name).unlink()
    (ds / name).symlink_to(Path("..", "..", "victim", name))
    return ds / name


LINKS = {
    "nv-meta folder": lambda ds: link_folder(ds, META),
    "shardcook folder": lambda ds: link_folder(ds, OURS),
    "split.yaml": lambda ds: link_file(ds, f"{META}/split.yaml"),
    "finalize.json": lambda ds: link_file(ds, f"{OURS}/finalize.json"),
}

RUNS = {
    "finalize": lambda ds: cli("finalize", ds),
    "finalize --force": lambda ds: cli("finalize", "--force", ds, "--split", "0.5,0.5,0"),
    "shardcook.finalize": lambda ds: finalize(ds, force=True),
    "shardcook.build_index": lambda ds: build_index(ds, force=True),
}


@pytest.mark.parametrize("run", sorted(RUNS))
@pytest.mark.parametrize("link", sorted(LINKS))
def test_metadata_behind_a_link_is_refused_and_nothing_changes(tmp_path, link, run):
    victim = write_dataset(tmp_path / "victim", split=(0.5, 0.5, 0))
    ds = write_dataset(tmp_path / "ds", n_shards=3)
    linked = LINKS[link](ds)
    before = hashes(victim, ds)

    expected = (f"{linked} is a symbolic link (to {os.readlink(linked)}), and the dataset's "
                "metadata is never written through a link")
    if run.startswith("shardcook."):
        with pytest.raises(DatasetError, match="symbolic link") as refused:
            RUNS[run](ds)
        assert str(refused.value).startswith(expected)
    else:
        r = RUNS[run](ds)
        assert r.code == 2
        assert one_error_line(r).startswith(f"error: {expected}")
    assert hashes(victim, ds) == before


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_run_into_a_folder_whose_records_are_a_link_is_refused(tmp_path, overwrite):
    victim = write_dataset(tmp_path / "victim", split=(0.5, 0.5, 0))
    ds = tmp_path / "ds"
    ds.mkdir()
    linked = link_folder(ds, OURS)
    inputs = make_folder(tmp_path / "inputs", 2, photos=0)
    before = hashes(victim, ds)

    r = run_cli("raw", "--input-dir", inputs, "--output-dir", ds, "--quiet",
                *(["--overwrite"] if overwrite else []), check=False)
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: {linked} is a symbolic link"), r.stderr
    assert hashes(victim, ds) == before
