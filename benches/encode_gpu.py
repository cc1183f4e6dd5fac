"""GPU measurement for `shardcook encode`.

Builds architecture-faithful FLUX.1 encoders with random weights from the public configs' shapes
(VAE: 16 latent channels, blocks 128/256/512/512; T5-XXL encoder: d_model 4096, 24 layers;
CLIP-L text: 768, 12 layers), no download, saved in the FLUX layout in bf16; then
  1. runs `shardcook encode` on real photos at 512 and 1024 px and prints images/s, the share of
     encoder time spent waiting for pixels (report.json `input_wait` / (`input_wait` + `encode`))
     and the GPU's busy share (below);
  2. `first_batch`: `shardcook encode` as a fresh process, from its start to its first batch;
  3. with --bridge-script (a local copy of Megatron-Bridge's prepare_energon_dataset_flux.py,
     see benches/encode_vs_bridge.py): `encode --layout megatron-bridge` against Bridge's script
     on the GPU, both fp32 as Bridge's script is, at the first size, samples/s and the ratio;
  4. times the encoders alone on synthetic batches, before/after: cuDNN's autotuner, `encode
     --compile`'s torch.compile of the VAE encoder and the text encoders (with the autotuner),
     channels_last VAE, larger batches (SDPA is transformers' default attention).
Also: `encode --compile` on the same photos (`pipeline_<size>_compile`) and its fresh process's
first batch, compile included (`first_batch_compile`: after the pipeline compiled that shape, so
torch's on-disk cache of compiled kernels is warm, as on a machine's later runs); the first size
on photos with 4 distinct captions (`pipeline_<size>_4_captions`: each distinct caption of a
batch goes through T5 once); and loading T5 for an fp32 run (`load_t5_fp32`): read in its stored
bf16 and widened on the GPU (`encode`'s way) against read in fp32 on the host and moved, each a
fresh process, its seconds and peak RSS.
With --wan, instead: Wan 2.1's encoders with random weights (AutoencoderKLWan at its default
config: base dim 96, 16 latent channels; UMT5-XXL encoder: d_model 4096, 24 layers), and
`encode --layout wan --video-mode video` on --n generated clips of 81 frames at 480 x 832: clips/s,
the share of encoder time not spent waiting for decoded clips, and the GPU's busy share, per
batch size of --batches, and with --compile at the first; `first_batch` as for FLUX; the
encoders alone on synthetic clips of the first batch size; with --bridge-wan-script (a local
copy of Bridge's examples/models/wan/prepare_dataset/prepare_dataset_wan.py), that script (its
defaults: fp16 on CUDA, VAE slicing and tiling on; and with --no-memory-optimization) against
`shardcook encode --layout wan` (fp16) on the same clips, each a fresh process: clips/s of the
whole process, its peak RSS and the GPU's busy share.

The GPU's busy share is NVML's utilisation of GPU 0 (the share of each sample period in which a
kernel ran), sampled every 0.1 s (needs nvidia-ml-py): for an in-process run, averaged from the
moment the encoders are loaded to the end (`gpu_busy`); for a whole process, over its life
(`gpu_busy_whole`).

MFU (model FLOPs utilisation): each encoder's FLOPs per sample at the run's shapes, counted by
shardcook.encoders.flops (FlopCounterMode on the meta device), over the device's dense bf16 peak
(`PEAK_TFLOPS`, matched on torch.cuda.get_device_name(); --peak-tflops for another device).
For the whole encode: the pipeline's samples/s while encoding x the FLOPs per sample of all its
encoders; per encoder: in the encoders-alone phases, the GPU time of each encoder call, read from
CUDA events recorded around it. Also: each in-process phase's peak GPU memory
(torch.cuda.max_memory_allocated), and `first_batch`, a fresh `shardcook encode` process's
seconds from its start to its first batch encoded and written (the first unit's progress marker;
--shard-size is one batch).

Each phase that fails is reported and the next one runs; --deadline S skips the phases (and the
encoders-alone variants, baselines first) that would start after S seconds. Results:
WORK/results.json (--work, default bench-out/encode_gpu).

    python benches/encode_gpu.py                 # on a GPU machine (about 5-8 minutes, plus
    #   first_batch's fresh process, ~20-30 s; --deadline S bounds it)
    python benches/encode_gpu.py --wan --n 16 --batches 1 4   # Wan at 480 x 832, 81 frames
    python benches/encode_gpu.py --wan --tiny --device cpu --n 2 --wan-shape 9 48 80  # CPU smoke
    python benches/encode_gpu.py --sizes 512 --bridge-script /tmp/prepare_energon_dataset_flux.py
    python benches/encode_gpu.py --tiny --device cpu --n 16 --sizes 64   # smoke test on CPU
    python benches/encode_gpu.py --peak-tflops 835   # a device the table lacks (here H100 NVL)

On a CPU (--device cpu) MFU is left out unless --peak-tflops is given, and each encoder's time is
the host's clock around its call.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "encode_gpu"
sys.path.insert(0, str(ROOT / "benches"))

#: Dense bf16 peak TFLOP/s (no sparsity; fp16's is the same) by device: the words of
#: torch.cuda.get_device_name(), less "NVIDIA" and a memory size such as "80GB", must be a row's
#: words exactly, so a variant with another peak (H100 NVL, H200 NVL, GH200) is not taken for one.
PEAK_TFLOPS: dict[frozenset[str], tuple[str, float]] = {
    frozenset({"H100", "HBM3"}): ("H100 SXM", 989.0),  # the SXM board: "NVIDIA H100 80GB HBM3"
    frozenset({"H100", "SXM5"}): ("H100 SXM", 989.0),
    frozenset({"H100", "PCIE"}): ("H100 PCIe", 756.0),
    frozenset({"H200"}): ("H200", 989.0),
    frozenset({"B200"}): ("B200", 2250.0),
}
#: The peak MFU is measured against (TFLOP/s; None: no MFU), set by `main`.
PEAK: float | None = None
#: When the phases started (perf_counter seconds), set by `run_phases`.
STARTED = 0.0


def peak_tflops(device_name: str, given: float | None) -> float:
    """The dense bf16 peak (TFLOP/s) to measure MFU against: `given` (--peak-tflops) when set,
    else `PEAK_TFLOPS`' row for `device_name`; SystemExit with one line for a device it lacks."""
    if given is not None:
        return given
    words = frozenset(w for w in device_name.upper().split()
                      if w != "NVIDIA" and not re.fullmatch(r"\d+GB", w))
    if words in PEAK_TFLOPS:
        return PEAK_TFLOPS[words][1]
    known = ", ".join(dict(PEAK_TFLOPS.values()))
    sys.exit(f"encode_gpu.py: no peak is known for the GPU {device_name!r} (known: {known}); "
             "give its dense bf16 peak with --peak-tflops TFLOPS.")


