"""`shardcook encode` side by side with a straightforward sequential loop (Pillow decode/resize,
the same encoders one sample at a time, torch.save, webdataset.TarWriter), on the same photos,
with the same tiny random-weight FLUX-layout encoders (shardcook.encoders.tiny) on the CPU.

    python benches/encode_vs_loop.py [--n 96] [--size 256] [--repeats 2] [--photos large|small]

Prints samples/s for each and the ratio (median of the repeats; each run includes loading the
encoders). Inputs: scikit-image's bundled photos, either `large` (the default: raw_vs_peers.py's
1-4 MP JPEG/PNG/WebP mix, the size of photos people train on) or `small` (saved as JPEG at their
own size, 300-800 px, flipped so repeats differ). Work files go under bench-out/encode_vs_loop
(git-ignored). No GPU here: this measures the pipeline (batching, Rust decode/resize, overlap)
around the encoders, not FLUX-size models.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "encode_vs_loop"
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "camera",
          "hubble_deep_field", "colorwheel")
T5_LEN = 64


def make_small(folder: Path, n: int) -> None:
    import skimage.data

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        arr = getattr(skimage.data, PHOTOS[i % len(PHOTOS)])()
        if arr.ndim == 2:
            arr = np.stack([arr] * 3, -1)
        arr = arr[..., :3]
        if (i // len(PHOTOS)) % 2:
            arr = arr[:, ::-1]
        Image.fromarray(np.ascontiguousarray(arr)).save(folder / f"{i:05d}.jpg", quality=95)
        (folder / f"{i:05d}.txt").write_text(f"a photo number {i} of a {PHOTOS[i % 8]}")


def images(src: Path) -> list[Path]:
    return sorted(p for p in src.iterdir() if p.suffix != ".txt")


def run_shardcook(model: Path, src: Path, out: Path, size: int) -> float:
    from shardcook.config import resolve
    from shardcook.jobs.encode.job import EncodeJob
    from shardcook.pipeline.driver import run_pipeline

    values = {"input_dir": str(src), "output_dir": str(out), "image_size": size,
              "model_path": str(model), "precision": "fp32", "t5_max_length": T5_LEN,
              "batch_size": 8, "shard_size": 1000, "overwrite": True, "quiet": True,
              "finalize": False, "latent_mode": "sample", "device": "cpu"}
    cfg = resolve(values, set(values), encode=True)
    t0 = time.perf_counter()
    report = run_pipeline(cfg, EncodeJob(cfg))
    seconds = time.perf_counter() - t0
    assert report["num_written"] == len(images(src)), report
    return seconds


def run_loop(model: Path, src: Path, out: Path, size: int) -> float:
    """The script people write first: one sample at a time, start to end."""
    import torch
    import webdataset as wds
    from diffusers import AutoencoderKL
    from transformers import AutoTokenizer, CLIPTextModel, T5EncoderModel

    t0 = time.perf_counter()
    vae = AutoencoderKL.from_pretrained(model / "vae").eval()
    clip_tok = AutoTokenizer.from_pretrained(model / "tokenizer")
    clip = CLIPTextModel.from_pretrained(model / "text_encoder").eval()
    t5_tok = AutoTokenizer.from_pretrained(model / "tokenizer_2")
    t5 = T5EncoderModel.from_pretrained(model / "text_encoder_2").eval()
    scale, shift = vae.config.scaling_factor, vae.config.shift_factor
    out.mkdir(parents=True, exist_ok=True)

    def save(t):
        buf = io.BytesIO()
        torch.save(t.clone(), buf)
        return buf.getvalue()

    with wds.TarWriter(str(out / "000000.tar")) as sink, torch.no_grad():
        for i, path in enumerate(images(src)):
            img = Image.open(path).convert("RGB")
            w, h = img.size
            s = size / min(w, h)
            img = img.resize((max(size, round(w * s)), max(size, round(h * s))),
                             Image.Resampling.LANCZOS)
            left, top = (img.width - size) // 2, (img.height - size) // 2
            img = img.crop((left, top, left + size, top + size))
            x = torch.from_numpy(np.asarray(img)).permute(2, 0, 1)[None].float() / 127.5 - 1
            dist = vae.encode(x).latent_dist
            g = torch.Generator().manual_seed(i)
            z = dist.mean + dist.std * torch.randn(dist.mean.shape, generator=g)
            lat = (z - shift) * scale
            caption = path.with_suffix(".txt").read_text()
            ids = t5_tok([caption], padding="max_length", max_length=T5_LEN, truncation=True,
                         return_tensors="pt").input_ids
            prompt = t5(ids).last_hidden_state
            cids = clip_tok([caption], padding="max_length", max_length=77, truncation=True,
                            return_tensors="pt").input_ids
            pooled = clip(cids).pooler_output
            sink.write({"__key__": f"{i:010d}", "latents.pth": save(lat[0]),
                        "prompt_embeds.pth": save(prompt[0]),
                        "pooled_prompt_embeds.pth": save(pooled[0]),
                        "caption.txt": caption})
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--photos", choices=("large", "small"), default="large")
    args = ap.parse_args()
    import torch
    from shardcook.encoders.tiny import build_tiny_flux
    from shardcook.jobs.encode.job import quiet_model_libraries

    quiet_model_libraries()
    if WORK.exists():
        shutil.rmtree(WORK)
    model = build_tiny_flux(WORK / "tiny-flux-DEMO-WEIGHTS")
    src = WORK / f"photos-{args.photos}-{args.n}"
    if args.photos == "large":
        sys.path.insert(0, str(ROOT / "benches"))
        from raw_vs_peers import make_photos

        info = make_photos(src, args.n)
        described = (f"{args.n} photos of {info['mp_min']}-{info['mp_max']} MP "
                     f"(mean {info['mp_mean']}, {info['formats']})")
    else:
        make_small(src, args.n)
        described = f"{args.n} JPEG photos of 300-800 px"
    run_loop(model, src, WORK / "warm", args.size)  # first-call costs out of the way
    times: dict[str, list[float]] = {"shardcook encode": [], "sequential loop": []}
    for r in range(args.repeats):  # alternate, so background load hits both alike
        times["sequential loop"].append(run_loop(model, src, WORK / f"loop{r}", args.size))
        times["shardcook encode"].append(run_shardcook(model, src, WORK / f"sc{r}", args.size))
    print(f"{described} -> {args.size} px crop, tiny encoders (fp32, CPU, "
          f"{torch.get_num_threads()} torch threads), T5 length {T5_LEN}, medians of "
          f"{args.repeats} runs (each includes loading the encoders)")
    rates = {}
    for name, ts in times.items():
        rates[name] = args.n / statistics.median(ts)
        print(f"  {name:<17} {rates[name]:7.1f} samples/s   runs: "
              + ", ".join(f"{t:.2f} s" for t in ts))
    print(f"  ratio: {rates['shardcook encode'] / rates['sequential loop']:.2f}x")
    import json

    rep = json.loads((WORK / "sc0" / ".shardcook" / "report.json").read_text())
    print("  shardcook stage seconds (first run):", rep["stage_seconds"])


if __name__ == "__main__":
    main()
