"""What keeps the page fast on a dataset of millions of samples, at a small scale: index.sqlite is
read by index lookups only (no statement scans a table or an index whole), and still a row
missing there is a problem on the page, in an index with Energon 7's lookup index or without."""

from __future__ import annotations

import contextlib
import re
import sqlite3

import pytest
from shardcook.dataset.check import scans as checks
from shardcook.htmlreport import make_report

from tests.helpers.dataset import write_dataset


def _plans(db: sqlite3.Connection, statements: list[str]) -> list[str]:
    # (SQLite traces a pragma function's own statement as a comment: nothing to plan)
    return [row[3] for s in statements if not s.startswith("--")
            for row in db.execute(f"EXPLAIN QUERY PLAN {s}")]


def test_index_sqlite_read_by_lookups_only(tmp_path, monkeypatch):
    d = write_dataset(tmp_path / "raw", n_shards=3, per_shard=4)
    statements: list[str] = []
    opened: list[sqlite3.Connection] = []
    open_read_only = checks.open_read_only

    def traced(path):
        db = open_read_only(path)
        db.set_trace_callback(statements.append)  # each statement, its values filled in
        opened.append(db)
        return db

    monkeypatch.setattr(checks, "open_read_only", traced)
    page = make_report(d, samples=4)
    assert 'data-validate="whole"' in page
    assert opened and len(statements) >= 3
    with contextlib.closing(sqlite3.connect(d / ".nv-meta" / "index.sqlite")) as db:
        plans = _plans(db, statements)
        assert any("USING COVERING INDEX idx_samples_by_tar_and_idx (tar_file_id=? AND "
                   "sample_index=?)" in p for p in plans), plans
        scans = [p for p in plans if re.match(r"SCAN (samples|sample_parts)\b", p)]
        assert scans == []
        # what `validate` runs scans: the check above can tell
        assert re.match(r"SCAN (samples|sample_parts)\b", _plans(db, [
            "SELECT tar_file_id, count(*) FROM samples GROUP BY tar_file_id"])[0])


@pytest.mark.parametrize(("lookup_index", "says"), [
    (True, "does not hold samples #0 to #3 of 000001.tar"),
    # as in Energon 6's index: no (tar_file_id, sample_index) index to look up, so it is counted
    (False, "holds 3 samples of 000001.tar but .info.json says 4"),
])
def test_a_row_missing_in_index_sqlite(tmp_path, lookup_index, says):
    d = write_dataset(tmp_path / "raw", n_shards=3, per_shard=4)
    with contextlib.closing(sqlite3.connect(d / ".nv-meta" / "index.sqlite")) as db, db:
        db.execute("DELETE FROM samples WHERE tar_file_id = 1 AND sample_index = 3")
        if not lookup_index:
            db.execute("DROP INDEX idx_samples_by_tar_and_idx")
    page = make_report(d, samples=4)
    problems = re.findall(r"<p class=\"warn\" data-problem>([^<]*)<", page)
    assert any(says in p for p in problems), problems
