"""A dataset in a folder whose name holds `?`, `#` and `%` (characters a SQLite URI reads as a
query, a fragment and an escape) is written, finalized, validated and read through Energon like
any other, and nothing appears in the working folder."""

from __future__ import annotations

import subprocess
import sys

from shardcook.energon import get_diffusion_loader

from tests.helpers.raw import make_folder

ODD = "a?b#c%d"


def shardcook(cwd, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300, check=False)


def test_a_folder_named_with_uri_characters_makes_a_whole_dataset(tmp_path):
    inputs = make_folder(tmp_path / "inputs", 6, photos=0)
    work = tmp_path / "work"
    (work / ODD).mkdir(parents=True)
    out = f"{ODD}/ds"  # relative, as a user in `work` types it

    raw = shardcook(work, "raw", "--input-dir", inputs, "--output-dir", out, "--shard-size", 2,
                    "--split", "2,1,0", "--quiet")
    assert raw.returncode == 0, raw.stderr
    again = shardcook(work, "finalize", "--force", out)
    assert again.returncode == 0, again.stderr
    check = shardcook(work, "validate", out)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "ok: the dataset is whole" in check.stdout
    assert sorted(p.name for p in work.iterdir()) == [ODD]  # no stray `a` from a misread URI

    loader = get_diffusion_loader(work / out, batch_size=2, num_workers=0, repeat=False,
                                  batch_drop_last=False, split="train")
    keys = [key for _ in range(2) for key in next(loader).__key__]  # one pass: 4 samples
    assert sorted(keys) == [f"{i:010d}" for i in range(4)]
