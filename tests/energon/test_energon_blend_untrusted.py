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


def metadataset(path, *entries):
    """A MetadatasetV2 blending `entries` (paths, or mappings with their `path`) equally."""
    blend = [{"path": e, "weight": 1} if isinstance(e, str) else {**e, "weight": 1}
             for e in entries]
    path.write_text(yaml.safe_dump({"__module__": "megatron.energon",
                                    "__class__": "MetadatasetV2",
                                    "splits": {"train": {"blend": blend}}}))
    return path


def test_a_metadataset_reached_through_a_link_is_checked_where_energon_reads(tmp_path, evilmod):
    """Energon folds a metadataset's `..` by name, not following links first: from
    `link/inner.yaml`, `../bad` is the `bad` beside `link`, not beside the folder it leads to.
    That is the dataset checked (a check that followed the link passed the harmless one)."""
    real = tmp_path / "deep" / "real"
    real.mkdir(parents=True)
    write_dataset(tmp_path / "deep" / "bad")  # beside the link's target: harmless
    naming_evilmod(write_dataset(tmp_path / "bad"))  # beside the link: what Energon loads
    metadataset(real / "inner.yaml", "../bad")
    (tmp_path / "link").symlink_to(real)
    outer = metadataset(tmp_path / "outer.yaml", "link/inner.yaml")
    with pytest.raises(ConfigError, match=REFUSED):
        write_blend(tmp_path / "mix.yaml", [f"{outer}=1"])
    assert not evilmod.exists()
    assert not (tmp_path / "mix.yaml").exists()


@pytest.fixture
def bucket_with_code(s3_store, tmp_path, evilmod):
    """`good/` and `bad/` in a bucket; `bad`'s dataset.yaml names `evilmod` and a sample_loader
    `.nv-meta/evil.py`, both of which would leave `ran` behind if anything ran them."""
    good = write_dataset(tmp_path / "good")
    s3_store.upload_folder(good, "good")
    s3_store.upload_folder(good, "bad")
    s3_store.put("bad/.nv-meta/dataset.yaml", yaml.safe_dump(
        {"__module__": "evilmod", "__class__": "Evil", "sample_loader": "evil.py:f",
         "subflavors": {"encoding": "raw"}}).encode())
    s3_store.put("bad/.nv-meta/evil.py", f"open({str(evilmod)!r}, 'w').close()\n"
                                         "def f(*a, **k):\n    return a\n".encode())
    return s3_store


def test_a_local_metadataset_naming_a_bucket_dataset_with_code_is_refused(bucket_with_code,
                                                                         tmp_path, evilmod):
    from tests.helpers.dataset import cli, one_error_line

    store = bucket_with_code
    named = cli("blend", tmp_path / "direct.yaml", store.url("bad"))
    inner = metadataset(tmp_path / "inner.yaml", store.url("good"), store.url("bad"))
    outer = metadataset(tmp_path / "outer.yaml", "inner.yaml")
    for args in ([tmp_path / "mix.yaml", inner], [tmp_path / "mix.yaml", f"{outer}=2"]):
        r = cli("blend", *args)
        assert r.code == 2, (r.stdout, r.stderr)
        line = one_error_line(r)
        assert f"{store.url('bad')}/.nv-meta/dataset.yaml names the module 'evilmod'" in line
        assert "leave that dataset out of the blend" in line
        assert not evilmod.exists() and not (tmp_path / "mix.yaml").exists()
    # the same refusal as the dataset named directly
    assert named.code == 2 and "names the module 'evilmod'" in one_error_line(named)
    assert not evilmod.exists()


def test_a_dataset_yaml_stand_in_in_a_bucket_is_checked(bucket_with_code, tmp_path, evilmod):
    from tests.helpers.dataset import cli, one_error_line

    store = bucket_with_code
    store.put("good/.nv-meta/other", store.get("bad/.nv-meta/dataset.yaml"))
    inner = metadataset(tmp_path / "inner.yaml",
                        {"path": store.url("good"), "dataset_config": "other"})
    r = cli("blend", tmp_path / "mix.yaml", inner)
    assert r.code == 2
    assert f"{store.url('good')}/.nv-meta/other names the module 'evilmod'" in one_error_line(r)
    assert not evilmod.exists() and not (tmp_path / "mix.yaml").exists()


def test_a_bucket_dataset_folder_named_like_a_yaml_file_is_checked(bucket_with_code, tmp_path,
                                                                   evilmod):
    """Energon reads a name that is no object as a dataset folder, whatever it ends with: the
    dataset.yaml of `bad.yaml/` is the code it would import."""
    from tests.helpers.dataset import cli, one_error_line

    store = bucket_with_code
    for key in store.keys("bad/"):
        store.put(f"bad.yaml/{key.removeprefix('bad/')}", store.get(key))
    inner = metadataset(tmp_path / "inner.yaml", store.url("bad.yaml"))
    r = cli("blend", tmp_path / "mix.yaml", inner)
    assert r.code == 2, (r.stdout, r.stderr)
    assert (f"{store.url('bad.yaml')}/.nv-meta/dataset.yaml names the module 'evilmod'"
            in one_error_line(r))
    assert not evilmod.exists() and not (tmp_path / "mix.yaml").exists()


def test_a_bucket_metadataset_entry_with_a_dot_dot_segment_is_refused(bucket_with_code,
                                                                      tmp_path, evilmod):
    from tests.helpers.dataset import cli, one_error_line

    store = bucket_with_code
    inner = metadataset(tmp_path / "inner.yaml", store.url("good/../bad"))
    r = cli("blend", tmp_path / "mix.yaml", inner)
    assert r.code == 2 and "'..' segment" in one_error_line(r)
    assert not evilmod.exists() and not (tmp_path / "mix.yaml").exists()


def test_a_metadataset_of_bucket_datasets_without_code_still_blends(s3_store, tmp_path):
    from tests.helpers.dataset import cli

    good = write_dataset(tmp_path / "good")
    s3_store.upload_folder(good, "one")
    s3_store.upload_folder(good, "two")
    inner = metadataset(tmp_path / "inner.yaml", s3_store.url("one"), s3_store.url("two"))
    r = cli("blend", tmp_path / "mix.yaml", inner)
    assert r.code == 0, (r.stdout, r.stderr)
    assert (tmp_path / "mix.yaml").exists()
