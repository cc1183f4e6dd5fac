"""`validate` and `finalize` on a ChatML dataset: Megatron-Bridge's class is not importable here,
so the Energon load check is skipped with a warning and each split's first sample is read with
our reader instead; a missing part is still caught; re-finalizing keeps dataset.yaml."""

from __future__ import annotations

import yaml
from shardcook import ShardWriter, finalize, validate

from tests.helpers.chatml import small_chatml_run
from tests.helpers.raw import run_cli

BRIDGE = "megatron.bridge.data.energon.task_encoder_utils:ChatMLWebdataset"


def test_validate_skips_the_energon_load_with_a_warning(tmp_path):
    out = small_chatml_run(tmp_path)
    report = validate(out)
    assert report.ok, report.problems
    assert len(report.warnings) == 1
    assert report.warnings[0].startswith(
        "Energon's load check was skipped: the sample class "
        "megatron.bridge.data.energon.task_encoder_utils.ChatMLWebdataset is not importable")
    r = run_cli("validate", str(out), "--json")
    assert '"ok": true' in r.stdout
    # re-finalize from the CLI with other split parts: dataset.yaml stays Bridge's
    before = (out / ".nv-meta" / "dataset.yaml").read_text()
    run_cli("finalize", "--force", str(out), "--split-parts", "train:{train,val}-shard-.*")
    assert (out / ".nv-meta" / "dataset.yaml").read_text() == before
    split = yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())["split_parts"]
    assert list(split) == ["train"] and len(split["train"]) == 2


def test_a_sample_without_its_conversation_is_a_problem(tmp_path):
    with ShardWriter(tmp_path, shard_size=2, prefix="train-shard-") as w:
        w.write("train-000000", {"image.jpg": b"\xff\xd8 not checked here"})
        w.write("train-000001", {"image.jpg": b"\xff\xd8", "conversation.json": b"[]"})
    fields = {"imgs": "image.jpg", "conversation": "conversation.json"}
    result = finalize(tmp_path, encoding="chatml", split_parts={"train": "train-shard-.*"},
                      sample_type=BRIDGE, field_map=fields, subflavors={}, validate=False)
    assert result.dataset_yaml == {
        "__module__": "megatron.bridge.data.energon.task_encoder_utils",
        "__class__": "ChatMLWebdataset", "field_map": fields, "subflavors": {}}
    report = validate(tmp_path)
    assert report.problems == [
        "sample train-000000 of the train split lacks the chatml part(s) conversation.json"]
