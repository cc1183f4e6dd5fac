"""Helpers for the `shardcook raw` tests: input photos, running the CLI, reading back."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image

if TYPE_CHECKING:
    from shardcook.config import RunConfig

PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "camera",
          "hubble_deep_field", "colorwheel")


def photo(i: int) -> np.ndarray:
    """A real photo from scikit-image (cycled), RGB uint8; odd rounds are flipped so repeats
    differ."""
    import skimage.data

    arr = getattr(skimage.data, PHOTOS[i % len(PHOTOS)])()
    if arr.ndim == 2:
        arr = np.stack([arr] * 3, axis=-1)
    arr = arr[..., :3]
    return arr[:, ::-1] if (i // len(PHOTOS)) % 2 else arr


def generated(i: int, hw=(96, 128)) -> np.ndarray:
    """A deterministic generated image (gradients and noise)."""
    rng = np.random.default_rng(i)
    y, x = np.mgrid[0:hw[0], 0:hw[1]]
    base = np.stack([x * 255 // hw[1], y * 255 // hw[0], (x + y) % 256], axis=-1)
    return (base + rng.integers(0, 40, size=base.shape)).clip(0, 255).astype(np.uint8)


def encode(arr: np.ndarray, fmt: str = "jpg") -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format={"jpg": "JPEG", "png": "PNG", "webp": "WEBP",
                                           "bmp": "BMP", "tif": "TIFF", "gif": "GIF"}[fmt])
    return buf.getvalue()


def make_folder(root: Path, n: int, *, layout: str = "images+captions", photos: int = 4,
                fmts=("jpg", "png", "webp")) -> Path:
    """n inputs: the first `photos` are real photos, the rest generated; captions for all."""
    img_dir = root / "images" if layout == "images+captions" else root
    cap_dir = root / "captions" if layout == "images+captions" else root
    img_dir.mkdir(parents=True, exist_ok=True)
    cap_dir.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        fmt = fmts[i % len(fmts)]
        arr = photo(i) if i < photos else generated(i)
        (img_dir / f"{i:04d}.{fmt}").write_bytes(encode(arr, fmt))
        (cap_dir / f"{i:04d}.txt").write_text(f"caption number {i}\n", encoding="utf-8")
    return root


def run_cli(*args: str, env_extra: dict | None = None, check: bool = True,
            prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """Runs `python -m shardcook ARGS` (or PREFIX... -m shardcook ARGS) and returns the result."""
    env = dict(os.environ, **(env_extra or {}))
    cmd = [*prefix, "-m", "shardcook", *args] if prefix else [sys.executable, "-m", "shardcook",
                                                               *args]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
    if check and r.returncode != 0:
        raise AssertionError(f"{cmd} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r


def killed_after(args: list[str], out: Path, units: int) -> list[Path]:
    """Runs `python -m shardcook ARGS` writing into `out` and SIGKILLs it as soon as `units` of
    its units are recorded; returns the markers left (asserting it was killed mid-run)."""
    import signal
    import time

    progress = out / ".shardcook" / "progress"
    proc = subprocess.Popen([sys.executable, "-m", "shardcook", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if progress.is_dir() and len(list(progress.glob("*.json"))) >= units:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    return sorted(progress.glob("*.json"))


def report(out: Path) -> dict:
    return json.loads((out / ".shardcook" / "report.json").read_text())


def manifest(out: Path) -> dict:
    return json.loads((out / ".shardcook" / "manifest.json").read_text())


def shard_hashes(out: Path) -> dict[str, str]:
    """sha256 of every shard and .tar.idx, by name."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(out.glob("*.tar")) + sorted(out.glob("*.tar.idx"))}


def energon_parts(root: Path) -> dict[str, tuple[str, dict[str, bytes]]]:
    """Every sample of every split through Energon's own loader (CrudeWebdataset, raw bytes):
    {key: (split, {part: bytes})}."""
    import yaml
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        WorkerConfig,
        basic_sample_keys,
        get_loader,
        get_val_dataset,
        stateless,
    )
    from megatron.energon.edataclass import edataclass
    from megatron.energon.flavors.base_dataset import Sample

    @edataclass
    class Parts(Sample):
        parts: dict

    @stateless
    def cook(crude: dict) -> Parts:
        return Parts(**basic_sample_keys(crude),
                     parts={k: bytes(v) for k, v in crude.items() if not k.startswith("__")})

    class TE(DefaultTaskEncoder):
        decoder = None
        cookers = (Cooker(cook),)

        def batch(self, samples):
            return samples

    splits = yaml.safe_load((root / ".nv-meta" / "split.yaml").read_text())["split_parts"]
    wc = WorkerConfig(rank=0, world_size=1, num_workers=0)
    seen = {}
    for split, shards in splits.items():
        if not shards:
            continue
        # the val loader reads a split once, in order, without shuffling
        ds = get_val_dataset(str(root), split_part=split, batch_size=1, worker_config=wc,
                             task_encoder=TE())
        for batch in get_loader(ds):
            for s in batch:
                key = s.__key__.rsplit("/", 1)[-1]
                assert key not in seen, f"{key} read twice"
                seen[key] = (split, s.parts)
    return seen


def energon_read(out: Path) -> list[dict]:
    """Every sample of every split through Energon's own loader: [{key, txt, image(np), meta}],
    by key."""
    samples = []
    for key, (split, parts) in sorted(energon_parts(out).items()):
        image = next(parts[p] for p in ("jpg", "png", "webp") if p in parts)
        samples.append({"key": key, "txt": parts["txt"].decode("utf-8"),
                        "meta": json.loads(parts["meta.json"]), "split": split,
                        "image": np.asarray(Image.open(io.BytesIO(image)).convert("RGB"))})
    return samples


def energon_captions(root: Path, split: str) -> dict[str, str]:
    """Every sample of a split as Energon's own loader reads it: key to its `txt` caption."""
    return {key: parts["txt"].decode() for key, (where, parts) in energon_parts(root).items()
            if where == split}


def run_raw(cfg: RunConfig) -> dict | None:
    """`shardcook raw`'s run in this process; report.json's content."""
    from shardcook.jobs.raw import RawJob
    from shardcook.pipeline.driver import run_pipeline

    return run_pipeline(cfg, RawJob(cfg))
