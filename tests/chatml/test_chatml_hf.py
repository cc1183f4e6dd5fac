"""`shardcook chatml` from Hugging Face datasets (save_to_disk folders built here): an image-list
column with typed-part messages, and a single Image column with from/value turns and an id."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from tests.helpers.chatml import (
    SPLIT_ARGS,
    energon_samples,
    energon_twin,
    read_all,
    turns_of,
    unpickle_jpgs,
)
from tests.helpers.raw import encode, generated, photo, report, run_cli
from tests.helpers.shards import assert_same_index, energon_prepare


def test_image_list_column_with_typed_parts(tmp_path):
    import datasets

    pics = [encode(photo(i), "jpg") for i in range(3)] + [encode(generated(i), "png")
                                                          for i in range(3, 6)]
    rows_images, rows_messages = [], []
    for i in range(10):
        n = 1 + i % 3
        if i == 7:
            n = 0  # a text-only conversation: an empty jpgs list
        rows_images.append([{"bytes": pics[(i + j) % 6], "path": None} for j in range(n)])
        placeholders = n if i != 4 else n + 1  # row 4: one image part too many
        rows_messages.append([
            {"role": "user", "content": [{"type": "image", "text": None}] * placeholders
             + [{"type": "text", "text": f"Question {i}: was ist das?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": f"Antwort {i} ✓"}]},
        ])
    part = {"type": datasets.Value("string"), "text": datasets.Value("string")}
    features = datasets.Features({
        "images": datasets.List(datasets.Image()),
        "messages": datasets.List({"role": datasets.Value("string"),
                                   "content": datasets.List(part)}),
    })
    folder = tmp_path / "hf"
    datasets.Dataset.from_dict({"images": rows_images, "messages": rows_messages},
                               features=features).save_to_disk(str(folder))
    out = tmp_path / "out"
    run_cli("chatml", "--hf-dataset", str(folder), "--output-dir", str(out), "--shard-size", "3",
            "--val-fraction", "0.25", "--quiet")
    rep = report(out)
    assert rep["num_inputs"] == 10
    assert rep["skipped_by_reason"] == {"image_count_mismatch": 1}
    assert "field_map:\n  imgs: jpgs\n" in (out / ".nv-meta" / "dataset.yaml").read_text()
    samples = read_all(out)
    assert len(samples) == 9
    seen = set()
    for parts in samples.values():
        assert list(parts) == ["jpgs", "conversation.json"]
        conv = turns_of(parts["conversation.json"])
        i = int(conv[0]["content"][-1]["text"].split()[1].rstrip(":"))
        seen.add(i)
        images = unpickle_jpgs(parts["jpgs"])
        assert len(images) == len(rows_images[i])
        assert sum(p == {"type": "image"} for p in conv[0]["content"]) == len(images)
        assert conv[1] == {"role": "assistant",
                           "content": [{"type": "text", "text": f"Antwort {i} ✓"}]}
        for data, ref in zip(images, rows_images[i], strict=True):
            a = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=float)
            b = np.asarray(Image.open(io.BytesIO(ref["bytes"])).convert("RGB"), dtype=float)
            assert a.shape == b.shape and np.abs(a - b).mean() < 8
    assert seen == set(range(10)) - {4}
    theirs = energon_twin(out, tmp_path / "energon")
    ref = energon_prepare(theirs, *SPLIT_ARGS)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    assert_same_index(out, theirs)
    assert energon_samples(theirs) == samples


def test_single_image_column_with_ids(tmp_path):
    import datasets

    n = 12
    data = {
        "id": [f"row-{i}" for i in range(n)],
        "image": [{"bytes": encode(generated(i, (50, 70 + i)), "jpg"), "path": None}
                  for i in range(n)],
        "conversations": [[{"from": "human", "value": f"<image>Hallo {i}"},
                           {"from": "gpt", "value": "Grüß dich"}] for i in range(n)],
    }
    features = datasets.Features({
        "id": datasets.Value("string"), "image": datasets.Image(),
        "conversations": datasets.List({"from": datasets.Value("string"),
                                        "value": datasets.Value("string")})})
    folder = tmp_path / "hf"
    datasets.Dataset.from_dict(data, features=features).save_to_disk(str(folder))
    out = tmp_path / "out"
    run_cli("chatml", "--hf-dataset", str(folder), "--output-dir", str(out), "--val-fraction",
            "0.3", "--image-format", "png", "--max-samples", "10", "--quiet")
    from shardcook.sources.chat import split_of

    samples = read_all(out)
    splits = [split_of(f"row-{i}", 0.3) for i in range(10)]
    assert 0 < splits.count("val") < 10
    assert sorted(samples) == sorted(
        [f"train-{k:06d}" for k in range(splits.count("train"))]
        + [f"val-{k:06d}" for k in range(splits.count("val"))])
    assert "imgs: image.png" in (out / ".nv-meta" / "dataset.yaml").read_text()
    train_rows = [i for i in range(10) if splits[i] == "train"]
    for k, i in enumerate(train_rows):  # train keys follow row order
        parts = samples[f"train-{k:06d}"]
        assert turns_of(parts["conversation.json"])[0]["content"] == [
            {"type": "image"}, {"type": "text", "text": f"Hallo {i}"}]
        assert Image.open(io.BytesIO(parts["image.png"])).size == (70 + i, 50)
