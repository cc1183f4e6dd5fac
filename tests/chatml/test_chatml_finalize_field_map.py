"""`finalize --encoding chatml` on ChatML shards writes the dataset.yaml a `shardcook chatml` run
writes, field_map included, which Energon's real loader accepts; `validate` reports a ChatML
dataset.yaml that Energon refuses (no field_map nor sample_loader), whether or not
Megatron-Bridge is installed.

Megatron-Bridge is not installed here. Where Energon has to import its ChatMLWebdataset, a
stand-in of the same shape is put under Bridge's module name: Energon's own
`DefaultDecoderWebdatasetFactory` over a ChatMLSample with Bridge's fields, as Bridge declares
it, so Energon's real factory decides what it accepts."""

from __future__ import annotations

import json
import shutil
import sys
import types

import pytest
import yaml
from shardcook import ShardWriter, validate
from shardcook.layouts.chatml import SAMPLE_TYPE, field_map_of

from tests.helpers.chatml import small_chatml_run
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import encode, generated, run_cli

MODULE, _, CLASS = SAMPLE_TYPE.rpartition(":")
REFUSED = ('names megatron.bridge.data.energon.task_encoder_utils.ChatMLWebdataset, which '
           'Energon builds from a field_map or a sample_loader, but it gives neither, so Energon '
           'refuses it ("Either field_map or sample_loader must be provided.")')


@pytest.fixture
def bridge(monkeypatch):
    """Bridge's ChatMLWebdataset importable under its name (see the module)."""
    from megatron.energon import DefaultDecoderWebdatasetFactory, Sample
    from megatron.energon.edataclass import edataclass

    @edataclass
    class ChatMLSample(Sample):
        conversation: str
        imgs: list | None = None
        videos: list | None = None
        audio: bytes | None = None

    class ChatMLWebdataset(DefaultDecoderWebdatasetFactory[ChatMLSample]):
        __sample_type__ = ChatMLSample

    parts = MODULE.split(".")
    for n in range(2, len(parts) + 1):
        monkeypatch.setitem(sys.modules, ".".join(parts[:n]),
                            types.ModuleType(".".join(parts[:n])))
    setattr(sys.modules[MODULE], CLASS, ChatMLWebdataset)
    return ChatMLWebdataset


def chatml_shards(d, n=4):
    with ShardWriter(d, shard_size=2, prefix="train-shard-") as w:
        for i in range(n):
            turns = [{"role": "user", "content": "<image> What is it?"},
                     {"role": "assistant", "content": f"picture {i}"}]
            w.write(f"{i:06d}", {"image.jpg": encode(generated(i, (32, 32))),
                                 "conversation.json": json.dumps(turns).encode()})
    return d


def energon_first_sample(root, split="train"):
    """The first sample of `split` through Energon's real loader (the class dataset.yaml
    names builds it)."""
    from megatron.energon import WorkerConfig, get_loader, get_val_dataset

    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    ds = get_val_dataset(str(root), split_part=split, batch_size=None, worker_config=wc)
    return next(iter(get_loader(ds)))


def dataset_yaml(root):
    return yaml.safe_load((root / ".nv-meta" / "dataset.yaml").read_text())


def test_finalize_encoding_chatml_writes_the_runs_field_map(tmp_path):
    run = small_chatml_run(tmp_path)  # `shardcook chatml` wrote it, with its own dataset.yaml
    again = tmp_path / "again"
    again.mkdir()
    for shard in run.glob("*.tar"):
        shutil.copy(shard, again / shard.name)
    r = cli("finalize", again, "--encoding", "chatml")  # the command finalize suggests
    assert r.code == 0, r.stdout + r.stderr
    ours, runs = dataset_yaml(again), dataset_yaml(run)
    assert ours["field_map"] == runs["field_map"] == {"imgs": "image.jpg",
                                                      "conversation": "conversation.json"}
    assert {k: ours[k] for k in ("__module__", "__class__")} == {
        k: runs[k] for k in ("__module__", "__class__")}


def test_energon_loads_what_finalize_encoding_chatml_writes(tmp_path, bridge):
    root = chatml_shards(tmp_path / "ds")
    assert cli("finalize", root, "--encoding", "chatml").code == 0
    sample = energon_first_sample(root)
    assert isinstance(sample, bridge.__sample_type__)
    assert sample.conversation[1]["content"] == "picture 0"  # Energon's decoder read the JSON
    assert sample.imgs is not None
    report = validate(root)  # Energon's load check runs, with the class importable
    assert report.ok and not report.warnings, (report.problems, report.warnings)


@pytest.mark.parametrize("installed", [False, True], ids=["without-bridge", "with-bridge"])
def test_validate_reports_a_chatml_dataset_yaml_energon_refuses(tmp_path, request, installed):
    root = chatml_shards(tmp_path / "ds")
    assert cli("finalize", root, "--encoding", "chatml").code == 0
    (root / ".nv-meta" / "dataset.yaml").write_text(f"__module__: {MODULE}\n__class__: {CLASS}\n")
    if installed:
        request.getfixturevalue("bridge")
        with pytest.raises(AssertionError, match="Either field_map or sample_loader"):
            energon_first_sample(root)  # Energon itself refuses it
    report = validate(root)
    assert report.problems == [
        f".nv-meta/dataset.yaml {REFUSED}; run `shardcook finalize --force --encoding chatml "
        f"{root}` to write the field_map"]
    r = cli("validate", root)
    assert r.code == 1 and r.stdout.count("problem:") == 1
    assert cli("finalize", root, "--force", "--encoding", "chatml").code == 0  # the fix works
    assert validate(root).ok


@pytest.mark.parametrize(("parts", "fields"), [
    ({"image.png", "conversation.json"},
     {"imgs": "image.png", "conversation": "conversation.json"}),
    ({"jpgs", "videos", "audio.flac", "conversation.json"},
     {"imgs": "jpgs", "videos": "videos", "audio": "audio.flac",
      "conversation": "conversation.json"}),
    ({"mp4s", "conversation.json"}, {"videos": "mp4s", "conversation": "conversation.json"}),
    ({"video.mp4", "audio.wav", "conversation.json"},
     {"videos": "video.mp4", "audio": "audio.wav", "conversation": "conversation.json"}),
])
def test_the_field_map_follows_the_parts(parts, fields):
    assert field_map_of(parts) == fields


def test_parts_that_fit_no_field_map_are_one_sentence(tmp_path):
    root = chatml_shards(tmp_path / "ds", n=2)
    with ShardWriter(root, shard_size=2, prefix="train-more-") as w:
        w.write("x000001", {"jpgs": b"not read here", "conversation.json": b"[]"})
    before = sorted(p.name for p in root.iterdir())
    r = cli("finalize", root, "--encoding", "chatml", "--no-validate")
    assert r.code == 2
    assert one_error_line(r) == (
        f"error: {root} cannot get the chatml layout's field_map from its parts: its samples "
        "hold image.jpg and jpgs, and Megatron-Bridge's ChatMLWebdataset reads images from one "
        "part only; pass --field-map")
    assert sorted(p.name for p in root.iterdir()) == before
    assert not (root / ".nv-meta").exists()
    assert run_cli("validate", str(root), check=False).returncode == 1
