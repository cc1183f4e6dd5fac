"""`info` and `preview` given an image, a shard or a missing path say what it is and what to give
instead (exit 2), instead of advising to run finalize on an image."""

from __future__ import annotations

import pytest

from tests.helpers.dataset import cli, one_error_line, write_dataset
from tests.helpers.raw import encode, generated


@pytest.mark.parametrize("command", ["info", "preview"])
def test_a_file_or_a_missing_path_is_not_a_dataset(tmp_path, command):
    image = tmp_path / "some_image.png"
    image.write_bytes(encode(generated(0), "png"))
    shard = write_dataset(tmp_path / "ds") / "000000.tar"
    for path in (image, shard):
        r = cli(command, path)
        line = one_error_line(r)
        assert r.code == 2 and line == (f"error: {path} is a file, not a dataset folder; give the "
                                        "folder that holds the .tar shards and .nv-meta/."), line
    r = cli(command, tmp_path / "nothere")
    assert r.code == 2 and one_error_line(r) == (f"error: {tmp_path / 'nothere'} does not exist; "
                                                 "give a dataset folder.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "some_image.png"]
