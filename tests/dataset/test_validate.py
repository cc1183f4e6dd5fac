"""validate catches each kind of damage, and summarizes a sound dataset."""

from __future__ import annotations

import io
import json
import shutil

import pytest
import torch
from shardcook import ShardWriter, finalize, validate
from shardcook.dataset import info

from tests.helpers.shards import write_shards


def encoded_parts(i):
    def pth(t):
        buf = io.BytesIO()
        torch.save(t.clone(), buf)
        return buf.getvalue()

    return {
        "latents.pth": pth(torch.zeros(16, 4, 4, dtype=torch.bfloat16)),
        "prompt_embeds.pth": pth(torch.zeros(8, 32, dtype=torch.bfloat16)),
        "pooled_prompt_embeds.pth": pth(torch.zeros(24, dtype=torch.bfloat16)),
        "caption.txt": f"caption {i}".encode(),
        "meta.json": json.dumps(
            {"source": f"img{i}.jpg", "orig_size": [64, 64], "crop": [0, 0], "size": [32, 32]}
        ).encode(),
    }


@pytest.fixture
def dataset(tmp_path):
    d = tmp_path / "ds"
    write_shards(d, n_shards=4, per_shard=3, parts=encoded_parts)
    finalize(d, encoding="preencoded", split=(0.5, 0.25, 0.25))
    return d


def test_a_sound_dataset_validates_with_a_summary(dataset):
    report = validate(dataset, deep=True)
    assert report.ok, report.problems
    s = report.summary
    assert (s.samples, s.shards, s.subflavors) == (12, 4, {"encoding": "preencoded"})
    assert {n: (x.shards, x.samples) for n, x in s.splits.items()} == {
        "train": (2, 6),
        "val": (1, 3),
        "test": (1, 3),
    }
    assert s.parts["latents.pth"] == "bfloat16[16, 4, 4]"
    assert s.parts["pooled_prompt_embeds.pth"] == "bfloat16[24]"
    assert s.bytes_on_disk == sum(p.stat().st_size for p in dataset.glob("*.tar"))
    assert info(dataset).to_dict() == s.to_dict()


def corrupt(d, how):
    if how == "truncated shard":
        p = d / "000001.tar"
        p.write_bytes(p.read_bytes()[:-2000])
    elif how == "missing idx":
        (d / "000002.tar.idx").unlink()
    elif how == "altered idx":
        p = d / "000002.tar.idx"
        b = bytearray(p.read_bytes())
        b[8] ^= 1
        p.write_bytes(bytes(b))
    elif how == "count mismatch":
        p = d / ".nv-meta" / ".info.json"
        info = json.loads(p.read_text())
        info["shard_counts"]["000003.tar"] = 4
        p.write_text(json.dumps(info, indent=2))
    elif how == "missing info":
        (d / ".nv-meta" / ".info.json").unlink()
    elif how == "shard deleted":
        (d / "000003.tar").unlink()
    elif how == "unlisted shard":
        shutil.copy(d / "000000.tar", d / "extra.tar")
    elif how == "duplicate key":
        # A shard holding a key of shard 0, smuggled into the metadata by hand.
        with ShardWriter(d, first_shard=4) as w:
            w.write("0000000001", encoded_parts(1))
        finalize_info = json.loads((d / ".nv-meta" / ".info.json").read_text())
        finalize_info["shard_counts"]["000004.tar"] = 1
        (d / ".nv-meta" / ".info.json").write_text(json.dumps(finalize_info))
        (d / "000004.tar.idx").write_bytes(
            (0).to_bytes(8, "little") + (4608 * 2).to_bytes(8, "little")
        )


@pytest.mark.parametrize(
    "how, expected",
    [
        ("truncated shard", "000001.tar: "),
        ("missing idx", "000002.tar.idx is missing"),
        ("altered idx", "000002.tar.idx entry 1 does not point"),
        ("count mismatch", ".info.json says 4 samples but the shard holds 3"),
        ("missing info", "no .nv-meta/.info.json"),
        ("shard deleted", "000003.tar is listed in .info.json but missing"),
        ("unlisted shard", "extra.tar is not listed"),
        ("duplicate key", 'duplicate sample key "0000000001"'),
    ],
)
def test_each_corruption_is_caught(dataset, how, expected):
    corrupt(dataset, how)
    report = validate(dataset)
    assert not report.ok
    assert any(expected in p for p in report.problems), report.problems


def test_deep_finds_a_sample_missing_a_part(tmp_path):
    d = tmp_path / "ds"

    def parts(i):
        p = encoded_parts(i)
        if i == 4:
            del p["prompt_embeds.pth"]
        return p

    write_shards(d, n_shards=2, per_shard=3, parts=parts)
    finalize(d, encoding="preencoded")  # one sample per split is fine ...
    report = validate(d, deep=True)  # ... reading all of them is not
    assert report.problems == ["000001.tar: sample 0000000004 lacks prompt_embeds.pth"]


def test_deep_finds_a_pth_that_is_not_a_tensor(tmp_path):
    d = tmp_path / "ds"

    def parts(i):
        p = encoded_parts(i)
        if i == 2:
            p["latents.pth"] = b"not a tensor"
        return p

    write_shards(d, n_shards=1, per_shard=3, parts=parts)
    finalize(d, encoding="preencoded")
    report = validate(d, deep=True)
    assert report.problems == [
        "000000.tar: sample 0000000002 part latents.pth is not a plain saved tensor"
    ]
