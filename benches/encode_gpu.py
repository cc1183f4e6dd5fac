"""GPU measurement for `shardcook encode`.

Builds architecture-faithful FLUX.1 encoders with random weights from the public configs' shapes
(VAE: 16 latent channels, blocks 128/256/512/512; T5-XXL encoder: d_model 4096, 24 layers;
CLIP-L text: 768, 12 layers), no download, saved in the FLUX layout in bf16; then
  1. runs `shardcook encode` on real photos at 512 and 1024 px and prints images/s, the share of
     encoder time spent waiting for pixels (report.json `input_wait` / (`input_wait` + `encode`))
     and the GPU's busy share (below);
  2. with --bridge-script (a local copy of Megatron-Bridge's prepare_energon_dataset_flux.py,
     see benches/encode_vs_bridge.py): `encode --layout megatron-bridge` against Bridge's script
     on the GPU, both fp32 as Bridge's script is, at the first size, samples/s and the ratio;
  3. times the encoders alone on synthetic batches, before/after: channels_last VAE, larger
     batches, torch.compile of the VAE encoder (SDPA is transformers' default attention).
With --wan, instead: Wan 2.1's encoders with random weights (AutoencoderKLWan at its default
config: base dim 96, 16 latent channels; UMT5-XXL encoder: d_model 4096, 24 layers), and
`encode --layout wan --video-mode video` on --n generated clips of 81 frames at 480 x 832: clips/s,
the share of encoder time not spent waiting for decoded clips, and the GPU's busy share (goal:
busy >= 90%), per batch size of --batches; with --bridge-wan-script (a local copy of Bridge's
examples/models/wan/prepare_dataset/prepare_dataset_wan.py), that script (its defaults: fp16 on
CUDA, VAE slicing and tiling on; and with --no-memory-optimization) against
`shardcook encode --layout wan` (fp16) on the same clips, each a fresh process: clips/s of the
whole process, its peak RSS and the GPU's busy share.

The GPU's busy share is NVML's utilisation of GPU 0 (the share of each sample period in which a
kernel ran), sampled every 0.1 s (needs nvidia-ml-py): for an in-process run, averaged from the
moment the encoders are loaded to the end (`gpu_busy`); for a whole process, over its life
(`gpu_busy_whole`). Each phase that fails is reported and the next one runs; --deadline S skips
the phases that would start after S seconds. Results: WORK/results.json (--work, default
bench-out/encode_gpu).

    python benches/encode_gpu.py                 # on a GPU machine (about 5-8 minutes)
    python benches/encode_gpu.py --wan --n 16 --batches 1 4   # Wan at 480 x 832, 81 frames
    python benches/encode_gpu.py --wan --tiny --device cpu --n 2 --wan-shape 9 48 80  # CPU smoke
    python benches/encode_gpu.py --sizes 512 --bridge-script /tmp/prepare_energon_dataset_flux.py
    python benches/encode_gpu.py --tiny --device cpu --n 16 --sizes 64   # smoke test on CPU
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "encode_gpu"
sys.path.insert(0, str(ROOT / "benches"))


class GpuBusy:
    """NVML's utilisation of GPU 0, sampled every 0.1 s while in the block. `mean(since)`
    averages the samples taken after `since` (a perf_counter time); None without nvidia-ml-py
    or a GPU."""

    def __enter__(self) -> GpuBusy:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - no NVML, no GPU: the share is reported as None
            self._thread = None
            return self

        def sample() -> None:
            while not self._stop.wait(0.1):
                util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
                self.samples.append((time.perf_counter(), util))

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def mean(self, since: float = 0.0) -> float | None:
        kept = [u for t, u in self.samples if t >= since]
        return round(sum(kept) / len(kept) / 100, 4) if kept else None


def timed_process(cmd: list[str]) -> dict:
    """Runs cmd as a fresh process: wall seconds, its peak RSS (MiB) and the GPU's busy share
    over its life."""
    from encode_wan_vs_bridge import timed

    with GpuBusy() as gpu:
        wall, rss = timed(cmd)
    return {"wall_s": round(wall, 2), "peak_rss_mib": rss, "gpu_busy_whole": gpu.mean()}


def side_by_side(label: str, runs: dict[str, tuple[Path, list[str]]], n: int, unit: str
                 ) -> dict:
    """Each run (name -> (its output folder, its command)) as a fresh process over the same n
    inputs: `timed_process`'s figures, the samples it wrote and its rate in `unit`s/s."""
    from encode_vs_bridge import count_samples

    rows = {}
    for name, (out, cmd) in runs.items():
        row = timed_process(cmd)
        row[f"{unit}_written"] = count_samples(out, ".pth")
        row[f"{unit}_per_s"] = round(n / row["wall_s"], 3)
        rows[name] = row
        print(label, name, json.dumps(row), flush=True)
    return rows


