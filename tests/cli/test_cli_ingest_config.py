"""`ingest --config`'s `empty_encodings.output_subdir` names one plain folder inside the output
folder for the empty prompt's encodings: one inside shardcook's or Energon's own folders, or one
that climbs out, is refused in one sentence before anything is written."""

from __future__ import annotations

import pytest

from tests.helpers.dataset import cli, one_error_line


@pytest.mark.parametrize("subdir", ["train/.shardcook", ".shardcook", ".nv-meta",
                                    "empty/.nv-meta/x", ".", "a/../b", "a//b", "/abs/empty",
                                    ""])
def test_an_empty_encodings_folder_outside_the_output_or_in_its_records_is_refused(
        tmp_path, subdir):
    arrow = tmp_path / "part.arrow"
    arrow.write_bytes(b"")
    config = tmp_path / "ingest.yaml"
    config.write_text("empty_encodings:\n  manifest_url: http://127.0.0.1:9/empty.uri\n"
                      f"  output_subdir: '{subdir}'\n")
    out = tmp_path / "out"
    r = cli("ingest", "--config", config, "--output-dir", out, "--split", "train", arrow)
    assert r.code == 2
    assert one_error_line(r) == (
        f"error: empty_encodings.output_subdir {subdir!r} must be one plain folder name inside "
        "the output folder, not hidden nor a split's")
    assert not out.exists()
