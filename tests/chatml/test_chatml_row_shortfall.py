"""`--train-rows`/`--val-rows` larger than the inputs: the run uses every row (the options cap
the splits) and says so, in the log and in the manifest's source, instead of no word at all."""

from __future__ import annotations

import json

from tests.helpers.chatml import turns, write_images, write_jsonl
from tests.helpers.raw import run_cli


def test_asking_for_more_rows_than_there_are_is_a_warning(tmp_path):
    names = write_images(tmp_path / "imgs", 7, photos=0)
    src = write_jsonl(tmp_path / "data.jsonl",
                      [{"image": f"imgs/{n}", "conversation": turns(1)} for n in names])
    out = tmp_path / "out"
    r = run_cli("chatml", "--input", str(src), "--output-dir", str(out), "--train-rows", "100",
                "--val-rows", "100", "--quiet")
    expected = ("asked for --train-rows 100 but only 7 train rows and --val-rows 100 but only 0 "
                "val rows: the inputs hold fewer, so every one is used; lower the option to "
                "silence this.")
    assert f"WARNING: {expected}" in r.stderr.splitlines(), r.stderr
    manifest = json.loads((out / ".shardcook" / "manifest.json").read_text())
    assert manifest["source"]["rows_shortfall"] == expected
    assert manifest["num_samples"] == 7


def test_rows_within_the_inputs_give_no_warning(tmp_path):
    names = write_images(tmp_path / "imgs", 7, photos=0)
    src = write_jsonl(tmp_path / "data.jsonl",
                      [{"image": f"imgs/{n}", "conversation": turns(1)} for n in names])
    out = tmp_path / "out"
    r = run_cli("chatml", "--input", str(src), "--output-dir", str(out), "--train-rows", "5",
                "--val-rows", "2", "--quiet")
    assert "rows" not in r.stderr, r.stderr
    manifest = json.loads((out / ".shardcook" / "manifest.json").read_text())
    assert "rows_shortfall" not in manifest["source"]


def test_an_empty_val_by_rows_names_val_rows(tmp_path):
    names = write_images(tmp_path / "imgs", 4, photos=0)
    src = write_jsonl(tmp_path / "data.jsonl",
                      [{"image": f"imgs/{n}", "conversation": turns(1)} for n in names])
    out = tmp_path / "out"
    r = run_cli("chatml", "--input", str(src), "--output-dir", str(out), "--train-rows", "4",
                "--val-rows", "0", "--quiet")
    assert "no sample went to val (see --val-rows)" in r.stderr, r.stderr
    assert "--val-fraction" not in r.stderr, r.stderr