def in_process(cfg_values: dict) -> tuple[dict, float | None]:
    """`encode` in this process: its report, and the GPU's busy share from the moment the
    encoders were loaded (the run's start plus its `load_encoders` seconds) to the end."""
    from shardcook.config import resolve
    from shardcook.jobs.encode.job import EncodeJob
    from shardcook.pipeline.driver import run_pipeline

    cfg = resolve(cfg_values, set(cfg_values), encode=True)
    with GpuBusy() as gpu:
        t0 = time.perf_counter()
        rep = run_pipeline(cfg, EncodeJob(cfg))
    return rep, gpu.mean(t0 + rep["stage_seconds"].get("load_encoders", 0.0))


def build(root: Path, tiny: bool, device: str) -> Path:
    import torch
    from diffusers import AutoencoderKL
    from shardcook.encoders.tiny import _clip_tokenizer, _t5_tokenizer, build_tiny_flux
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    if tiny:
        return build_tiny_flux(root)
    root.mkdir(parents=True, exist_ok=True)
    with torch.device(device):
        AutoencoderKL(in_channels=3, out_channels=3, latent_channels=16,
                      down_block_types=("DownEncoderBlock2D",) * 4,
                      up_block_types=("UpDecoderBlock2D",) * 4,
                      block_out_channels=(128, 256, 512, 512), layers_per_block=2,
                      scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                      use_post_quant_conv=False, sample_size=1024
                      ).to(torch.bfloat16).save_pretrained(root / "vae")
        CLIPTextModel(CLIPTextConfig(vocab_size=49408, hidden_size=768, intermediate_size=3072,
                                     num_hidden_layers=12, num_attention_heads=12,
                                     max_position_embeddings=77, projection_dim=768,
                                     hidden_act="quick_gelu")
                      ).to(torch.bfloat16).save_pretrained(root / "text_encoder")
        T5EncoderModel(T5Config(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240,
                                num_layers=24, num_heads=64, feed_forward_proj="gated-gelu",
                                is_encoder_decoder=False, use_cache=False)
                       ).to(torch.bfloat16).save_pretrained(root / "text_encoder_2")
    _clip_tokenizer(root / "tokenizer")  # small vocabularies; ids fit the real embedding tables
    _t5_tokenizer(root / "tokenizer_2")
    return root


def build_wan(root: Path, tiny: bool, device: str) -> Path:
    """Wan 2.1's encoders with random weights (or the tiny ones), saved in the diffusers layout."""
    import torch
    from diffusers import AutoencoderKLWan
    from shardcook.encoders.tiny import _t5_tokenizer, build_tiny_wan
    from transformers import UMT5Config, UMT5EncoderModel

    if tiny:
        return build_tiny_wan(root)
    root.mkdir(parents=True, exist_ok=True)
    with torch.device(device):
        AutoencoderKLWan().to(torch.bfloat16).save_pretrained(root / "vae")  # Wan 2.1's config
        UMT5EncoderModel(UMT5Config(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240,
                                    num_layers=24, num_heads=64, feed_forward_proj="gated-gelu",
                                    relative_attention_num_buckets=32, is_encoder_decoder=False,
                                    use_cache=False)
                         ).to(torch.bfloat16).save_pretrained(root / "text_encoder")
    _t5_tokenizer(root / "tokenizer")  # a small vocabulary; ids fit the real embedding table
    return root


