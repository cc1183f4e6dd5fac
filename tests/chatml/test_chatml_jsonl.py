"""`shardcook chatml` from JSONL end to end: layouts, keys and shard names, splits by hash,
skips, dataset.yaml, Energon's own prepare and loader on the same shards, resume."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import yaml
from PIL import Image

from tests.helpers.chatml import (
    SPLIT_ARGS,
    energon_samples,
    energon_twin,
    read_all,
    turns,
    turns_of,
    unpickle_jpgs,
    write_images,
    write_jsonl,
)
from tests.helpers.raw import photo, report, run_cli, shard_hashes
from tests.helpers.shards import assert_same_index, energon_prepare

SINGLE_YAML = """__module__: megatron.bridge.data.energon.task_encoder_utils
__class__: ChatMLWebdataset
field_map:
  imgs: image.jpg
  conversation: conversation.json
subflavors: {}
"""


def expected_split(sample_id: str, fraction: float) -> str:
    h = int(hashlib.sha256(sample_id.encode()).hexdigest()[:16], 16)
    return "val" if h < fraction * 2**64 else "train"


def single_image_input(tmp_path, n=24):
    src = tmp_path / "in"
    names = write_images(src / "images", 6)
    records = []
    for i in range(n):
        img = f"images/{names[i % len(names)]}"
        if i % 4 == 0:  # role/content with typed parts
            records.append({"id": f"sample-{i}", "images": [img], "messages": [
                {"role": "user", "content": [{"type": "image"},
                                             {"type": "text", "text": f"Describe {i}"}]},
                {"role": "assistant", "content": f"Answer {i} ü"}]})
        else:  # from/value with a placeholder, a single `image`
            records.append({"id": f"sample-{i}", "image": img, "conversations": turns(1)})
    records[5]["conversations"] = turns(2)  # two placeholders, one image
    records[9] = '{"id": "broken", "image": '  # not JSON
    records[13]["image"] = "images/missing.jpg"
    return write_jsonl(src / "data.jsonl", records), records


def test_single_image_jsonl_end_to_end(tmp_path):
    jsonl, records = single_image_input(tmp_path)
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--shard-size", "4",
            "--val-fraction", "0.3", "--quiet", "--max-pixels", "4096")
    ids = [r["id"] if isinstance(r, dict) else "9" for r in records]  # a bad line's id: its index
    splits = [expected_split(i, 0.3) for i in ids]
    n_train, n_val = splits.count("train"), splits.count("val")
    assert n_train and n_val, splits

    rep = report(out)
    assert rep["num_inputs"] == 24
    assert rep["skipped_by_reason"] == {"bad_json": 1, "image_count_mismatch": 1,
                                        "unreadable_image": 1}
    mismatch = next(s for s in rep["skipped"] if s["reason"] == "image_count_mismatch")
    assert mismatch["detail"] == "2 image part(s) in the conversation, 1 image(s)"
    assert mismatch["source"].endswith("data.jsonl:6")

    # keys: each split's inputs in input order, numbered from 0; skipped inputs leave gaps
    planned = {}
    for split in ("train", "val"):
        members = [i for i, s in enumerate(splits) if s == split]
        planned.update({i: f"{split}-{n:06d}" for n, i in enumerate(members)})
    skipped_inputs = {5, 9, 13}
    samples = read_all(out)
    assert sorted(samples) == sorted(planned[i] for i in range(24) if i not in skipped_inputs)
    # shard names: <split>-shard-NNNNNN.tar, 4 planned inputs per shard, no empty shard
    expect_shards = {}
    for i in range(24):
        if i in skipped_inputs:
            continue
        split, n = planned[i].split("-")
        name = f"{split}-shard-{int(n) // 4:06d}.tar"
        expect_shards[name] = expect_shards.get(name, 0) + 1
    assert rep["shards"] == expect_shards
    assert sorted(p.name for p in out.glob("*.tar")) == sorted(expect_shards)

    for i, record in enumerate(records):
        if i in skipped_inputs:
            continue
        parts = samples[planned[i]]
        assert list(parts) == ["image.jpg", "conversation.json"]
        text = parts["conversation.json"].decode("utf-8")
        assert "\\u" not in text  # UTF-8, not ASCII-escaped
        conv = turns_of(parts["conversation.json"])
        assert [t["role"] for t in conv] == ["user", "assistant"]
        assert conv[0]["content"][0] == {"type": "image"}
        if i % 4 == 0:
            assert conv[0]["content"][1] == {"type": "text", "text": f"Describe {i}"}
            assert conv[1]["content"] == [{"type": "text", "text": f"Answer {i} ü"}]
        else:
            assert conv == [
                {"role": "user", "content": [
                    {"type": "image"},
                    {"type": "text", "text": "What is in the picture? Größe ✓"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Ein Bild — 写真"}]}]
        img = Image.open(io.BytesIO(parts["image.jpg"]))
        assert img.format == "JPEG"
        src = Image.open(jsonl.parent / (record.get("image") or record["images"][0]))
        sw, sh = src.size
        w, h = img.size
        assert w * h <= 4096
        if sw * sh > 4096:  # scaled down, aspect ratio kept to within rounding
            assert abs(w / h - sw / sh) < 0.05 * (sw / sh) and w * h > 4096 * 0.9
        else:
            assert (w, h) == (sw, sh)

    meta = out / ".nv-meta"
    assert (meta / "dataset.yaml").read_text() == SINGLE_YAML
    split_yaml = yaml.safe_load((meta / "split.yaml").read_text())
    last = max(int(s[12:18]) for s in expect_shards if s[0] == "t")
    assert split_yaml["split_parts"]["train"] == [f"train-shard-{{000000..{last:06d}}}.tar"]

    # Energon's own prepare on a copy of the shards: identical .tar.idx, .info.json, split.yaml,
    # index.sqlite; then its loader reads every sample with exactly our parts
    theirs = energon_twin(out, tmp_path / "energon")
    ref = energon_prepare(theirs, *SPLIT_ARGS)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert_same_index(out, theirs)
    assert energon_samples(theirs) == samples


def test_multi_image_layout_and_png_single(tmp_path):
    src = tmp_path / "in"
    names = write_images(src, 5, photos=2)
    records = [
        {"image": names[0], "conversation": turns(1)},
        {"images": [names[1], names[2], names[3]], "conversation": [
            {"role": "system", "content": "You compare pictures."},
            {"role": "user", "content": "<image><image> and <image>: which differ?"},
            {"role": "assistant", "content": "The third."}]},
        {"images": [], "conversation": [{"role": "user", "content": "Just text."},
                                        {"role": "assistant", "content": "Fine."}]},
        {"images": [names[4], names[0]], "conversation": turns(1)},  # mismatch
    ]
    jsonl = write_jsonl(src / "multi.jsonl", records)
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--val-fraction", "0",
            "--image-format", "png", "--quiet")
    assert (out / ".nv-meta" / "dataset.yaml").read_text() == SINGLE_YAML.replace(
        "image.jpg", "jpgs")
    assert yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())["split_parts"] == {
        "train": ["train-shard-000000.tar"]}
    samples = read_all(out)
    assert sorted(samples) == ["train-000000", "train-000001", "train-000002"]
    assert report(out)["skipped_by_reason"] == {"image_count_mismatch": 1}
    counts = []
    for key in sorted(samples):
        parts = samples[key]
        assert list(parts) == ["jpgs", "conversation.json"]
        images = unpickle_jpgs(parts["jpgs"])
        counts.append(len(images))
        for data in images:  # JPEG even though --image-format png (that is for one image)
            assert Image.open(io.BytesIO(data)).format == "JPEG"
    assert counts == [1, 3, 0]
    three = unpickle_jpgs(samples["train-000001"]["jpgs"])
    for data, name in zip(three, names[1:4], strict=True):
        a = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=float)
        b = np.asarray(Image.open(src / name).convert("RGB"), dtype=float)
        assert a.shape == b.shape and np.abs(a - b).mean() < 8  # same picture, in order
    conv = turns_of(samples["train-000001"]["conversation.json"])
    assert conv[0] == {"role": "system", "content": [
        {"type": "text", "text": "You compare pictures."}]}
    assert conv[1]["content"] == [{"type": "image"}, {"type": "image"},
                                  {"type": "text", "text": "and"}, {"type": "image"},
                                  {"type": "text", "text": ": which differ?"}]

    # one-image samples in png
    out2 = tmp_path / "out2"
    jsonl2 = write_jsonl(src / "single.jsonl", records[:1])
    run_cli("chatml", "--input", str(jsonl2), "--output-dir", str(out2), "--val-fraction", "0",
            "--image-format", "png", "--quiet")
    (parts,) = read_all(out2).values()
    assert list(parts) == ["image.png", "conversation.json"]
    a = np.asarray(Image.open(io.BytesIO(parts["image.png"])).convert("RGB"))
    assert np.array_equal(a, np.asarray(Image.open(src / names[0]).convert("RGB")))


def test_resume_and_determinism(tmp_path):
    jsonl, _ = single_image_input(tmp_path, n=16)
    a, b = tmp_path / "a", tmp_path / "b"
    args = ["chatml", "--input", str(jsonl), "--shard-size", "3", "--val-fraction", "0.3",
            "--quiet", "--workers", "2"]
    run_cli(*args, "--output-dir", str(a))
    run_cli(*args, "--output-dir", str(b), "--no-finalize")
    # an interrupted run: one unit's shard and marker gone; the rerun redoes only that unit
    first = sorted(b.glob("*.tar"))[1]
    first.unlink()
    markers = sorted((b / ".shardcook" / "progress").glob("*.json"))
    (b / ".shardcook" / "progress" / markers[1].name).unlink()
    run_cli(*args, "--output-dir", str(b))
    rep = report(b)
    assert rep["units"]["resumed"] == rep["units"]["total"] - 1
    assert shard_hashes(b) == shard_hashes(a)
    for name in (".info.json", "split.yaml", "dataset.yaml"):
        assert (b / ".nv-meta" / name).read_bytes() == (a / ".nv-meta" / name).read_bytes()
    # other options are refused on resume
    r = run_cli(*[x if x != "0.3" else "0.5" for x in args], "--output-dir", str(b), check=False)
    assert r.returncode == 2 and "different options" in r.stderr and "val_fraction" in r.stderr


def test_bad_setup_is_one_sentence(tmp_path):
    r = run_cli("chatml", "--output-dir", str(tmp_path / "o"), check=False)
    assert r.returncode == 2 and "exactly one of --input" in r.stderr
    r = run_cli("chatml", "--input", str(tmp_path / "none.jsonl"), "--output-dir",
                str(tmp_path / "o"), check=False)
    assert r.returncode == 2 and "is not a file" in r.stderr
    jsonl = write_jsonl(tmp_path / "x.jsonl", [{"image": "a.jpg", "conversation": turns(1)}])
    r = run_cli("chatml", "--input", str(jsonl), "--output-dir", str(tmp_path / "o"),
                "--val-fraction", "1", check=False)
    assert r.returncode == 2 and "--val-fraction must be" in r.stderr
    assert not (tmp_path / "o").exists()


def test_no_empty_shard_and_exif_orientation(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    rotated = Image.fromarray(photo(1))  # a landscape photo
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated by 90°: portrait on display
    rotated.save(src / "rot.jpg", exif=exif.tobytes())
    stored_w, stored_h = rotated.size
    records = [{"image": "rot.jpg", "conversation": turns(1)},
               {"image": "rot.jpg", "conversation": turns(0)},  # skipped: its unit is empty
               {"image": "rot.jpg", "conversation": turns(1)}]
    jsonl = write_jsonl(src / "d.jsonl", records)
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--shard-size", "1",
            "--val-fraction", "0", "--max-pixels", "20000", "--quiet")
    assert sorted(p.name for p in out.glob("*.tar")) == ["train-shard-000000.tar",
                                                         "train-shard-000002.tar"]
    assert yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())["split_parts"] == {
        "train": ["train-shard-000000.tar", "train-shard-000002.tar"]}
    parts = read_all(out)["train-000002"]
    w, h = Image.open(io.BytesIO(parts["image.jpg"])).size
    assert w * h <= 20000 and w * h > 18000
    # oriented: the displayed picture is stored_h wide and stored_w high
    assert abs(w / h - stored_h / stored_w) < 0.05 * (stored_h / stored_w)
