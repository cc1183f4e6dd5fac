"""A run's finalize is handed the run's dataset view and its `Layout` (`dataset.finalize_run`),
not an encoding that finalize looks up again: a layout in no registry is finalized, and
validated, by the declaration it is handed."""

from __future__ import annotations

import shardcook
from shardcook.dataset import metadata
from shardcook.dataset.finalize import finalize_run
from shardcook.dataset.location import dataset_view
from shardcook.layouts import LAYOUTS, Layout, by_encoding

#: Declared here only: `by_encoding` knows no such layout.
NOTES = Layout(name="notes", encoding="notes", parts=("txt", "json"), required=("txt",))


def test_finalize_takes_the_layout_it_is_handed(tmp_path):
    assert NOTES.name not in LAYOUTS and by_encoding(NOTES.encoding) is None
    root = tmp_path / "notes"
    with shardcook.ShardWriter(str(root), shard_size=3) as w:
        for i in range(7):
            w.write(f"{i:010d}", [("txt", f"note {i}".encode()), ("json", b"{}")])
    with dataset_view(root) as view:
        result = finalize_run(view, NOTES, split=(1, 0, 0))
    assert result.validation is not None and result.validation.ok, result.validation.problems
    assert result.dataset_yaml["subflavors"] == {"encoding": "notes"}
    record = metadata.read_finalize_record(root)
    assert record is not None and record.encoding == "notes"
    assert result.index.shard_counts == {"000000.tar": 3, "000001.tar": 3, "000002.tar": 1}