def wan_run(model: Path, src: Path, out: Path, shape: list[int], batch: int, device: str,
            precision: str) -> dict:
    """`encode --layout wan --video-mode video` in this process: clips/s, the encoders' share
    not waiting for clips (1 - input_wait / (encode + input_wait)) and the GPU's."""
    rep, gpu = in_process({
        "input_dir": str(src), "output_dir": str(out), "layout": "wan", "height": shape[1],
        "width": shape[2], "video_mode": "video", "resize_mode": "bilinear", "batch_size": batch,
        "model_path": str(model), "precision": precision, "device": device, "overwrite": True,
        "quiet": True, "finalize": False})
    st = rep["stage_seconds"]
    busy = st["encode"] / (st["encode"] + st["input_wait"])
    return {"shape": shape, "batch": batch, "clips": rep["num_written"],
            "wall_s": rep["wall_seconds"], "clips_per_s_wall": rep["inputs_per_second"],
            "load_encoders_s": st.get("load_encoders"), "encode_s": st["encode"],
            "input_wait_s": st["input_wait"], "clips_per_s_encoding": round(
                rep["num_written"] / (st["encode"] + st["input_wait"]), 3),
            "busy_share": round(busy, 4), "gpu_busy": gpu}


def wan_vs_bridge(model: Path, src: Path, shape: list[int], batch: int, device: str,
                  script: Path) -> dict:
    """Bridge's Wan script (its defaults, then --no-memory-optimization) and
    `encode --layout wan` (--batch-size batch), fresh processes on the same clips, both in
    Bridge's dtype (fp16 on CUDA, else fp32)."""
    _, h, w = shape
    n = sum(1 for p in src.iterdir() if p.suffix == ".mp4")
    common = ["--height", str(h), "--width", str(w)]
    bridge = [sys.executable, str(script), "--video_folder", str(src), "--model", str(model),
              "--mode", "video", "--resize_mode", "bilinear", "--device", device, *common]
    outs = {name: WORK / name for name in
            ("bridge_script", "bridge_script_no_memory_optimization", "shardcook")}
    runs = {
        "bridge_script": [*bridge, "--output_dir", str(outs["bridge_script"])],
        "bridge_script_no_memory_optimization": [
            *bridge, "--output_dir", str(outs["bridge_script_no_memory_optimization"]),
            "--no-memory-optimization"],
        "shardcook": [sys.executable, "-m", "shardcook", "encode", "--layout", "wan",
                      "--input-dir", str(src), "--output-dir", str(outs["shardcook"]),
                      "--model-path", str(model), "--video-mode", "video", "--resize-mode",
                      "bilinear", "--latent-mode", "mode", "--precision",
                      "fp16" if device.startswith("cuda") else "fp32", *common,
                      "--batch-size", str(batch), "--device", device, "--no-finalize",
                      "--overwrite", "--quiet"],
    }
    out: dict = {"shape": shape, "clips": n, "shardcook_batch": batch}
    out.update(side_by_side("wan_vs_bridge", {k: (outs[k], cmd) for k, cmd in runs.items()}, n,
                            "clips"))
    for name in ("bridge_script", "bridge_script_no_memory_optimization"):
        out[f"ratio_vs_{name}"] = round(out["shardcook"]["clips_per_s"]
                                        / out[name]["clips_per_s"], 2)
    return out


def photos(folder: Path, n: int) -> Path:
    import numpy as np
    import skimage.data
    from PIL import Image

    names = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry",
             "hubble_deep_field")
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        a = getattr(skimage.data, names[i % len(names)])()[..., :3]
        a = np.kron(a, np.ones((3, 3, 1), np.uint8))  # 1.2-1.8k px, so 1024 crops are real
        Image.fromarray(a[:, ::-1] if i % 2 else a).save(folder / f"{i:05d}.jpg", quality=92)
        (folder / f"{i:05d}.txt").write_text(f"a photo of a {names[i % len(names)]}, number {i}")
    return folder


def pipeline_run(model, src, out, size, batch, device, precision, t5_len,
                 layout="primus") -> dict:
    rep, gpu = in_process({
        "input_dir": str(src), "output_dir": str(out), "image_size": size, "batch_size": batch,
        "model_path": str(model), "precision": precision, "device": device,
        "t5_max_length": t5_len, "overwrite": True, "quiet": True, "finalize": False,
        "layout": layout})
    st = rep["stage_seconds"]
    return {"size": size, "batch": batch, "samples": rep["num_written"],
            "wall_s": rep["wall_seconds"], "samples_per_s_wall": rep["inputs_per_second"],
            "load_encoders_s": st.get("load_encoders"), "encode_s": st["encode"],
            "input_wait_s": st["input_wait"], "samples_per_s_encoding": round(
                rep["num_written"] / (st["encode"] + st["input_wait"]), 2),
            "wait_share": round(st["input_wait"] / (st["encode"] + st["input_wait"]), 4),
            "gpu_busy": gpu}