def tflops_arg(text: str) -> float:
    """--peak-tflops' value: a positive, finite number of TFLOP/s."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of TFLOP/s, not {text!r}")
    return value


def mfu(flop_per_s: float) -> float | None:
    """`flop_per_s` as a share of `PEAK` (None without one)."""
    return None if PEAK is None else round(flop_per_s / (PEAK * 1e12), 4)


def tflop(flops: dict[str, int] | None) -> dict[str, float] | None:
    return None if flops is None else {name: float(f"{f / 1e12:.4g}") for name, f in flops.items()}


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


def reset_gpu_peak(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.reset_peak_memory_stats(device)


def gpu_peak_mib(device: str) -> int | None:
    """torch.cuda.max_memory_allocated since the last `reset_gpu_peak` (MiB); None off a GPU."""
    if not device.startswith("cuda"):
        return None
    import torch

    return round(torch.cuda.max_memory_allocated(device) / 2**20)


def in_process(cfg_values: dict) -> tuple[dict, float | None, int | None]:
    """`encode` in this process: its report, the GPU's busy share from the moment the encoders
    were loaded (the run's start plus its `load_encoders` seconds) to the end, and the peak GPU
    memory (MiB)."""
    from shardcook.config import resolve
    from shardcook.jobs.encode.job import EncodeJob
    from shardcook.pipeline.driver import run_pipeline

    cfg = resolve(cfg_values, set(cfg_values), encode=True)
    reset_gpu_peak(cfg_values["device"])
    with GpuBusy() as gpu:
        t0 = time.perf_counter()
        rep = run_pipeline(cfg, EncodeJob(cfg))
    return (rep, gpu.mean(t0 + rep["stage_seconds"].get("load_encoders", 0.0)),
            gpu_peak_mib(cfg_values["device"]))


def first_batch(cmd: list[str], out: Path) -> dict:
    """`cmd`, a `shardcook encode` run into `out` whose first unit is one encoder batch, as a fresh
    process: seconds from its start to its first unit's progress marker (the first batch encoded
    and its shard written) and to its end."""
    from shardcook.layouts.names import OURS_DIR, PROGRESS_DIR

    marker = out / OURS_DIR / PROGRESS_DIR / f"{0:06d}.json"
    shutil.rmtree(out, ignore_errors=True)  # an earlier run's marker would count at once
    first = None
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        while proc.poll() is None:
            if first is None and marker.is_file():
                first = time.perf_counter() - t0
            time.sleep(0.02)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(cmd[2:4])} failed ({proc.returncode}): "
                               f"{err.read().decode()[-1000:]}")
    if first is None and marker.is_file():  # written in the last poll's interval
        first = wall
    return {"process_start_to_first_batch_s": None if first is None else round(first, 2),
            "wall_s": round(wall, 2)}


def build(root: Path, tiny: bool, device: str) -> Path:
    """FLUX.1's encoders at their real size with random weights (or the tiny ones), saved in the
    FLUX layout in bf16."""
    from shardcook.encoders.fullsize import flux_encoders
    from shardcook.encoders.loading import FLUX_LAYOUT
    from shardcook.encoders.tiny import _clip_tokenizer, _t5_tokenizer, build_tiny_flux

    if tiny:
        return build_tiny_flux(root)
    saved(root, flux_encoders, FLUX_LAYOUT, device)
    _clip_tokenizer(root / "tokenizer")  # small vocabularies; ids fit the real embedding tables
    _t5_tokenizer(root / "tokenizer_2")
    return root


def build_wan(root: Path, tiny: bool, device: str) -> Path:
    """Wan 2.1's encoders with random weights (or the tiny ones), saved in the diffusers layout."""
    from shardcook.encoders.fullsize import wan_encoders
    from shardcook.encoders.tiny import _t5_tokenizer, build_tiny_wan
    from shardcook.encoders.wan import WAN_LAYOUT

    if tiny:
        return build_tiny_wan(root)
    saved(root, wan_encoders, WAN_LAYOUT, device)
    _t5_tokenizer(root / "tokenizer")  # a small vocabulary; ids fit the real embedding table
    return root


