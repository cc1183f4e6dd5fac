"""Destructive steps check everything first: `--overwrite` deletes only what shardcook wrote, and
`blend` never replaces a dataset's file, one of its inputs, or (without --force) any file."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from shardcook.energon import write_blend
from shardcook.errors import ConfigError

from tests.helpers.energon import make_raw_dataset
from tests.helpers.files import tree_state
from tests.helpers.raw import make_folder, manifest, run_cli, shard_hashes


@pytest.fixture
def earlier_run(tmp_path):
    src = make_folder(tmp_path / "in", 4, photos=0)
    out = tmp_path / "o1"
    base = ["raw", "--input-dir", str(src), "--output-dir", str(out), "--shard-size", "2",
            "--quiet"]
    run_cli(*base, "--image-size", "32")
    return base, out


def test_overwrite_keeps_user_files_and_says_so(earlier_run):
    base, out = earlier_run
    (out / ".DS_Store").write_bytes(b"finder")
    (out / "notes").mkdir()
    (out / "notes" / "todo.txt").write_text("keep me")
    r = run_cli(*base, "--image-size", "48", "--overwrite")
    assert "Traceback" not in r.stderr
    assert "--overwrite kept 2 file(s) shardcook did not write" in r.stderr
    assert ".DS_Store, notes" in r.stderr
    assert (out / ".DS_Store").read_bytes() == b"finder"
    assert (out / "notes" / "todo.txt").read_text() == "keep me"
    assert sorted(shard_hashes(out)) == ["000000.tar", "000000.tar.idx", "000001.tar",
                                         "000001.tar.idx"]
    # the new run's options are what the dataset now holds
    assert run_cli("validate", str(out)).returncode == 0
    assert manifest(out)["config"]["image"]["image_size"] == 48


def test_overwrite_refuses_a_foreign_tar_before_deleting_anything(earlier_run):
    base, out = earlier_run
    (out / "mine").mkdir()
    (out / "mine" / "extra.tar").write_bytes(b"not ours")
    before = tree_state(out)
    r = run_cli(*base, "--image-size", "48", "--overwrite", check=False)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "a tar shardcook did not write" in r.stderr and "nothing was deleted" in r.stderr
    assert tree_state(out) == before


def test_overwrite_of_a_folder_that_is_no_run_deletes_nothing(tmp_path):
    src = make_folder(tmp_path / "in", 2, photos=0)
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "000000.tar").write_bytes(b"someone else's shard")
    r = run_cli("raw", "--input-dir", str(src), "--output-dir", str(out), "--overwrite",
                "--quiet", check=False)
    assert r.returncode == 2 and "not a shardcook dataset" in r.stderr
    assert "--overwrite deletes nothing" in r.stderr
    assert sorted(os.listdir(out)) == ["000000.tar"]


def test_overwrite_refuses_files_named_like_shards_that_no_record_names(earlier_run):
    base, out = earlier_run
    (out / "000009.tar").write_bytes(b"my own shard, named like yours")
    (out / "train-shard-000000.tar").write_bytes(b"a chatml shard of mine")
    (out / "empty_encodings").mkdir()
    (out / "empty_encodings" / "mynote.txt").write_text("keep me")
    before = tree_state(out)
    r = run_cli(*base, "--image-size", "48", "--overwrite", check=False)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "holds 000009.tar, train-shard-000000.tar, named like shardcook's shards" in r.stderr
    assert "nothing was deleted" in r.stderr
    assert tree_state(out) == before


def test_overwrite_deletes_only_what_the_earlier_run_wrote_and_logs_it(earlier_run):
    base, out = earlier_run
    (out / "empty_encodings").mkdir()
    (out / "empty_encodings" / "mynote.txt").write_text("keep me")
    (out / ".nv-meta" / "my-notes.md").write_text("mine too")
    users = {k: v for k, v in tree_state(out).items()
             if k.startswith(("empty_encodings", ".nv-meta/my-notes"))}
    r = run_cli(*base, "--image-size", "48", "--overwrite")
    assert (f"--overwrite deletes what the earlier run wrote in {out}: 2 shard(s) (000000.tar, "
            "000001.tar), 2 .tar.idx, .nv-meta/.info.json, .nv-meta/dataset.yaml, "
            ".nv-meta/index.sqlite, .nv-meta/index.uuid, .nv-meta/split.yaml, .shardcook/"
            in r.stderr), r.stderr
    assert "kept 2 file(s) shardcook did not write" in r.stderr
    assert "empty_encodings/mynote.txt" in r.stderr and ".nv-meta/my-notes.md" in r.stderr
    after = tree_state(out)
    assert {k: after.get(k) for k in users} == users
    assert run_cli("validate", str(out)).returncode == 0
    assert manifest(out)["config"]["image"]["image_size"] == 48


def test_overwrite_after_a_killed_run_finds_its_shards_in_the_unit_markers(earlier_run):
    base, out = earlier_run
    killed = manifest(out) | {"shards": None, "complete": False}  # as a killed run leaves it
    (out / ".shardcook" / "manifest.json").write_text(json.dumps(killed))
    run_cli(*base, "--image-size", "48", "--overwrite")
    assert manifest(out)["config"]["image"]["image_size"] == 48
    assert run_cli("validate", str(out)).returncode == 0


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """One dataset for every refusal: each case proves it leaves the dataset's tree unchanged."""
    return make_raw_dataset(tmp_path_factory.mktemp("blend") / "ds1", 6, sizes=[(16, 16)]).path


