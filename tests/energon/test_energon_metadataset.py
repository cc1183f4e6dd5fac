"""Metadataset `.yaml` files read by `blend` and `get_diffusion_loader`: two files naming each
other, a file holding a list, or a key given twice is one sentence naming the file, not Python's
recursion limit, a TypeError or the last value silently winning."""

from __future__ import annotations

import pytest
from shardcook.energon import get_diffusion_loader, write_blend
from shardcook.energon.blend import metadataset_files, read_metadataset
from shardcook.errors import ConfigError

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.energon import make_raw_dataset


def _blend_of(path, *names):
    entries = "".join(f"      - path: {n}\n        weight: 1\n" for n in names)
    path.write_text(f"__module__: megatron.energon\n__class__: MetadatasetV2\nsplits:\n"
                    f"  train:\n    blend:\n{entries}")
    return path


@pytest.fixture
def cycle(tmp_path):
    _blend_of(tmp_path / "b.yaml", "a.yaml")
    return _blend_of(tmp_path / "a.yaml", "b.yaml")


def test_a_cycle_of_two_blend_files_is_named(tmp_path, cycle):
    with pytest.raises(ConfigError, match=r"cycle \(.*a\.yaml -> .*b\.yaml -> .*a\.yaml\)"):
        read_metadataset(cycle)
    with pytest.raises(ConfigError, match="cycle"):
        get_diffusion_loader(cycle, batch_size=1, num_workers=0, rank=0, world_size=1)
    r = cli("blend", tmp_path / "c.yaml", cycle)
    assert r.code == 2 and "cycle" in one_error_line(r)
    assert not (tmp_path / "c.yaml").exists()


def test_a_blend_that_would_read_itself_is_refused(tmp_path):
    ds = make_raw_dataset(tmp_path / "ds", 4)
    write_blend(tmp_path / "out.yaml", [f"{ds.path}=1"])
    before = (tmp_path / "out.yaml").read_bytes()
    inner = _blend_of(tmp_path / "inner.yaml", "out.yaml")
    assert (tmp_path / "out.yaml").resolve() in metadataset_files(inner)
    with pytest.raises(ConfigError, match="include itself"):
        write_blend(tmp_path / "out.yaml", [f"{inner}=1"], force=True)
    assert (tmp_path / "out.yaml").read_bytes() == before


def test_a_yaml_holding_a_list_is_refused(tmp_path):
    listed = tmp_path / "list.yaml"
    listed.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"must be an Energon metadataset .* not a list"):
        get_diffusion_loader(listed, batch_size=1, num_workers=0, rank=0, world_size=1)
    r = cli("blend", tmp_path / "c.yaml", listed)
    assert r.code == 2 and "not a list" in one_error_line(r)


def test_a_duplicate_key_in_a_nested_blend_names_it(tmp_path):
    ds = make_raw_dataset(tmp_path / "ds", 4)
    inner = write_blend(tmp_path / "inner.yaml", [f"{ds.path}=1"])
    inner.write_text(inner.read_text() + "__class__: MetadatasetV2\n")
    outer = _blend_of(tmp_path / "outer.yaml", "inner.yaml")
    with pytest.raises(ConfigError, match=r"inner\.yaml is not valid YAML \(duplicate key "
                                          r"'__class__'.* at line \d+\)"):
        get_diffusion_loader(outer, batch_size=1, num_workers=0, rank=0, world_size=1)
