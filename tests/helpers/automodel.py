"""What the `automodel` layout's tests share: the input folder, `encode --layout automodel` as a
command, and the cache NeMo AutoModel's preprocessing tool writes for the same inputs, computed
with its vendored processor, bucketing and caption loader, one image at a time as the tool's
`_process_image` does."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from shardcook.encoders.flux import sample_seed

#: (width, height) of the inputs: several aspect ratios, two of them in one bucket (1:2).
SIZES = [(300, 200), (128, 256), (100, 100), (333, 187), (90, 200), (640, 250)]
#: bf16 CPU kernels round differently with other thread counts: both sides use one.
THREADS = 1


def make_inputs(folder: Path) -> None:
    """Images of several aspect ratios in two folders, JPEG and PNG; captions from a JSONL
    `<prefix>_internvl.json`, else the file name; one file that is no image."""
    rng = np.random.default_rng(0)
    (folder / "sub").mkdir(parents=True)
    for i, (w, h) in enumerate(SIZES):
        pixels = Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))
        if i % 2:
            pixels.save(folder / f"shot_sample{i}.png")
        else:
            pixels.save(folder / "sub" / f"a_cat_{i}.jpg", quality=90)
    (folder / "shot_internvl.json").write_text("\n".join(json.dumps(line) for line in [
        {"file_name": "shot_sample1.png", "internvl": "a red circle on blue"},
        {"file_name": "shot_sample3.png", "internvl": "a green star", "usr": "no"},
        {"file_name": "missing.png", "internvl": "nothing"}]) + "\nnot json\n")
    (folder / "zz_broken.png").write_bytes(b"not an image")


def encode_args(model_type: str, inputs: Path, out: Path, model_root: Path, seed: int,
                *extra: str) -> list[str]:
    return ["encode", "--layout", "automodel", "--model-type", model_type, "--model-path",
            str(model_root), "--input-dir", str(inputs), "--output-dir", str(out), "--device",
            "cpu", "--seed", str(seed), "--quiet", *extra]


def run_encode(model_type: str, inputs: Path, out: Path, model_root: Path, seed: int,
               *extra: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
    return subprocess.run(
        [sys.executable, "-m", "shardcook",
         *encode_args(model_type, inputs, out, model_root, seed, *extra)],
        check=True, timeout=600, env=env, capture_output=True, text=True)


def media_files(folder: Path) -> list[Path]:
    """The tool's `_get_media_files(image_dir, IMAGE_EXTENSIONS)`, as it is written there."""
    found = []
    for root, _, files in os.walk(folder):
        for file in files:
            if "." in file and file.lower().rsplit(".", 1)[-1] in {"jpg", "jpeg", "png", "webp",
                                                                    "bmp"}:
                found.append(Path(root) / file)
    return sorted(found)


#: Keys a file holds after `prompt_embeds` beyond the processor's, from the processor's dict.
Added = Callable[[dict[str, Any]], dict[str, Any]]


def reference_cache(processor: Any, models: dict, inputs: Path, out: Path, max_pixels: int,
                    seed: int, added: Added | None = None) -> list[dict]:
    """What the tool's `preprocess_dataset` writes for `inputs` on one device with `processor`
    and its `models`: [{"file": cache dict, "entry": metadata entry}] in input order. A
    processor that samples draws from the global generator, seeded per image as shardcook
    seeds it (the tool leaves it unseeded)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        return _reference_cache(processor, models, inputs, out, max_pixels, seed, added)
    finally:
        torch.set_num_threads(threads)


def _reference_cache(processor: Any, models: dict, inputs: Path, out: Path, max_pixels: int,
                     seed: int, added: Added | None) -> list[dict]:
    from tests.vendored.automodel.datasets.diffusion.multi_tier_bucketing import (
        MultiTierBucketCalculator,
    )
    from tests.vendored.automodel.processors.caption_loaders import JSONLCaptionLoader

    calculator = MultiTierBucketCalculator(quantization=64, max_pixels=max_pixels)
    files = media_files(inputs)
    captions = JSONLCaptionLoader(jsonl_suffix="_internvl.json").load_captions(files,
                                                                              "internvl")
    results = []
    for index, path in enumerate(files):
        try:
            image = Image.open(path).convert("RGB")
        except OSError:
            continue  # the tool logs the error and goes on
        bucket = calculator.get_bucket_for_image(*image.size)
        width, height = bucket["resolution"]
        resized, offset = calculator.resize_and_crop(image, width, height, crop_mode="center")
        torch.manual_seed(sample_seed(seed, f"{index:010d}"))
        latent = processor.encode_image(processor.preprocess_image(resized), models, "cpu")
        caption = captions.get(path.name) or Path(path).stem.replace("_", " ")
        text = processor.encode_text(caption, models, "cpu")
        resolution = f"{width}x{height}"
        name = hashlib.md5(f"{path.absolute()}_{resolution}".encode()).hexdigest()
        cache_file = out / resolution / f"{name}.pt"
        metadata = {"original_resolution": image.size, "bucket_resolution": (width, height),
                    "crop_offset": offset, "prompt": caption,
                    "image_path": str(path.absolute()), "bucket_id": bucket["id"],
                    "aspect_ratio": bucket["aspect_ratio"]}
        file = processor.get_cache_data(latent, text, metadata)
        if added is not None:
            keys = list(file)
            at = keys.index("prompt_embeds") + 1
            file = {**{k: file[k] for k in keys[:at]}, **added(file),
                    **{k: file[k] for k in keys[at:]}}
        results.append({"file": file, "entry": {
            "cache_file": str(cache_file), "image_path": str(path.absolute()),
            "bucket_resolution": [width, height], "original_resolution": list(image.size),
            "prompt": caption, "bucket_id": bucket["id"],
            "aspect_ratio": bucket["aspect_ratio"], "pixels": width * height,
            "model_type": processor.model_type}})
    return results


def assert_same(ours: dict, theirs: dict, where: str) -> None:
    """The same keys in the same order, tensors of the same dtype, shape and values, each
    holding only its own bytes (a row saved as a view of its batch drags the whole batch into
    the file, which AutoModel's one-at-a-time tool never does), other values of the same type
    and value."""
    assert list(ours) == list(theirs), where
    for key, value in theirs.items():
        got = ours[key]
        if isinstance(value, torch.Tensor):
            assert got.dtype == value.dtype and got.shape == value.shape, (where, key)
            assert torch.equal(got, value), (where, key)
            assert got.untyped_storage().nbytes() == got.nbytes, (where, key, "storage")
        else:
            assert type(got) is type(value) and got == value, (where, key)


def cache_hashes(out: Path) -> dict[str, str]:
    """sha256 of every file of the cache (not `.shardcook/`), by path inside it."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.rglob("*"))
            if p.is_file() and ".shardcook" not in p.relative_to(out).parts}


def copy_of(cache: Path, out: Path) -> Path:
    """A copy of `cache` at `out` whose metadata entries name the copy's files."""
    shutil.copytree(cache, out)
    for shard in out.glob("metadata_shard_*.json"):
        shard.write_text(shard.read_text().replace(str(cache), str(out)))
    return out


def entries(cache: Path) -> list[dict]:
    """The entries of the cache's first metadata shard."""
    return json.loads((cache / "metadata_shard_0000.json").read_text())
