"""Split patterns are regular expressions, as in Energon, where a glob-looking one
(`train:*.tar`) silently selects nothing: finalize refuses a pattern that looks like a glob and
selects other shards as a regex, and one that selects no shard, in one sentence naming the
shards it could have meant, with nothing written."""

from __future__ import annotations

import pytest
from shardcook import ShardWriter

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.files import tree_state


@pytest.fixture
def folder(tmp_path):
    """shard-000000.tar, shard-000001.tar and val/shard-000000.tar."""
    for where in (tmp_path, tmp_path / "val"):
        with ShardWriter(where, shard_size=1, prefix="shard-") as w:
            for i in range(2 if where == tmp_path else 1):
                w.write(f"{where.name}-{i:04d}", {"txt": b"caption"})
    return tmp_path


def refused(folder, *patterns: str) -> str:
    before = tree_state(folder)
    args = [a for p in patterns for a in ("--split-parts", p)]
    r = cli("finalize", folder, "--encoding", "generic", *args)
    assert r.code == 2, r.stdout + r.stderr
    assert tree_state(folder) == before
    return one_error_line(r)


@pytest.mark.parametrize(("pattern", "reads", "regex"), [
    ("*.tar", "it is not valid", ".*[.]tar$"),
    ("shard-*.tar", "it selects no shard", "shard-.*[.]tar$"),
    ("shard-00000?.tar", "it selects no shard", "shard-00000.[.]tar$"),
])
def test_a_glob_is_refused_naming_what_it_would_select(folder, pattern, reads, regex):
    glob_selects = ("'shard-000000.tar', 'shard-000001.tar', 'val/shard-000000.tar'"
                    if pattern == "*.tar" else "'shard-000000.tar', 'shard-000001.tar'")
    assert refused(folder, f"train:{pattern}") == (
        f"error: split pattern train:{pattern!r} looks like a glob, which would select "
        f"{glob_selects}, but split patterns are regular expressions (as in Energon), and as one "
        f"{reads}; write it as a regex, e.g. train:{regex!r}")


def test_a_glob_that_selects_other_shards_as_a_regex_is_refused(folder):
    line = refused(folder, "train:s*", "val:val/.*")  # as a regex, `s*` matches every path
    assert "looks like a glob, which would select 'shard-000000.tar', 'shard-000001.tar'" in line
    assert "and as one it selects 'shard-000000.tar', 'shard-000001.tar', 'val/shard" in line


def test_the_suggested_regex_selects_what_the_glob_meant(folder):
    r = cli("finalize", folder, "--encoding", "generic", "--split-parts", "train:shard-.*[.]tar$",
            "--split-parts", "val:val/.*")
    assert r.code == 0, r.stdout + r.stderr
    assert "train: 2 shards" in r.stdout and "val: 1 shards" in r.stdout


def test_a_glob_meaning_what_its_regex_selects_is_accepted(folder):
    r = cli("finalize", folder, "--encoding", "generic", "--split-parts", "train:shard-.*",
            "--split-parts", "val:val/*")
    assert r.code == 0, r.stdout + r.stderr
    assert "val: 1 shards" in r.stdout


def test_a_pattern_found_later_in_the_path_is_named(folder):
    assert refused(folder, "train:000001.*") == (
        "error: split pattern train:'000001.*' matches none of the 3 shards, as patterns are "
        "matched from the start of the shard path after brace expansion, which also removes "
        "backslashes; searched anywhere in the path it finds 'shard-000001.tar' (put '.*' "
        "before it to select those)")


def test_a_pattern_found_nowhere_names_the_nearest_shards(folder):
    line = refused(folder, "train:shard-.*", "val:vla/.*")
    assert line.startswith("error: split pattern val:'vla/.*' matches none of the 3 shards")
    assert "; the nearest shard names are 'val/shard-000000.tar', 'shard-00000" in line