def encoder_only(model, size, batch, device, precision, variant, t5_len, reps=5) -> float:
    """images/s of VAE+T5+CLIP on synthetic pixels (no pipeline), for a variant."""
    import numpy as np
    import torch
    from shardcook.encoders.flux import FluxEncoders

    enc = FluxEncoders.load(model_path=str(model), precision=precision, device=device,
                            t5_max_length=t5_len, latent_mode="sample")
    if "channels_last" in variant:
        enc.vae.to(memory_format=torch.channels_last)
    if "compile" in variant:
        enc.vae.encoder = torch.compile(enc.vae.encoder)
    px = np.random.default_rng(0).integers(0, 255, (batch, size, size, 3), dtype=np.uint8)
    keys = [f"{i:010d}" for i in range(batch)]
    caps = ["a photo of a cat on a red sofa"] * batch

    def step():
        enc.encode_images(px, keys)
        enc.encode_text(caps)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    step()
    step()  # warm-up (and compile)
    t0 = time.perf_counter()
    for _ in range(reps):
        step()
    return round(reps * batch / (time.perf_counter() - t0), 2)


def bridge_vs_shardcook(model, src, size, device, t5_len, script: Path) -> dict:
    """Bridge's script (one image at a time) and `encode --layout megatron-bridge` (batches of
    8), both fp32, on the same photos listed in a `meta.json`; each a fresh process."""
    from encode_vs_bridge import with_tokenizer, write_meta_json

    write_meta_json(src)
    t5 = with_tokenizer(model, "text_encoder_2", "tokenizer_2", WORK / "t5")
    clip = with_tokenizer(model, "text_encoder", "tokenizer", WORK / "clip")
    n = sum(1 for p in src.iterdir() if p.suffix == ".jpg")
    outs = {"bridge_script": WORK / "bridge-out", "shardcook": WORK / "sc-bridge-out"}
    runs = {
        "bridge_script": [sys.executable, str(script), "--data_folder", str(src), "--output_dir",
                          str(outs["bridge_script"]), "--vae_model", str(model), "--t5_model",
                          str(t5), "--clip_model", str(clip), "--device", device, "--height",
                          str(size), "--width", str(size), "--center-crop",
                          "--no-memory-optimization", "--max_sequence_length", str(t5_len)],
        "shardcook": [sys.executable, "-m", "shardcook", "encode", "--layout", "megatron-bridge",
                      "--model-path", str(model), "--input-dir", str(src), "--output-dir",
                      str(outs["shardcook"]), "--image-size", str(size), "--t5-max-length",
                      str(t5_len), "--batch-size", "8", "--device", device, "--no-finalize",
                      "--overwrite", "--quiet"],
    }
    out: dict = {"size": size, "samples": n}
    out.update(side_by_side("bridge", {k: (outs[k], cmd) for k, cmd in runs.items()}, n,
                            "samples"))
    out["ratio"] = round(out["shardcook"]["samples_per_s"]
                         / out["bridge_script"]["samples_per_s"], 2)
    return out


def flux_phases(args: argparse.Namespace) -> list[tuple[str, Callable[[dict], object]]]:
    """FLUX's phases, in order: build, photos, the pipeline per size, Bridge, encoders alone."""
    state: dict = {}

    def built(results: dict) -> float:
        t0 = time.perf_counter()
        state["model"] = build(WORK / "flux-random", args.tiny, args.device)
        state["src"] = photos(WORK / "photos", args.n)
        return round(time.perf_counter() - t0, 1)

    def pipeline(size: int) -> Callable[[dict], object]:
        return lambda results: pipeline_run(state["model"], state["src"], WORK / f"out{size}",
                                            size, args.batches[0], args.device, args.precision,
                                            args.t5_len)

    def bridge(results: dict) -> object:
        return bridge_vs_shardcook(state["model"], state["src"], args.sizes[0], args.device,
                                   args.t5_len, args.bridge_script)

    def alone(results: dict) -> list[dict]:
        rows = []
        for size in args.sizes:
            for batch in args.batches:
                for variant in ("baseline", "channels_last", "channels_last+compile"):
                    try:
                        rate: object = encoder_only(state["model"], size, batch, args.device,
                                                    args.precision, variant, args.t5_len)
                    except Exception as e:  # noqa: BLE001 - a failing variant is reported
                        rate = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                    rows.append({"size": size, "batch": batch, "variant": variant,
                                 "images_per_s": rate})
                    print("encoder_only", json.dumps(rows[-1]), flush=True)
        return rows

    phases: list[tuple[str, Callable[[dict], object]]] = [("build_s", built)]
    phases += [(f"pipeline_{size}", pipeline(size)) for size in args.sizes]
    if args.bridge_script is not None:
        phases.append(("bridge", bridge))
    if not args.skip_encoder_only:
        phases.append(("encoder_only", alone))
    return phases


