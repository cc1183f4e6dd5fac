"""A shard lost after the run that wrote it (a file deleted, an object deleted from the bucket):
`finalize --force` keeps every other shard in the split the run gave it and refuses, naming the
lost shard, leaving the metadata as it was; `validate` compares the shards with the run's manifest
and progress markers, so it never calls such a dataset whole. A rerun writes the shard again."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from shardcook import ShardWriter, validate

from tests.helpers.dataset import cli, one_error_line, raw_parts
from tests.helpers.raw import make_folder, run_cli

META = ".nv-meta"
#: 3 shards of 8 inputs: the run puts 000000 and 000001 in train, 000002 in val.
RUN = ("--shard-size", "8", "--split", "2,1,0", "--quiet")
SPLITS = {"train": ["{000000..000001}.tar"], "val": ["000002.tar"], "test": []}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    return make_folder(tmp_path_factory.mktemp("lost") / "inputs", 24, photos=0)


def raw(inputs: Path, out: Path | str) -> None:
    run_cli("raw", "--input-dir", inputs, "--output-dir", out, *RUN)


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def objects(store) -> dict[str, str]:
    """Every object in the bucket, with its sha256."""
    return {key: hashlib.sha256(store.get(key)).hexdigest() for key in store.keys(prefix="")}


def splits(root: Path) -> dict[str, list[str]]:
    return yaml.safe_load((root / META / "split.yaml").read_text())["split_parts"]


MISSING = ("shard 000002.tar is missing, though the run that wrote {root} recorded it (8 "
           "samples); rerun the command that wrote {root} (it writes only what is missing), or "
           "leave the shard out with `shardcook finalize --force --exclude`")


def test_finalize_force_refuses_to_recut_around_a_lost_shard(inputs, tmp_path):
    ds = tmp_path / "ds"
    raw(inputs, ds)
    (ds / "000002.tar").unlink()
    before = files(ds)

    r = cli("finalize", "--force", ds)
    assert r.code == 2
    assert MISSING.format(root=ds) in r.stderr, r.stderr
    assert files(ds) == before  # nothing moved: 000001 stays train, the metadata as it was

    r = cli("finalize", "--force", "--no-validate", ds)  # the index written anyway
    assert r.code == 0, r.stderr
    assert splits(ds) == {"train": SPLITS["train"], "val": [], "test": []}
    assert validate(ds).problems == [MISSING.format(root=ds)]
    assert cli("validate", ds).code == 1

    raw(inputs, ds)  # the rerun writes the lost shard again and finalizes
    assert splits(ds) == SPLITS
    assert validate(ds).ok


def test_a_lost_shard_left_out_on_purpose_moves_no_other_shard(inputs, tmp_path):
    ds = tmp_path / "ds"
    raw(inputs, ds)
    (ds / "000002.tar").unlink()
    r = cli("finalize", "--force", "--exclude", "000002", ds)
    assert r.code == 0, r.stderr
    assert splits(ds) == {"train": SPLITS["train"], "val": [], "test": []}  # 000001 stays train
    assert validate(ds).ok


def test_a_shard_that_is_not_the_runs_is_named(inputs, tmp_path):
    ds = tmp_path / "ds"
    raw(inputs, ds)
    (ds / "000001.tar").unlink()
    with ShardWriter(tmp_path / "other", shard_size=3) as w:  # 3 samples where the run wrote 8
        for i in range(3):
            w.write(f"other{i}", raw_parts(i))
    (tmp_path / "other" / "000000.tar").rename(ds / "000001.tar")

    r = cli("finalize", "--force", ds)
    assert r.code == 2
    assert ("shard 000001.tar holds 3 samples by .info.json, but the run that wrote it recorded "
            "8, so it is not that run's shard") in one_error_line(r) + r.stderr


def test_the_markers_name_the_shards_of_a_run_not_finished(inputs, tmp_path):
    ds = tmp_path / "ds"
    raw(inputs, ds)
    manifest = json.loads((ds / ".shardcook" / "manifest.json").read_text())
    manifest.update(shards=None, complete=False)  # as while the run is still going
    (ds / ".shardcook" / "manifest.json").write_text(json.dumps(manifest))
    (ds / "000002.tar").unlink()
    assert validate(ds).problems == ["shard 000002.tar is listed in .info.json but missing"]
    r = cli("finalize", "--force", ds)
    assert r.code == 2
    assert MISSING.format(root=ds) in r.stderr


def test_a_shard_object_deleted_from_the_bucket_is_named(inputs, s3_store):
    url = s3_store.url("ds")
    raw(inputs, url)
    s3_store.server.client().delete_object(Bucket=s3_store.bucket, Key="ds/000002.tar")
    before = objects(s3_store)

    r = cli("finalize", "--force", url)
    assert r.code == 2
    assert MISSING.format(root=url) in r.stderr, r.stderr
    assert objects(s3_store) == before

    r = cli("validate", url)
    assert r.code == 1
    assert "shard 000002.tar is listed in .info.json but missing" in r.stdout

    raw(inputs, url)  # the rerun writes the object again
    assert yaml.safe_load(s3_store.get(f"ds/{META}/split.yaml"))["split_parts"] == SPLITS
    assert cli("validate", url).code == 0
