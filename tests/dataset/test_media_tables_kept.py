"""finalize keeps the media metadata that `energon prepare-media` adds to index.sqlite, as
`energon prepare` without media flags does: `--force` rebuilds the sample tables and leaves the
`media_metadata` and `media_filters` rows (ids and timestamps included) exactly as they were,
on a local folder and in a bucket; `--no-sqlite`, which would delete them, is refused."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from megatron.energon.cache.file_store import WebdatasetFileStore
from megatron.energon.epathlib import EPath
from megatron.energon.media.metadata import ImageMetadata
from shardcook import build_index

from tests.helpers.dataset import cli, one_error_line, write_dataset
from tests.helpers.files import tree_state
from tests.helpers.raw import make_folder, run_cli
from tests.helpers.shards import ENERGON, energon_prepare

#: The rows of each media table, and media_filters' AUTOINCREMENT counter.
QUERIES = {
    "media_metadata": "SELECT * FROM media_metadata ORDER BY entry_key",
    "media_filters": "SELECT * FROM media_filters ORDER BY filter_id",
    "counter": "SELECT * FROM sqlite_sequence WHERE name = 'media_filters'",
}


def media_rows(root: Path) -> dict[str, list[tuple]]:
    with contextlib.closing(sqlite3.connect(root / ".nv-meta" / "index.sqlite")) as db:
        return {name: db.execute(sql).fetchall() for name, sql in QUERIES.items()}


def prepare_media(target: str | Path) -> None:
    """The real `energon prepare-media --media-metadata-by-extension` (not interactive)."""
    r = subprocess.run([*ENERGON, "prepare-media", str(target), "--media-metadata-by-extension",
                        "--no-progress", "--num-workers", "1"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.fixture
def enriched(tmp_path):
    """A finalized raw dataset (3 shards of 2 jpg+txt samples) enriched by Energon with a
    media filter row and one image row per sample."""
    root = write_dataset(tmp_path / "ds", n_shards=3)
    prepare_media(root)
    rows = media_rows(root)
    assert len(rows["media_metadata"]) == 6 and len(rows["media_filters"]) == 1, rows
    return root


def assert_energon_reads_the_metadata(root: Path) -> None:
    found = WebdatasetFileStore(EPath(root)).get_media_metadata("0000000003.jpg")
    assert isinstance(found, ImageMetadata)
    assert (found.width, found.height, found.format) == (64, 48, "JPEG")


def test_finalize_force_keeps_the_media_tables_as_energon_prepare_does(enriched, tmp_path):
    before = media_rows(enriched)
    theirs = tmp_path / "theirs"
    shutil.copytree(enriched, theirs)
    r = energon_prepare(theirs, "--force-overwrite", "--split-ratio", "0.5,0.25,0.25")
    assert r.returncode == 0, r.stdout + r.stderr
    assert media_rows(theirs) == before  # Energon's own rebuild keeps them
    uuid = (enriched / ".nv-meta" / "index.uuid").read_text()
    r = cli("finalize", enriched, "--force", "--encoding", "generic", "--split", "0.5,0.25,0.25")
    assert r.code == 0, r.stdout + r.stderr
    assert (enriched / ".nv-meta" / "index.uuid").read_text() != uuid  # the index was rebuilt
    assert media_rows(enriched) == before
    assert_energon_reads_the_metadata(enriched)
    # and again: the kept tables are kept by the next rebuild too
    build_index(enriched, force=True)
    assert media_rows(enriched) == before
    assert cli("validate", enriched).code == 0


def test_a_second_filter_row_and_its_counter_are_kept(enriched):
    prepare_media(enriched)  # Energon replaces the rows and keeps one filter row per strategy
    with contextlib.closing(sqlite3.connect(enriched / ".nv-meta" / "index.sqlite")) as db, db:
        db.execute("INSERT INTO media_filters (strategy, patterns) VALUES ('glob', '*.jpg')")
        db.execute("DELETE FROM media_filters WHERE strategy = 'glob'")  # the counter stays
    before = media_rows(enriched)
    largest_id = max(row[0] for row in before["media_filters"])
    assert before["counter"][0][1] > largest_id  # a copy of the rows alone would lose it
    assert cli("finalize", enriched, "--force").code == 0
    assert media_rows(enriched) == before


def test_a_media_metadata_table_without_its_filter_table_is_kept(enriched):
    """An index some other tool left with media rows and no media_filters (so no AUTOINCREMENT
    counter either) is rebuilt with its rows kept."""
    with contextlib.closing(sqlite3.connect(enriched / ".nv-meta" / "index.sqlite")) as db, db:
        db.execute("DROP TABLE media_filters")
    before = media_rows_without_filters(enriched)
    assert cli("finalize", enriched, "--force").code == 0
    assert media_rows_without_filters(enriched) == before


def media_rows_without_filters(root: Path) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(root / ".nv-meta" / "index.sqlite")) as db:
        return db.execute(QUERIES["media_metadata"]).fetchall()


def test_no_sqlite_over_media_metadata_is_refused(enriched):
    before = tree_state(enriched)
    r = cli("finalize", enriched, "--force", "--no-sqlite")
    assert r.code == 2
    line = one_error_line(r)
    assert "holds Energon's media metadata (6 entries), which --no-sqlite would delete" in line
    assert tree_state(enriched) == before


def test_finalize_force_in_a_bucket_keeps_the_media_tables(enriched, s3_store, tmp_path):
    s3_store.upload_folder(enriched, "ds")
    before = media_rows(enriched)
    r = cli("finalize", s3_store.url("ds"), "--force", "--scratch-dir", tmp_path)
    assert r.code == 0, r.stdout + r.stderr
    fetched = tmp_path / "fetched"
    (fetched / ".nv-meta").mkdir(parents=True)
    (fetched / ".nv-meta" / "index.sqlite").write_bytes(s3_store.get("ds/.nv-meta/index.sqlite"))
    assert media_rows(fetched) == before
    with contextlib.closing(sqlite3.connect(fetched / ".nv-meta" / "index.sqlite")) as db:
        assert db.execute("SELECT COUNT(*) FROM samples").fetchone() == (6,)


def test_a_rerun_of_the_run_that_wrote_the_dataset_keeps_them(tmp_path):
    """Rerunning a finished run (it writes only what is missing) finalizes the folder again."""
    make_folder(tmp_path / "in", 4, photos=0)
    args = ("raw", "--input-dir", str(tmp_path / "in"), "--output-dir", str(tmp_path / "out"),
            "--shard-size", "2", "--image-size", "64", "--workers", "1", "--quiet")
    run_cli(*args)
    prepare_media(tmp_path / "out")
    before = media_rows(tmp_path / "out")
    assert len(before["media_metadata"]) == 4
    uuid = (tmp_path / "out" / ".nv-meta" / "index.uuid").read_text()
    run_cli(*args)
    assert (tmp_path / "out" / ".nv-meta" / "index.uuid").read_text() != uuid
    assert media_rows(tmp_path / "out") == before
