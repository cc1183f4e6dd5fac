"""What the dataset commands advise is what mends the dataset: a cut shard in `report`'s page,
an index.sqlite that is no database in `info`, a JSONL dataset given to `report`."""

from __future__ import annotations

import html

import pytest
from shardcook import ConfigError, ShardError, finalize, validate
from shardcook.dataset import info
from shardcook.htmlreport import make_report

from tests.helpers.dataset import cli, one_error_line, write_dataset


def test_the_report_on_a_cut_shard_advises_what_mends_it(tmp_path):
    d = write_dataset(tmp_path / "ds", n_shards=2, per_shard=3)
    shard = d / "000001.tar"
    shard.write_bytes(shard.read_bytes()[:-3000])
    page = html.unescape(make_report(d))
    size = shard.stat().st_size
    assert f"000001.tar: the shard is {size:,} bytes but its index ends at byte " in page
    assert ("it was cut short (delete it and rerun the command that wrote the dataset, which "
            "writes only what is missing, or leave it out with `shardcook finalize --force "
            "--exclude '^000001\\.tar$'`)") in page
    with pytest.raises(ShardError):  # what the page advised before: refused for a cut shard
        finalize(d, force=True)
    r = cli("finalize", "--force", "--exclude", "^000001\\.tar$", d)
    assert r.code == 0, r.stdout + r.stderr
    assert validate(d).ok


def test_info_says_an_index_sqlite_that_is_no_database_is_none(tmp_path):
    d = write_dataset(tmp_path / "ds")
    (d / ".nv-meta" / "index.sqlite").write_bytes(b"garbage, not SQLite " * 10)
    said = (f".nv-meta/index.sqlite is not an SQLite database (or cannot be read); run "
            f"`shardcook finalize --force {d}` to write it anew")
    r = cli("info", d)
    assert r.code == 0 and f"index:       {said}" in r.stdout.splitlines(), r.stdout
    assert "no sample tables" not in r.stdout
    assert info(d).index_problem == said
    report = validate(d)  # a problem, without the warning of --no-sample-tables
    assert [p for p in report.problems if "is not a readable SQLite index" in p]
    assert not [w for w in report.warnings if "no sample tables" in w]
    r = cli("finalize", "--force", d)
    assert r.code == 0 and info(d).index_problem is None and info(d).sample_tables


def test_report_on_a_jsonl_dataset_says_what_takes_it(tmp_path):
    records = tmp_path / "chat.jsonl"
    records.write_text('{"a": 1}\n{"a": 2}\n')
    finalize(records)
    said = (f"{records} is a JSONL dataset, and `shardcook report` makes the page of a folder of "
            f"tar shards or of a NeMo AutoModel cache; `shardcook info`, `validate` and "
            f"`preview` take {records}.")
    with pytest.raises(ConfigError) as e:
        make_report(records)
    assert str(e.value) == said
    r = cli("report", records)
    assert r.code == 2 and one_error_line(r) == f"error: {said}"
    for command in ("info", "validate"):
        assert cli(command, records).code == 0
