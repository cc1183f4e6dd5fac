"""`write_blend` loads the blend with Energon before writing it, and Energon imports the module of
every dataset it reaches: a dataset (or a metadataset, at any depth) naming a module outside
megatron.energon, megatron.bridge and shardcook, or a Python file, is refused before that load,
and its code never runs."""

from __future__ import annotations

import sys

import pytest
import yaml
from shardcook.energon import write_blend
from shardcook.errors import ConfigError

from tests.helpers.dataset import write_dataset

REFUSED = r"names the module 'evilmod', which is not part of .*; leave that dataset out"


@pytest.fixture
def evilmod(tmp_path):
    """`evilmod` importable (as from the current folder), leaving `ran` behind if imported."""
    folder = tmp_path / "code"
    folder.mkdir()
    (folder / "evilmod.py").write_text(
        f"open({str(tmp_path / 'ran')!r}, 'w').close()\nclass Evil:\n    pass\n")
    sys.path.insert(0, str(folder))
    yield tmp_path / "ran"
    sys.path.remove(str(folder))
    sys.modules.pop("evilmod", None)


def naming_evilmod(d, name="dataset.yaml"):
    (d / ".nv-meta" / name).write_text(yaml.safe_dump(
        {"__module__": "evilmod", "__class__": "Evil", "subflavors": {"encoding": "raw"}}))
    return d


def test_a_dataset_naming_a_module_is_refused_before_energon_loads_it(tmp_path, evilmod):
    good = write_dataset(tmp_path / "good")
    bad = naming_evilmod(write_dataset(tmp_path / "bad"))
    with pytest.raises(ConfigError, match=REFUSED):
        write_blend(tmp_path / "mix.yaml", [f"{good}=1", f"{bad}=1"])
    assert not evilmod.exists()
    assert not (tmp_path / "mix.yaml").exists()


def test_a_metadataset_reaching_such_a_dataset_is_refused(tmp_path, evilmod):
    good = write_dataset(tmp_path / "good")
    naming_evilmod(good, "other.yaml")  # a dataset.yaml stand-in the metadataset picks
    inner = tmp_path / "inner.yaml"
    inner.write_text(yaml.safe_dump({
        "__module__": "megatron.energon", "__class__": "MetadatasetV2",
        "splits": {"train": {"blend": [{"path": "good", "weight": 1,
                                        "dataset_config": "other.yaml"}]}}}))
    outer = tmp_path / "outer.yaml"
    outer.write_text(yaml.safe_dump({
        "__module__": "megatron.energon", "__class__": "MetadatasetV2",
        "splits": {"train": {"blend": [{"path": "inner.yaml", "weight": 1}]}}}))
    with pytest.raises(ConfigError, match=REFUSED):
        write_blend(tmp_path / "mix.yaml", [f"{outer}=1"])
    assert not evilmod.exists()
    assert not (tmp_path / "mix.yaml").exists()
