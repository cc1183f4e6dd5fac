"""`finalize` and `build_index` called from Python with an argument of the wrong type refuse it
in one sentence and leave the dataset's files byte for byte as they were (the command line's
parser guarantees the types; a Python caller may pass anything)."""

from __future__ import annotations

import hashlib

import pytest
from shardcook import build_index, finalize
from shardcook.dataset import metadata
from shardcook.errors import ConfigError

from tests.helpers.dataset import write_dataset


def _files(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("args") / "ds")


@pytest.mark.parametrize(("arguments", "message"), [
    ({"shuffle_seed": "x"}, "shuffle_seed must be a whole number or None, not 'x'."),
    ({"shuffle_seed": 1.5}, "shuffle_seed must be a whole number or None, not 1.5."),
    ({"shuffle_seed": True}, "shuffle_seed must be a whole number or None, not True."),
    ({"sqlite": "no"}, "sqlite must be True or False, not 'no'."),
    ({"force": 1}, "force must be True or False, not 1."),
    ({"split": 5}, "split must be train,val,test ratios"),
    ({"validate": "x"}, "validate must be True or False, not 'x'."),
    ({"sample_type": 5}, "sample_type must be a class name"),
    ({"field_map": {"image": 5}}, "field_map must be a mapping of field names to part names"),
    ({"subflavors": ["a"]}, "subflavors must be a mapping with names as keys"),
])
def test_a_wrong_type_is_refused_before_anything_changes(dataset, arguments, message):
    before = _files(dataset)
    arguments = {"force": True, **arguments}
    with pytest.raises(ConfigError) as caught:
        finalize(dataset, **arguments)
    assert str(caught.value).startswith(message)
    index_arguments = {k: v for k, v in arguments.items()
                       if k not in ("validate", "sample_type", "field_map", "subflavors")}
    if len(index_arguments) > 1 or ("force" in arguments and arguments["force"] is not True):
        with pytest.raises(ConfigError):
            build_index(dataset, **index_arguments)
    assert _files(dataset) == before


def test_a_whole_number_seed_is_recorded(dataset):
    finalize(dataset, force=True, shuffle_seed=7, split="1,1,0")
    finalize(dataset, force=True)
    record = metadata.read_finalize_record(dataset)
    assert record is not None and record.shuffle_seed == 7
