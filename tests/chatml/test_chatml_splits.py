"""Split patterns on chatml shard names behave as in Energon (brace expansion first, which also
eats backslashes, then `re.match`), but a pattern that matches nothing, an invalid regex or an
uncovered shard is reported before anything is written; with nothing recording the split, the
shards' names decide it."""

from __future__ import annotations

import shutil

import pytest
import yaml
from shardcook import ShardWriter, finalize
from shardcook.dataset.index.splits import collapse, split_by_patterns
from shardcook.errors import ConfigError

from tests.helpers.chatml import turns, write_images, write_jsonl
from tests.helpers.raw import run_cli
from tests.helpers.shards import energon_prepare

PATTERNS = {
    "both": "{train,val}-shard-.*",
    "first_two": "train-shard-{000000..000001}.tar",
    "escaped": r"train-shard-00000\d\.tar",  # reaches the regex as train-shard-00000d.tar
    "doubled": r"train-shard-00000\\d\\.tar",  # reaches the regex as train-shard-00000\d\.tar
    "dot": r"val-shard-.*\.tar",  # `\.` becomes `.`, which still matches
    "alternation": "val-shard-00000(0|1).tar",
}


def chatml_shards(root):
    for split, n in (("train", 3), ("val", 2)):
        with ShardWriter(root, shard_size=2, prefix=f"{split}-shard-") as w:
            for i in range(2 * n):
                w.write(f"{split}-{i:06d}", {"jpgs": b"\x80\x04]\x94.",
                                             "conversation.json": b"[]"})
    return sorted(p.name for p in root.glob("*.tar"))


def test_patterns_match_what_energon_prepare_matches(tmp_path):
    shards = chatml_shards(tmp_path)
    args = [a for name, p in PATTERNS.items() for a in ("--split-parts", f"{name}:{p}")]
    r = energon_prepare(tmp_path, *args)
    assert r.returncode == 0, r.stdout + r.stderr
    theirs = yaml.safe_load((tmp_path / ".nv-meta" / "split.yaml").read_text())["split_parts"]
    assert theirs["both"] == ["train-shard-{000000..000002}.tar", "val-shard-{000000..000001}.tar"]
    assert theirs["escaped"] == []  # looks right, matches nothing in Energon
    assert theirs["doubled"] == ["train-shard-{000000..000002}.tar"]
    for name, pattern in PATTERNS.items():
        if theirs[name]:
            ours = split_by_patterns(shards, {name: pattern}).parts[name]
            assert collapse(ours) == theirs[name], name
        else:
            with pytest.raises(ConfigError, match=r"matches none .* removes backslashes"):
                split_by_patterns(shards, {name: pattern})


@pytest.mark.parametrize("pattern, message", [
    ("train-shard-[", "not a valid regular expression"),
    (r"train-shard-\d+", "matches none"),
])
def test_bad_pattern_stops_finalize_before_anything_is_written(tmp_path, pattern, message):
    chatml_shards(tmp_path)
    with pytest.raises(ConfigError, match=message):
        finalize(tmp_path, split_parts={"train": pattern, "val": "val-shard-.*"}, validate=False)
    assert not (tmp_path / ".nv-meta").exists()
    assert not list(tmp_path.glob("*.idx"))


def test_a_shard_in_no_split_is_a_warning(tmp_path):
    shards = chatml_shards(tmp_path)
    splits = split_by_patterns(shards, {"train": "train-shard-.*"})
    assert splits.parts["train"] == shards[:3]
    assert splits.warnings == [
        "2 shard(s) are in no split (e.g. 'val-shard-000000.tar'); no loader will read them"]


def test_a_folder_that_lost_its_split_records_keeps_val_out_of_train(tmp_path):
    src = tmp_path / "in"
    names = write_images(src / "images", 4)
    jsonl = write_jsonl(src / "data.jsonl", [
        {"id": f"s-{i}", "image": f"images/{names[i % 4]}", "conversations": turns(1)}
        for i in range(12)])
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--shard-size", "2",
            "--val-fraction", "0.3", "--quiet")
    split_yaml = out / ".nv-meta" / "split.yaml"
    made = yaml.safe_load(split_yaml.read_text())["split_parts"]
    assert made["train"] and made["val"]
    shutil.rmtree(out / ".nv-meta")
    (out / ".shardcook" / "finalize.json").unlink()
    run_cli("finalize", str(out))
    assert yaml.safe_load(split_yaml.read_text())["split_parts"] == made


def test_a_run_whose_samples_all_went_to_val_is_refused(tmp_path):
    from shardcook.sources.chat import split_of

    src = tmp_path / "in"
    names = write_images(src / "images", 2)
    ids = [i for i in (f"s-{n}" for n in range(50)) if split_of(i, 0.9) == "val"][:3]
    jsonl = write_jsonl(src / "data.jsonl", [
        {"id": i, "image": f"images/{names[0]}", "conversations": turns(1)} for i in ids])
    out = tmp_path / "out"
    r = run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--val-fraction",
                "0.9", "--quiet", check=False)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert "holds no train shard (every sample was skipped or went to val)" in r.stderr
    assert not (out / ".nv-meta" / "split.yaml").exists()