def _blend_cli(*args: str):
    return run_cli("blend", *args, check=False)


@pytest.mark.parametrize("case, message", [
    ("own_dataset_yaml", "inside a dataset's .nv-meta or .shardcook folder"),
    ("dataset_file", "already exists inside the dataset"),
    ("own_input", "is one of the blend's own inputs"),
    ("own_input_by_a_link", "is one of the blend's own inputs"),
    ("existing", "already exists; add --force to replace it"),
    ("split_space", "--split-part 'tr ain' is not a split part name"),
    ("split_empty", "--split-part '' is not a split part name"),
    ("split_missing", "Energon cannot load split 'val'"),
])
def test_blend_refuses_and_writes_nothing(tmp_path, dataset, case, message):
    good = tmp_path / "m.yaml"
    write_blend(good, [f"{dataset}=1"])
    (dataset / "notes.yaml").write_text("mine: 1\n")
    (tmp_path / "link.yaml").symlink_to(good)
    args = {
        "own_dataset_yaml": [str(dataset / ".nv-meta" / "dataset.yaml"), f"{dataset}=1"],
        "dataset_file": [str(dataset / "notes.yaml"), f"{dataset}=1", "--force"],
        "own_input": [str(good), f"{good}=1", "--force"],
        "own_input_by_a_link": [str(good), f"{tmp_path / 'link.yaml'}=1", "--force"],
        "existing": [str(good), f"{dataset}=2"],
        "split_space": [str(tmp_path / "n.yaml"), f"{dataset}=1", "--split-part", "tr ain"],
        "split_empty": [str(tmp_path / "n.yaml"), f"{dataset}=1", "--split-part", ""],
        "split_missing": [str(tmp_path / "n.yaml"), f"{dataset}=1", "--split-part", "val"],
    }[case]
    def state():
        return {**tree_state(dataset), **{f"../{k}": v for k, v in tree_state(tmp_path).items()}}

    before = state()
    r = _blend_cli(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert message in r.stderr
    assert state() == before
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_blend_force_replaces_only_after_loading(tmp_path, dataset):
    out = tmp_path / "m.yaml"
    write_blend(out, [f"{dataset}=1"])
    r = _blend_cli(str(out), f"{dataset}=3", "--force")
    assert r.returncode == 0, r.stderr
    assert yaml.safe_load(out.read_text())["splits"]["train"]["blend"][0]["weight"] == 3.0
    # a blend that does not load leaves the old file as it was
    with pytest.raises(ConfigError, match="Energon cannot load split 'val'"):
        write_blend(out, [f"{dataset}=5"], split="val", force=True)
    assert yaml.safe_load(out.read_text())["splits"]["train"]["blend"][0]["weight"] == 3.0
