"""Samples/s through `EncodedDiffusionTaskEncoder` (safe: raw bytes, `torch.load(weights_only=
True)`) against the same cooker fed by Energon's default decoder (webdataset's `torch.load` with
`weights_only=False`), on the same dataset, with the same loader settings, side by side.

Usage:
    python benches/energon_loader.py                  # both shape presets, 0 workers
    python benches/energon_loader.py --preset medium --workers 2 --rounds 5

Rounds alternate the order of the two loaders; the median of each is reported with the ratio
safe / default (target: >= 0.9).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import shardcook
import torch
from megatron.energon import Cooker, SampleDecoder, basic_sample_keys, stateless
from shardcook.energon import DiffusionSample, EncodedDiffusionTaskEncoder, get_diffusion_loader

warnings.filterwarnings("ignore", message=".*pin_memory.*")


@dataclass(frozen=True)
class Preset:
    """Tensor shapes of one benchmark dataset."""

    name: str
    samples: int
    latents: tuple[int, int, int]
    prompt_embeds: tuple[int, int]
    pooled: int


PRESETS = {
    # Tiny tensors: per-sample overhead dominates, the worst case for safe loading.
    "tiny": Preset("tiny", 3000, (16, 8, 8), (16, 32), 24),
    # 512 px FLUX-like latents, T5 at 128 tokens x 4096, CLIP-L pooled: about 1.2 MB a sample.
    "medium": Preset("medium", 600, (16, 64, 64), (128, 4096), 768),
}


def _pth(t: torch.Tensor) -> bytes:
    buf = io.BytesIO()
    torch.save(t.contiguous().clone(), buf)
    return buf.getvalue()


def build_dataset(root: Path, p: Preset) -> Path:
    """Writes `p.samples` pre-encoded bf16 samples with ShardWriter and finalizes them."""
    path = root / p.name
    g = torch.Generator().manual_seed(0)
    with shardcook.ShardWriter(str(path), shard_size=250) as w:
        for i in range(p.samples):
            key = f"{i:010d}"
            w.write(key, {
                "latents.pth": _pth(torch.randn(*p.latents, generator=g).bfloat16()),
                "prompt_embeds.pth": _pth(torch.randn(*p.prompt_embeds, generator=g).bfloat16()),
                "pooled_prompt_embeds.pth": _pth(torch.randn(p.pooled, generator=g).bfloat16()),
                "caption.txt": f"caption {i}".encode(),
                "meta.json": json.dumps({"source": key, "orig_size": [512, 512],
                                         "crop": [0, 0], "size": [512, 512]}).encode(),
            })
    shardcook.finalize(path, encoding="preencoded", split=(1, 0, 0))
    return path


def _pair(v):
    return None if v is None else (int(v[0]), int(v[1]))


@stateless
def cook_decoded(sample: dict) -> DiffusionSample:
    """The baseline cooker: parts arrive already decoded by Energon's default SampleDecoder."""
    meta = sample.get("meta.json") or {}
    return DiffusionSample(
        **basic_sample_keys(sample),
        latents=sample["latents.pth"],
        prompt_embeds=sample["prompt_embeds.pth"],
        pooled_prompt_embeds=sample["pooled_prompt_embeds.pth"],
        caption=sample["caption.txt"],
        source=meta.get("source"),
        orig_size=_pair(meta.get("orig_size")),
        crop=_pair(meta.get("crop")),
        size=_pair(meta.get("size")),
    )


class DefaultDecoderTaskEncoder(EncodedDiffusionTaskEncoder):
    """Same batching as `EncodedDiffusionTaskEncoder`, but Energon's default (unsafe) decoder."""

    decoder = SampleDecoder()

    def __init__(self) -> None:
        self.cookers = [Cooker(cook_decoded)]


def measure(
    path: Path, task_encoder, *, batch_size: int, batches: int, workers: int
) -> tuple[float, float]:
    """Samples/s over `batches` batches after a short warm-up: per wall second, and per CPU
    second of this process (meaningful with 0 workers; less sensitive to a busy machine)."""
    with get_diffusion_loader(path, batch_size=batch_size, num_workers=workers,
                              task_encoder=task_encoder) as loader:
        for _ in range(max(3, 2 * workers)):
            next(loader)
        n = 0
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(batches):
            n += len(next(loader).__key__)
        return n / (time.perf_counter() - t0), n / (time.process_time() - c0)


def run(preset: Preset, root: Path, args) -> tuple[float, float, float, float]:
    t = time.perf_counter()
    path = build_dataset(root, preset)
    print(f"[{preset.name}] {preset.samples} samples, latents {preset.latents}, prompt_embeds "
          f"{preset.prompt_embeds}, pooled [{preset.pooled}], bf16 (built in "
          f"{time.perf_counter() - t:.1f} s)", flush=True)
    batches = args.batches or max(10, preset.samples // args.batch_size)
    results: dict[str, list[float]] = {"safe": [], "default": []}
    cpu: dict[str, list[float]] = {"safe": [], "default": []}
    for r in range(args.rounds):
        order = ["safe", "default"] if r % 2 == 0 else ["default", "safe"]
        for name in order:
            te = EncodedDiffusionTaskEncoder() if name == "safe" else DefaultDecoderTaskEncoder()
            sps, cps = measure(path, te, batch_size=args.batch_size, batches=batches,
                               workers=args.workers)
            results[name].append(sps)
            cpu[name].append(cps)
            print(f"  round {r + 1} {name:>7}: {sps:8.1f} samples/s wall, {cps:8.1f} per "
                  "CPU-second", flush=True)
    med = {k: statistics.median(v) for k, v in results.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    paired = statistics.median(
        s / d for s, d in zip(results["safe"], results["default"], strict=True))
    paired_cpu = statistics.median(s / d for s, d in zip(cpu["safe"], cpu["default"], strict=True))
    print(f"[{preset.name}] median samples/s: EncodedDiffusionTaskEncoder {med['safe']:.1f} | "
          f"default decoder {med['default']:.1f} | ratio {med['safe'] / med['default']:.3f} "
          f"(median of per-round ratios: wall {paired:.3f}, CPU {paired_cpu:.3f})", flush=True)
    return med["safe"], med["default"], med_cpu["safe"], med_cpu["default"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=[*PRESETS, "all"], default="all")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--batches", type=int, default=0, help="timed batches (default: ~1 epoch)")
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", type=Path, default=None, help="where to build the datasets")
    args = ap.parse_args(argv)
    print(f"torch {torch.__version__}, workers={args.workers}, batch_size={args.batch_size}, "
          f"rounds={args.rounds}, threads={torch.get_num_threads()}", flush=True)
    presets = list(PRESETS.values()) if args.preset == "all" else [PRESETS[args.preset]]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        summary = [(p.name, *run(p, Path(tmp), args)) for p in presets]
    print("\nmedian samples/s (wall)   safe   default   ratio | per CPU-s: safe   default   ratio")
    for name, safe, default, csafe, cdefault in summary:
        print(f"{name:<22} {safe:>8.1f} {default:>9.1f} {safe / default:>7.3f} |"
              f" {csafe:>15.1f} {cdefault:>9.1f} {csafe / cdefault:>7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