def saved(root: Path, encoders: Callable[[], dict], layout: dict, device: str) -> None:
    """`encoders()`, built on `device`, each saved in bf16 in its folder of `layout`."""
    import torch

    root.mkdir(parents=True, exist_ok=True)
    with torch.device(device):
        for name, model in encoders().items():
            model.to(torch.bfloat16).save_pretrained(root / layout[name][0])


def wan_run(model: Path, src: Path, out: Path, shape: list[int], batch: int, device: str,
            precision: str, flops: dict[str, int] | None, compile: bool = False) -> dict:
    """`encode --layout wan --video-mode video` (with --compile when `compile`) in this process:
    clips/s, the encoders' share not waiting for clips (1 - input_wait / (encode + input_wait))
    and the GPU's, the peak GPU memory, and the MFU of clips/s while encoding x `flops` (per
    clip, each encoder)."""
    rep, gpu, mem = in_process({
        "input_dir": str(src), "output_dir": str(out), "layout": "wan", "height": shape[1],
        "width": shape[2], "video_mode": "video", "resize_mode": "bilinear", "batch_size": batch,
        "model_path": str(model), "precision": precision, "device": device, "overwrite": True,
        "quiet": True, "finalize": False, "compile": compile})
    st = rep["stage_seconds"]
    busy = st["encode"] / (st["encode"] + st["input_wait"])
    rate = rep["num_written"] / (st["encode"] + st["input_wait"])
    return {"shape": shape, "batch": batch, "compile": compile, "clips": rep["num_written"],
            "wall_s": rep["wall_seconds"], "clips_per_s_wall": rep["inputs_per_second"],
            "load_encoders_s": st.get("load_encoders"), "encode_s": st["encode"],
            "input_wait_s": st["input_wait"], "clips_per_s_encoding": round(rate, 3),
            "busy_share": round(busy, 4), "gpu_busy": gpu, "gpu_peak_mib": mem,
            "tflop_per_clip": tflop(flops), "peak_tflops": PEAK, "mfu": whole_mfu(rate, flops)}


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


