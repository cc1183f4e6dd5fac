"""Helpers for the `shardcook chatml` tests: inputs, reading shards back, Energon's reference."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path

from tests.helpers.raw import encode, energon_parts, generated, photo, run_cli

SPLIT_ARGS = ("--split-parts", "train:train-shard-.*", "--split-parts", "val:val-shard-.*")


def turns(n_images: int, text: str = "What is in the picture? Größe ✓") -> list[dict]:
    """A ShareGPT-style conversation with `n_images` `<image>` placeholders."""
    return [{"from": "human", "value": "<image>\n" * n_images + text},
            {"from": "gpt", "value": "Ein Bild — 写真"}]


def write_images(folder: Path, n: int, photos: int = 3) -> list[str]:
    """n JPEG/PNG files (the first `photos` real photos), returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i in range(n):
        fmt = "png" if i % 3 == 2 else "jpg"
        arr = photo(i) if i < photos else generated(i, (40 + 8 * i, 64))
        (folder / f"img{i}.{fmt}").write_bytes(encode(arr, fmt))
        names.append(f"img{i}.{fmt}")
    return names


def write_jsonl(path: Path, records: list) -> Path:
    """One JSON object per line (a str record is written as is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n"
                     for r in records)
    return path


class BytesOnly(pickle.Unpickler):
    """A restricted unpickler: no class may be loaded (a list of bytes needs none)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused {module}.{name}")


def unpickle_jpgs(data: bytes) -> list[bytes]:
    value = BytesOnly(io.BytesIO(data)).load()
    assert isinstance(value, list) and all(type(b) is bytes for b in value), type(value)
    return value


def turns_of(conversation_json: bytes) -> list[dict]:
    """The turns of a conversation.json part (the object's `conversations`)."""
    doc = json.loads(conversation_json.decode("utf-8"))
    assert set(doc) == {"conversations", "media"}, list(doc)
    return doc["conversations"]


def media_of(conversation_json: bytes) -> dict:
    """The media record of a conversation.json part."""
    return json.loads(conversation_json.decode("utf-8"))["media"]


def read_all(out: Path) -> dict[str, dict[str, bytes]]:
    """{key: parts} over every shard, checking that a shard's keys all belong to its split."""
    from shardcook import read_shard

    samples = {}
    for shard in sorted(out.glob("*.tar")):
        split = shard.name.split("-shard-")[0]
        for key, parts in read_shard(shard):
            assert key.startswith(f"{split}-"), (shard.name, key)
            assert key not in samples
            samples[key] = parts
    return samples


def energon_twin(out: Path, dest: Path) -> Path:
    """A copy of the shards alone (no metadata, no .tar.idx) for `energon prepare`."""
    shutil.copytree(out, dest, ignore=shutil.ignore_patterns(".shardcook", ".nv-meta", "*.idx"))
    return dest


def energon_samples(root: Path) -> dict[str, dict[str, bytes]]:
    """Every sample of every split through Energon's own loader (CrudeWebdataset, raw bytes)."""
    samples = {}
    for key, (split, parts) in energon_parts(root).items():
        assert key.startswith(f"{split}-")
        samples[key] = parts
    return samples


def small_chatml_run(tmp_path: Path) -> Path:
    """A `shardcook chatml` run of 6 single-image conversations, half of them in val."""
    names = write_images(tmp_path / "in", 2, photos=1)
    jsonl = write_jsonl(tmp_path / "in" / "d.jsonl",
                        [{"id": f"x{i}", "image": names[i % 2], "conversation": turns(1)}
                         for i in range(6)])
    out = tmp_path / "out"
    run_cli("chatml", "--input", str(jsonl), "--output-dir", str(out), "--val-fraction", "0.5",
            "--shard-size", "2", "--quiet")
    return out