def wan_phases(args: argparse.Namespace) -> list[tuple[str, Callable[[dict], object]]]:
    """Wan's phases, in order: build and clips, the pipeline per batch size, Bridge's script."""
    from encode_wan_vs_bridge import make_clips

    state: dict = {}

    def built(results: dict) -> float:
        t0 = time.perf_counter()
        state["model"] = build_wan(WORK / "wan-random", args.tiny, args.device)
        frames, h, w = args.wan_shape
        make_clips(WORK / "clips", args.n, frames, h, w)
        return round(time.perf_counter() - t0, 1)

    def run(batch: int) -> Callable[[dict], object]:
        return lambda results: wan_run(state["model"], WORK / "clips", WORK / f"wan-b{batch}",
                                       args.wan_shape, batch, args.device, args.precision)

    def bridge(results: dict) -> object:
        clips = WORK / "clips-bridge"  # Bridge's script reads every .mp4 of its folder
        clips.mkdir()
        for p in sorted((WORK / "clips").glob("*.mp4"))[:args.bridge_n]:
            for f in (p, p.with_suffix(".json")):
                (clips / f.name).hardlink_to(f)
        return wan_vs_bridge(state["model"], clips, args.wan_shape, args.batches[-1],
                             args.device, args.bridge_wan_script)

    phases: list[tuple[str, Callable[[dict], object]]] = [("build_s", built)]
    phases += [(f"wan_b{batch}", run(batch)) for batch in args.batches]
    if args.bridge_wan_script is not None:
        phases.append(("wan_vs_bridge", bridge))
    return phases


def run_phases(phases: list[tuple[str, Callable[[dict], object]]], deadline: float | None
               ) -> dict:
    """Each phase in order, its result (or its error) kept under its name and written to
    WORK/results.json as soon as it ends; a phase that would start past `deadline` seconds is
    skipped, and so is every phase after a failed build."""
    results: dict = {}
    start = time.perf_counter()
    for name, phase in phases:
        elapsed = time.perf_counter() - start
        if deadline is not None and elapsed > deadline:
            results[name] = f"skipped: {elapsed:.0f} s passed, past --deadline {deadline:.0f}"
        elif name != "build_s" and isinstance(results.get("build_s"), str):
            results[name] = "skipped: the build failed"
        else:
            try:
                results[name] = phase(results)
            except BaseException as e:  # SystemExit too (a failed process): next phase
                if isinstance(e, KeyboardInterrupt):
                    raise
                traceback.print_exc()
                results[name] = f"failed: {type(e).__name__}: {str(e)[-600:]}"
        print(name, json.dumps(results[name]), flush=True)
        (WORK / "results.json").write_text(json.dumps(results, indent=2))
    return results


def main() -> None:
    global WORK
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--t5-len", type=int, default=512)
    ap.add_argument("--bridge-script", type=Path, default=None)
    ap.add_argument("--skip-encoder-only", action="store_true",
                    help="FLUX: leave out the encoders-alone variants")
    ap.add_argument("--wan", action="store_true", help="the Wan case instead of FLUX's")
    ap.add_argument("--wan-shape", type=int, nargs=3, default=[81, 480, 832],
                    metavar=("FRAMES", "HEIGHT", "WIDTH"))
    ap.add_argument("--bridge-wan-script", type=Path, default=None)
    ap.add_argument("--bridge-n", type=int, default=8,
                    help="Wan: clips for the side by side with Bridge's script")
    ap.add_argument("--deadline", type=float, default=None,
                    help="skip the phases that would start after this many seconds")
    ap.add_argument("--work", type=Path, default=WORK, help="the work folder (emptied first)")
    args = ap.parse_args()
    from shardcook.jobs.encode.job import quiet_model_libraries

    quiet_model_libraries()
    WORK = args.work
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    run_phases(wan_phases(args) if args.wan else flux_phases(args), args.deadline)
    print(f"wrote {WORK / 'results.json'}")


if __name__ == "__main__":
    main()