def photos(folder: Path, n: int, captions: int | None = None) -> Path:
    """n photos, each with its own caption, or with one of `captions` distinct ones."""
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
        number = i if captions is None else i % captions
        (folder / f"{i:05d}.txt").write_text(f"a photo of a {names[i % len(names)]}, "
                                             f"number {number}")
    return folder


def pipeline_run(model, src, out, size, batch, device, precision, t5_len,
                 flops: dict[str, int] | None, compile: bool = False) -> dict:
    """`encode --layout primus` (with --compile when `compile`) in this process: images/s, the
    wait share, the GPU's busy share and peak memory, and the MFU of images/s while encoding x
    `flops` (per image, each encoder: T5 runs on all t5_len tokens, this layout passes it no
    attention mask; with repeated captions T5 runs fewer, so the MFU overstates)."""
    rep, gpu, mem = in_process({
        "input_dir": str(src), "output_dir": str(out), "image_size": size, "batch_size": batch,
        "model_path": str(model), "precision": precision, "device": device,
        "t5_max_length": t5_len, "overwrite": True, "quiet": True, "finalize": False,
        "layout": "primus", "compile": compile})
    st = rep["stage_seconds"]
    rate = rep["num_written"] / (st["encode"] + st["input_wait"])
    return {"size": size, "batch": batch, "compile": compile, "samples": rep["num_written"],
            "wall_s": rep["wall_seconds"], "samples_per_s_wall": rep["inputs_per_second"],
            "load_encoders_s": st.get("load_encoders"), "encode_s": st["encode"],
            "input_wait_s": st["input_wait"], "samples_per_s_encoding": round(rate, 2),
            "wait_share": round(st["input_wait"] / (st["encode"] + st["input_wait"]), 4),
            "gpu_busy": gpu, "gpu_peak_mib": mem, "tflop_per_sample": tflop(flops),
            "peak_tflops": PEAK, "mfu": whole_mfu(rate, flops)}


class EncoderTimes:
    """The time of each wrapped encoder call: on a GPU, between CUDA events recorded on the
    current stream just before and after it (the GPU's time for the work the call queued, read
    once the GPU is done, so timing never makes the host wait); on a CPU, the host's clock."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")
        self.calls: dict[str, list[tuple[Any, Any]]] = {}
        self._wrapped: list[tuple[object, str]] = []

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def wrap(self, name: str, obj: object, method: str) -> None:
        """Times each call of `obj.method` under `name`, by an attribute of the instance that
        shadows its class's method until `unwrap`."""
        inner = getattr(obj, method)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = self._mark()
            out = inner(*args, **kwargs)
            self.calls.setdefault(name, []).append((start, self._mark()))
            return out

        import torch

        # a compiled module (`encode --compile`'s) calls this in its compiled region: torch.compile
        # leaves the timing out and still compiles the model's own forward
        setattr(obj, method, torch.compiler.disable(timed, recursive=False))
        self._wrapped.append((obj, method))

    def unwrap(self) -> None:
        """The methods back as they were: a wrapper refers to its model, a cycle that would keep
        the model's GPU memory until the next garbage collection."""
        for obj, method in self._wrapped:
            delattr(obj, method)
        self._wrapped.clear()

    def ms_per_call(self) -> dict[str, float]:
        """Each name's mean milliseconds per call since `calls` was last cleared."""
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return {name: sum(s.elapsed_time(e) if self.cuda else (e - s) * 1e3 for s, e in pairs)
                / len(pairs) for name, pairs in self.calls.items()}


