"""A finalize killed half way (SIGKILL, in a process of its own) leaves its undo folder and maybe
a write's temporary file: validate names the interrupted finalize and what to run, and the next
finalize puts the old metadata back first, then finalizes as asked, leaving neither behind."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from shardcook import validate

from tests.helpers.dataset import cli, one_error_line, write_dataset

META, OURS = ".nv-meta", ".shardcook"

#: A finalize that changes the split and is killed when it renames `KILL_AT` into place (after
#: the writes before it, with the temporary file of that one still there).
KILLED_FINALIZE = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from shardcook import finalize

    root, kill_at = Path(sys.argv[1]), sys.argv[2]
    replace = os.replace

    def replace_or_die(src, dst, *args, **kwargs):
        if Path(dst).name == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return replace(src, dst, *args, **kwargs)

    os.replace = replace_or_die
    finalize(root, split=(1, 0, 0), force=True)
""")


def files(root: Path) -> dict[str, str]:
    """Every file under `root` (dot folders too), by path, with its sha256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def killed_finalize(root: Path, kill_at: str) -> None:
    r = subprocess.run([sys.executable, "-c", KILLED_FINALIZE, str(root), kill_at],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == -9, r.stderr


@pytest.mark.parametrize("kill_at", ["index.uuid", "split.yaml", "finalize.json"])
def test_the_next_finalize_puts_back_what_a_killed_one_half_wrote(tmp_path, kill_at):
    ds = write_dataset(tmp_path / "ds", n_shards=4, split=(0.5, 0.5, 0))
    before = files(ds)
    killed_finalize(ds, kill_at)
    [aside] = ds.glob(".shardcook-undo-*")
    assert {k: v for k, v in files(ds).items() if not k.startswith(aside.name)} != before

    report = validate(ds)
    assert report.problems == [
        (f"{aside} was left by a finalize that was interrupted (or is still running), so the "
        "metadata may be half written; run that finalize again (`shardcook finalize --force "
        f"{ds}` with its options), which first puts the old metadata back")]
    assert cli("validate", ds).code == 1

    r = cli("finalize", "--force", ds)
    assert r.code == 0, r.stdout + r.stderr
    after = files(ds)
    assert not list(ds.glob(".shardcook-undo-*"))
    assert not [name for name in after if ".tmp" in name]
    # the split the interrupted finalize never finished recording is not half applied
    assert {k: v for k, v in after.items() if k != f"{META}/index.uuid"} == {
        k: v for k, v in before.items() if k != f"{META}/index.uuid"}
    assert validate(ds).ok


def test_a_finalize_killed_before_it_wrote_anything_leaves_nothing_to_put_back(tmp_path):
    ds = write_dataset(tmp_path / "ds", n_shards=2)
    before = files(ds)
    (ds / ".shardcook-undo-x1y2").mkdir()  # killed while keeping: no record of what it kept
    (ds / ".shardcook-undo-x1y2" / "0").mkdir()
    (ds / META / ".split.yaml.tmp999999999").write_text("half")  # no such process

    r = cli("finalize", "--force", ds)
    assert r.code == 0, r.stdout + r.stderr
    assert not list(ds.glob(".shardcook-undo-*"))
    assert not (ds / META / ".split.yaml.tmp999999999").exists()
    assert {k: v for k, v in files(ds).items() if k != f"{META}/index.uuid"} == {
        k: v for k, v in before.items() if k != f"{META}/index.uuid"}


@pytest.mark.parametrize("record", ['[["../victim", false]]',
                                    '[["sub/../../victim.tar.idx", false]]', "not json"])
def test_an_undo_record_naming_other_files_puts_nothing_back(tmp_path, record):
    ds = write_dataset(tmp_path / "ds", n_shards=2)
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "data.bin").write_bytes(b"keep me")
    (tmp_path / "victim.tar.idx").write_bytes(b"keep me too")
    aside = ds / ".shardcook-undo-evil"
    aside.mkdir()
    (aside / "kept.json").write_text(record)
    before = files(tmp_path)

    r = cli("finalize", "--force", ds)
    assert r.code == 2
    assert one_error_line(r).startswith(
        f"error: {aside} is left by a finalize that was interrupted, but its record kept.json is "
        "damaged or names files finalize never writes, so nothing is put back from it")
    assert files(tmp_path) == before
