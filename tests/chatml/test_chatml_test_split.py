"""chatml's test split (Megatron-Bridge's train/val/test, as its VALOR32K tutorial builds): by a
stable hash (`--test-fraction`, the band after val's) or by rows (`--test-rows` after the train
and val rows); `test-shard-*.tar` with `test-*` keys, a `test` part in split.yaml that Energon's
own prepare and loader agree with; options that cannot work stop before any work."""

from __future__ import annotations

import pytest
import yaml
from shardcook.sources.chat import split_of

from tests.helpers.chatml import (
    energon_samples,
    energon_twin,
    read_all,
    turns,
    turns_of,
    write_images,
    write_jsonl,
)
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import manifest, run_cli
from tests.helpers.shards import assert_same_index, energon_prepare

N = 24
THREE_SPLITS = ("--split-parts", "train:train-shard-.*", "--split-parts", "val:val-shard-.*",
                "--split-parts", "test:test-shard-.*")


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory):
    root = tmp_path_factory.mktemp("test_split")
    names = write_images(root / "in", N, photos=2)
    return write_jsonl(root / "in" / "data.jsonl", [
        {"id": f"rec{i}", "image": n, "conversations": turns(1, f"question {i}")}
        for i, n in enumerate(names)])


def _questions(samples: dict, split: str) -> list[int]:
    """The record numbers in `split`, in key order (from the question text)."""
    return [int(turns_of(p["conversation.json"])[0]["content"][-1]["text"].rsplit(" ", 1)[1])
            for k, p in sorted(samples.items()) if k.startswith(f"{split}-")]


def test_test_fraction_takes_the_hash_band_after_val(jsonl, tmp_path):
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--val-fraction", "0.25",
            "--test-fraction", "0.25", "--shard-size", "3", "--quiet")
    want = {sp: [i for i in range(N) if split_of(f"rec{i}", 0.25, 0.25) == sp]
            for sp in ("train", "val", "test")}
    assert all(want.values()), want  # every split gets inputs with these ids
    # adding a test share moves no val sample: val is the same band as without it
    assert want["val"] == [i for i in range(N) if split_of(f"rec{i}", 0.25) == "val"]
    samples = read_all(out)
    for split, records in want.items():
        assert _questions(samples, split) == records
        assert sorted(k for k in samples if k.startswith(f"{split}-")) == [
            f"{split}-{n:06d}" for n in range(len(records))]
    parts = yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())["split_parts"]
    assert parts["test"] == [f"test-shard-{{000000..{(len(want['test']) - 1) // 3:06d}}}.tar"]
    assert manifest(out)["source"]["split_sizes"] == {sp: len(r) for sp, r in want.items()}
    theirs = energon_twin(out, tmp_path / "energon")
    ref = energon_prepare(theirs, *THREE_SPLITS)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert_same_index(out, theirs)
    assert energon_samples(theirs) == samples
    assert cli("validate", out).code == 0


def test_test_rows_follow_the_train_and_val_rows(jsonl, tmp_path):
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--train-rows", "10",
            "--validation-rows", "4", "--test-rows", "3", "--shard-size", "4", "--quiet")
    samples = read_all(out)
    assert _questions(samples, "train") == list(range(10))
    assert _questions(samples, "val") == [10, 11, 12, 13]
    assert _questions(samples, "test") == [14, 15, 16]
    assert sorted(p.name for p in out.glob("test-shard-*.tar")) == ["test-shard-000000.tar"]
    assert manifest(out)["source"]["rows"] == {"train": 10, "val": 4, "test": 3}


def test_a_run_without_test_writes_what_it_wrote_before(jsonl, tmp_path):
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--val-fraction", "0.25",
            "--quiet")
    assert not list(out.glob("test-shard-*"))
    assert manifest(out)["source"]["split_sizes"].keys() == {"train", "val"}
    assert "test" not in yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())[
        "split_parts"]


@pytest.mark.parametrize("extra, message", [
    (["--test-fraction", "nan"], "--test-fraction must be at least 0 and below 1, not nan"),
    (["--test-fraction", "inf"], "--test-fraction must be at least 0 and below 1, not inf"),
    (["--test-fraction", "-0.1"], "--test-fraction must be at least 0 and below 1"),
    (["--val-fraction", "0.5", "--test-fraction", "0.5"], "leave nothing for train"),
    (["--test-rows", "3"], "--test-rows needs --train-rows"),
    (["--train-rows", "3", "--test-rows", "-1"], "--test-rows must be at least 0"),
    (["--train-rows", "3", "--test-fraction", "0.2"], ("--test-fraction splits by hash, but "
     "--train-rows splits by rows and would ignore it; give one or the other.")),
    (["--val-fraction", "0.2", "--train-rows", "3", "--val-rows", "2"], ("--val-fraction splits "
     "by hash, but --train-rows splits by rows and would ignore it; give one or the other.")),
])
def test_test_split_options_that_cannot_work(jsonl, tmp_path, extra, message):
    out = tmp_path / "out"
    r = cli("chatml", "--input", jsonl, "--output-dir", out, *extra)
    assert r.code == 2 and message in one_error_line(r)
    assert not out.exists()


def test_a_fraction_in_the_config_file_beside_rows_is_refused(jsonl, tmp_path):
    """A fraction is refused beside the row options wherever it is set, even at its default
    value: the rows would decide the splits alone."""
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"chatml": {"val_fraction": 0.01, "train_rows": 3}}))
    out = tmp_path / "out"
    r = cli("chatml", "--input", jsonl, "--output-dir", out, "--config", config)
    assert r.code == 2 and one_error_line(r).endswith(
        "error: --val-fraction splits by hash, but --train-rows splits by rows and would ignore "
        "it; give one or the other.")
    assert not out.exists()


def test_test_rows_with_an_hf_val_split_follow_the_train_rows(tmp_path):
    """With val from another split of the dataset, test takes the main split's rows after the
    train rows."""
    import datasets

    from tests.helpers.raw import encode, generated

    def split(n: int, tag: str) -> datasets.Dataset:
        return datasets.Dataset.from_dict({
            "image": [{"bytes": encode(generated(i, (40, 56)), "png"), "path": None}
                      for i in range(n)],
            "question": [f"{tag} question {i}" for i in range(n)],
            "answer": [f"{tag} answer {i}" for i in range(n)],
        }, features=datasets.Features({"image": datasets.Image(),
                                       "question": datasets.Value("string"),
                                       "answer": datasets.Value("string")}))

    folder = tmp_path / "hf"
    datasets.DatasetDict({"train": split(8, "t"), "validation": split(3, "v")}).save_to_disk(
        str(folder))
    out = tmp_path / "out"
    run_cli("chatml", "--hf-dataset", str(folder), "--question-column", "question",
            "--answer-column", "answer", "--hf-val-split", "validation", "--train-rows", "5",
            "--test-rows", "2", "--output-dir", str(out), "--quiet")
    samples = read_all(out)
    assert sorted(samples) == sorted([*(f"train-{i:06d}" for i in range(5)),
                                      *(f"val-{i:06d}" for i in range(3)),
                                      "test-000000", "test-000001"])
    questions = {k: turns_of(p["conversation.json"])[0]["content"][-1]["text"]
                 for k, p in samples.items()}
    assert [questions[f"test-{i:06d}"] for i in range(2)] == ["t question 5", "t question 6"]
    assert questions["val-000002"] == "v question 2"
    assert manifest(out)["source"]["split_sizes"] == {"train": 5, "val": 3, "test": 2}
    assert cli("validate", out).code == 0