def timed_steps(step: Callable[[], None], times: EncoderTimes, batch: int, unit: str,
                flops: dict[str, int] | None, device: str, reps: int) -> dict:
    """Two warm-up steps (compiling, if any), then `reps` timed ones of `batch` samples each:
    samples/s of the whole step, each encoder's time per call, the MFU of each (`batch` x its
    FLOPs per sample over its time per call) and of the whole step (samples/s x the FLOPs per
    sample of all), and the peak GPU memory."""
    try:
        step()
        step()
        times.calls.clear()
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        rate = reps * batch / (time.perf_counter() - t0)
        ms = times.ms_per_call()
    finally:
        times.unwrap()
    shares = {name: None if flops is None else mfu(batch * flops[name] / (t / 1e3))
              for name, t in ms.items()}
    return {f"{unit}_per_s": round(rate, 2), "ms_per_call": {k: round(t, 2) for k, t in ms.items()},
            "peak_tflops": PEAK, "mfu": {**shares, "encode": whole_mfu(rate, flops)},
            "gpu_peak_mib": gpu_peak_mib(device)}


def whole_mfu(rate: float, flops: dict[str, int] | None) -> float | None:
    """MFU of `rate` samples/s, each `flops` (per encoder; None: not counted)."""
    return None if flops is None else mfu(rate * sum(flops.values()))


def encoder_only(model, size, batch, device, precision, variant, t5_len,
                 flops: dict[str, int] | None, reps=5) -> dict:
    """VAE+T5+CLIP on synthetic pixels (no pipeline), for a variant: `timed_steps`' figures.
    `cudnn_benchmark` turns cuDNN's autotuner on; `encode_compile` is `encode --compile`'s
    (`compile_encoders`, and the autotuner); `channels_last` and `channels_last+compile` (of
    the VAE's encoder alone) are the layouts measured before."""
    import numpy as np
    import torch
    from shardcook.encoders.compiled import compile_encoders, cudnn_autotuned
    from shardcook.encoders.flux import FluxEncoders

    reset_gpu_peak(device)
    enc = FluxEncoders.load(model_path=str(model), precision=precision, device=device,
                            t5_max_length=t5_len, latent_mode="sample")
    if "channels_last" in variant:
        enc.vae.to(memory_format=torch.channels_last)
    if variant == "encode_compile":
        compile_encoders(enc)
    elif "compile" in variant:
        enc.vae.encoder = torch.compile(enc.vae.encoder)
    px = np.random.default_rng(0).integers(0, 255, (batch, size, size, 3), dtype=np.uint8)
    keys = [f"{i:010d}" for i in range(batch)]
    caps = ["a photo of a cat on a red sofa"] * batch
    times = EncoderTimes(device)
    times.wrap("vae", enc.vae, "encode")
    times.wrap("t5", enc.t5, "forward")
    times.wrap("clip", enc.clip, "forward")

    def step():
        enc.encode_pixels(px, keys)
        enc.encode_text(caps)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    with cudnn_autotuned(device, variant in ("cudnn_benchmark", "encode_compile")):
        return timed_steps(step, times, batch, "images", flops, device, reps)


def wan_encoder_only(model, shape, batch, device, precision, flops: dict[str, int] | None,
                     reps=3) -> dict:
    """Wan's VAE + UMT5 on synthetic clips of `shape` (no pipeline): `timed_steps`' figures."""
    import numpy as np
    import torch
    from shardcook.encoders.wan import WanEncoders

    reset_gpu_peak(device)
    enc = WanEncoders.load(model_path=str(model), revision=None, token_file=None,
                           precision=precision, device=device, latent_mode="mode", seed=0)
    clips = np.random.default_rng(0).integers(0, 255, (batch, *shape, 3), dtype=np.uint8)
    keys = [f"{i:010d}" for i in range(batch)]
    caps = [f"a white bar sweeping over noise, clip {i}" for i in range(batch)]
    times = EncoderTimes(device)
    times.wrap("vae", enc.vae, "encode")
    times.wrap("umt5", enc.umt5, "forward")

    def step():
        enc.encode_pixels(clips, keys)
        enc.encode_text(caps)
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    return {"shape": shape, "batch": batch,
            **timed_steps(step, times, batch, "clips", flops, device, reps)}


