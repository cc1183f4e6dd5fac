"""A dataset's own YAML (`.nv-meta/dataset.yaml`, `.nv-meta/split.yaml`) with a key given twice
is a problem naming the key and its line, for validate, info and the loaders' metadata reader:
never the last value silently winning."""

from __future__ import annotations

import pytest
from shardcook.dataset import metadata
from shardcook.errors import DatasetError

from tests.helpers.dataset import cli, one_error_line, write_dataset


@pytest.fixture
def dataset(tmp_path):
    return write_dataset(tmp_path / "ds")


def _repeat_first_key(path):
    """The file with its first top-level line written again at the end (its key twice)."""
    lines = path.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line[:1].isalpha())
    path.write_text("".join(lines) + lines[first])
    return lines[first].split(":")[0], first + 1, len(lines) + 1


@pytest.mark.parametrize("name", ["dataset.yaml", "split.yaml"])
def test_a_duplicate_key_names_the_key_and_line(dataset, name):
    key, first, line = _repeat_first_key(dataset / ".nv-meta" / name)
    read = metadata.read_dataset_yaml if name == "dataset.yaml" else metadata.read_split_yaml
    with pytest.raises(DatasetError, match=rf"duplicate key '{key}' \(first at line {first}\) "
                                           rf"at line {line}"):
        read(dataset)
    r = cli("validate", dataset)
    problems = [line for line in r.stdout.splitlines() if line.startswith("problem:")]
    assert r.code == 1 and len(problems) == 1 and f"duplicate key '{key}'" in problems[0]
    r = cli("info", dataset)
    assert r.code == 2 and f"duplicate key '{key}'" in one_error_line(r)