#: Loads FLUX's T5 for an fp32 run in a fresh process and prints the seconds: `stored`, as
#: `encode` does (read in the checkpoint's bf16, widened on the device); `host`, read in fp32 on
#: the host, then moved.
LOAD_T5 = """
import sys, time, torch
from shardcook.encoders.loading import EncoderSource, load_encoder
from transformers import T5EncoderModel
folder, device, way = sys.argv[1:4]
t0 = time.perf_counter()
if way == "stored":
    load_encoder(EncoderSource("t5", folder, True, "text_encoder_2", "tokenizer_2", None,
                               "--model-path"), None, torch.float32, device)
else:
    T5EncoderModel.from_pretrained(folder + "/text_encoder_2", dtype=torch.float32).to(device)
if device.startswith("cuda"):
    torch.cuda.synchronize()
print(time.perf_counter() - t0)
"""


def t5_load_fp32(model: Path, device: str) -> dict:
    """T5 loaded for an fp32 run both ways (`LOAD_T5`), each a fresh process after its files
    were read once (so both find them in the page cache): the load's seconds, the process's
    wall seconds and peak RSS (MiB)."""
    from encode_wan_vs_bridge import vm_hwm_kib

    for f in (model / "text_encoder_2").iterdir():
        with f.open("rb") as data:
            while data.read(1 << 24):
                pass
    out = {}
    for way in ("host", "stored"):
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", LOAD_T5, str(model), device, way],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, vm_hwm_kib(proc.pid))
            time.sleep(0.05)
        stdout, stderr = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"loading T5 ({way}) failed: {stderr[-1000:]}")
        out[way] = {"load_s": round(float(stdout.split()[-1]), 2),
                    "wall_s": round(time.perf_counter() - t0, 2), "peak_rss_mib": peak // 1024}
        print("load_t5_fp32", way, json.dumps(out[way]), flush=True)
    return out


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


def shardcook_encode(*options: object) -> list[str]:
    return [sys.executable, "-m", "shardcook", "encode", *map(str, options), "--no-finalize",
            "--overwrite", "--quiet"]


def flux_encoders_alone(args: argparse.Namespace, model: Path, flops: dict) -> list[dict]:
    """FLUX's encoders alone: each variant at every size and batch, the baselines first (under
    --deadline, the variants that would start past it are skipped)."""
    rows = []
    for variant in ("baseline", "cudnn_benchmark", "encode_compile", "channels_last",
                    "channels_last+compile"):
        for size in args.sizes:
            for batch in args.batches:
                row: dict = {"size": size, "batch": batch, "variant": variant,
                             "images_per_s": overdue(args.deadline)}
                if row["images_per_s"] is None:
                    try:
                        row.update(encoder_only(model, size, batch, args.device, args.precision,
                                                variant, args.t5_len, flops.get(size)))
                    except Exception as e:  # noqa: BLE001 - a failing variant is reported
                        row["images_per_s"] = (f"failed: {type(e).__name__}: "
                                               f"{str(e).splitlines()[0][:200]}")
                rows.append(row)
                print("encoder_only", json.dumps(rows[-1]), flush=True)
    return rows


def flux_phases(args: argparse.Namespace) -> list[tuple[str, Callable[[dict], object]]]:
    """FLUX's phases, in order: build and photos, FLOPs per sample, the pipeline per size and
    on photos of 4 captions, the first batch of a fresh process, T5's fp32 load both ways, the
    pipeline with --compile per size and its first batch, Bridge, encoders alone."""
    state: dict = {"flops": {}}

    def built(results: dict) -> float:
        t0 = time.perf_counter()
        state["model"] = build(WORK / "flux-random", args.tiny, args.device)
        state["src"] = photos(WORK / "photos", args.n)
        state["few_captions"] = photos(WORK / "photos-4-captions", args.n, captions=4)
        return round(time.perf_counter() - t0, 1)

    def counted(results: dict) -> object:
        """A phase of its own: should counting fail, only MFU is left out."""
        from shardcook.encoders.flops import flux_flops, meta_encoders

        meta = meta_encoders(state["model"], "flux")
        state["flops"] = {size: flux_flops(meta, size, args.t5_len) for size in args.sizes}
        return {size: tflop(flops) for size, flops in state["flops"].items()}

    def pipeline(size: int, src: str = "src", compile: bool = False
                 ) -> Callable[[dict], object]:
        return lambda results: pipeline_run(state["model"], state[src], WORK / f"out{size}",
                                            size, args.batches[0], args.device, args.precision,
                                            args.t5_len, state["flops"].get(size), compile)

    def first(*options: str) -> Callable[[dict], object]:
        size, batch, out = args.sizes[0], args.batches[0], WORK / "first-batch"
        return lambda results: {"size": size, "batch": batch, **first_batch(shardcook_encode(
            "--layout", "primus", "--input-dir", state["src"], "--output-dir", out,
            "--model-path", state["model"], "--image-size", size, "--t5-max-length",
            args.t5_len, "--batch-size", batch, "--shard-size", batch, "--max-samples",
            2 * batch, "--precision", args.precision, "--device", args.device, *options), out)}

    def loaded(results: dict) -> object:
        return t5_load_fp32(state["model"], args.device)

    def bridge(results: dict) -> object:
        return bridge_vs_shardcook(state["model"], state["src"], args.sizes[0], args.device,
                                   args.t5_len, args.bridge_script)

    def alone(results: dict) -> list[dict]:
        return flux_encoders_alone(args, state["model"], state["flops"])

    phases: list[tuple[str, Callable[[dict], object]]] = [("build_s", built),
                                                          ("tflop_per_sample", counted)]
    phases += [(f"pipeline_{size}", pipeline(size)) for size in args.sizes]
    phases.append((f"pipeline_{args.sizes[0]}_4_captions", pipeline(args.sizes[0],
                                                                     "few_captions")))
    phases.append(("first_batch", first()))
    phases.append(("load_t5_fp32", loaded))
    phases += [(f"pipeline_{size}_compile", pipeline(size, compile=True))
               for size in args.sizes]
    phases.append(("first_batch_compile", first("--compile")))
    if args.bridge_script is not None:
        phases.append(("bridge", bridge))
    if not args.skip_encoder_only:
        phases.append(("encoder_only", alone))
    return phases


def wan_phases(args: argparse.Namespace) -> list[tuple[str, Callable[[dict], object]]]:
    """Wan's phases, in order: build and clips, FLOPs per clip, the pipeline per batch size and
    with --compile at the first, the first batch of a fresh process, the encoders alone,
    Bridge's script."""
    from encode_wan_vs_bridge import make_clips

    state: dict = {"flops": None}

    def built(results: dict) -> float:
        t0 = time.perf_counter()
        state["model"] = build_wan(WORK / "wan-random", args.tiny, args.device)
        frames, h, w = args.wan_shape
        make_clips(WORK / "clips", args.n, frames, h, w)
        return round(time.perf_counter() - t0, 1)

    def counted(results: dict) -> object:
        """A phase of its own: should counting fail, only MFU is left out."""
        from shardcook.encoders.flops import meta_encoders, wan_flops

        state["flops"] = wan_flops(meta_encoders(state["model"], "wan"), *args.wan_shape)
        return tflop(state["flops"])

    def run(batch: int, compile: bool = False) -> Callable[[dict], object]:
        return lambda results: wan_run(state["model"], WORK / "clips", WORK / f"wan-b{batch}",
                                       args.wan_shape, batch, args.device, args.precision,
                                       state["flops"], compile)

    def first(results: dict) -> object:
        (_, h, w), batch, out = args.wan_shape, args.batches[0], WORK / "first-batch"
        return {"shape": args.wan_shape, "batch": batch, **first_batch(shardcook_encode(
            "--layout", "wan", "--input-dir", WORK / "clips", "--output-dir", out,
            "--model-path", state["model"], "--video-mode", "video", "--resize-mode",
            "bilinear", "--height", h, "--width", w, "--batch-size", batch, "--max-samples",
            2 * batch, "--precision", args.precision, "--device", args.device), out)}

    def alone(results: dict) -> object:
        return wan_encoder_only(state["model"], args.wan_shape, args.batches[0], args.device,
                                args.precision, state["flops"])

    def bridge(results: dict) -> object:
        clips = WORK / "clips-bridge"  # Bridge's script reads every .mp4 of its folder
        clips.mkdir()
        for p in sorted((WORK / "clips").glob("*.mp4"))[:args.bridge_n]:
            for f in (p, p.with_suffix(".json")):
                (clips / f.name).hardlink_to(f)
        return wan_vs_bridge(state["model"], clips, args.wan_shape, args.batches[-1],
                             args.device, args.bridge_wan_script)

    phases: list[tuple[str, Callable[[dict], object]]] = [("build_s", built),
                                                          ("tflop_per_clip", counted)]
    phases += [(f"wan_b{batch}", run(batch)) for batch in args.batches]
    phases.append((f"wan_b{args.batches[0]}_compile", run(args.batches[0], compile=True)))
    phases.append(("first_batch", first))
    if not args.skip_encoder_only:
        phases.append(("wan_encoder_only", alone))
    if args.bridge_wan_script is not None:
        phases.append(("wan_vs_bridge", bridge))
    return phases


def print_mfu(results: dict) -> None:
    """One line per phase (or encoders-alone row) that measured MFU, after their JSON."""
    if PEAK is None:
        return
    for name, value in results.items():
        for row in value if isinstance(value, list) else [value]:
            if isinstance(row, dict) and row.get("mfu") is not None:
                what = " ".join(f"{k} {row[k]}" for k in ("size", "shape", "batch", "variant")
                                if k in row)
                print(f"MFU {name} ({what}) against {PEAK:g} TFLOP/s: {json.dumps(row['mfu'])}")


def overdue(deadline: float | None) -> str | None:
    """Why a step that would start now is skipped: more than `deadline` seconds have passed since
    the phases started (None: it runs)."""
    elapsed = time.perf_counter() - STARTED
    if deadline is None or elapsed <= deadline:
        return None
    return f"skipped: {elapsed:.0f} s passed, past --deadline {deadline:.0f}"


def run_phases(phases: list[tuple[str, Callable[[dict], object]]], deadline: float | None
               ) -> dict:
    """Each phase in order, its result (or its error) kept under its name and written to
    WORK/results.json as soon as it ends; a phase that would start past `deadline` seconds is
    skipped (and so is each encoders-alone variant), and so is every phase after a failed
    build."""
    global STARTED
    results: dict = {}
    STARTED = time.perf_counter()
    for name, phase in phases:
        skipped = overdue(deadline)
        if skipped is not None:
            results[name] = skipped
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


def device_peak(device: str, given: float | None) -> float | None:
    """The peak (TFLOP/s) MFU is measured against: the GPU's from `PEAK_TFLOPS` or `given`; on a
    CPU, `given` (None: no MFU). SystemExit with one line when it cannot be had."""
    if not device.startswith("cuda"):
        return given
    import torch

    if not torch.cuda.is_available():
        sys.exit(f"encode_gpu.py: --device {device} but no CUDA device is visible; run it on a "
                 "GPU machine, or with --device cpu.")
    name = torch.cuda.get_device_name(torch.device(device))
    peak = peak_tflops(name, given)
    print(f"peak: {peak:g} TFLOP/s dense bf16 ({name}"
          f"{', from --peak-tflops' if given is not None else ''})", flush=True)
    return peak


def main() -> None:
    global WORK, PEAK
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
                    help="leave out the encoders-alone phase")
    ap.add_argument("--wan", action="store_true", help="the Wan case instead of FLUX's")
    ap.add_argument("--wan-shape", type=int, nargs=3, default=[81, 480, 832],
                    metavar=("FRAMES", "HEIGHT", "WIDTH"))
    ap.add_argument("--bridge-wan-script", type=Path, default=None)
    ap.add_argument("--bridge-n", type=int, default=8,
                    help="Wan: clips for the side by side with Bridge's script")
    ap.add_argument("--deadline", type=float, default=None,
                    help="skip the phases that would start after this many seconds")
    ap.add_argument("--work", type=Path, default=WORK, help="the work folder (emptied first)")
    ap.add_argument("--peak-tflops", type=tflops_arg, default=None,
                    help="the device's dense bf16 peak in TFLOP/s, for MFU (default: by the "
                         "GPU's name: " + ", ".join(
                             f"{label} {peak:g}" for label, peak in dict(PEAK_TFLOPS.values(
                             )).items()) + ")")
    args = ap.parse_args()
    PEAK = device_peak(args.device, args.peak_tflops)
    from shardcook.jobs.encode.job import quiet_model_libraries

    quiet_model_libraries()
    WORK = args.work
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    print_mfu(run_phases(wan_phases(args) if args.wan else flux_phases(args), args.deadline))
    print(f"wrote {WORK / 'results.json'}")


if __name__ == "__main__":
    main()
