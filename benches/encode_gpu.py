"""GPU measurement for `shardcook encode` (prepared; not yet run on a GPU).

Builds architecture-faithful FLUX.1 encoders with random weights from the public configs' shapes
(VAE: 16 latent channels, blocks 128/256/512/512; T5-XXL encoder: d_model 4096, 24 layers;
CLIP-L text: 768, 12 layers), no download, saved in the FLUX layout in bf16; then
  1. runs `shardcook encode` on real photos at 512 and 1024 px and prints images/s and the share of
     encoder time spent waiting for pixels (report.json `input_wait` / (`input_wait` + `encode`));
  2. times the encoders alone on synthetic batches, before/after: channels_last VAE, larger
     batches, torch.compile of the VAE encoder (SDPA is transformers' default attention);
  3. with --bridge-script (a local copy of Megatron-Bridge's prepare_energon_dataset_flux.py,
     see benches/encode_vs_bridge.py): `encode --layout megatron-bridge` against Bridge's script
     on the GPU, both fp32 as Bridge's script is, at the first size, samples/s and the ratio.
With --wan, instead: Wan 2.1's encoders with random weights (AutoencoderKLWan at its default
config: base dim 96, 16 latent channels; UMT5-XXL encoder: d_model 4096, 24 layers), and
`encode --layout wan --video-mode video` on --n generated clips of 81 frames at 480 x 832: clips/s
and the share of encoder time not spent waiting for decoded clips (goal: busy >= 90%), per
batch size of --batches.

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
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "encode_gpu"


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
    """`encode --layout wan --video-mode video` in this process: clips/s and the encoders'
    busy share (1 - input_wait / (encode + input_wait))."""
    from shardcook.config import resolve
    from shardcook.jobs.encode.job import EncodeJob
    from shardcook.pipeline.driver import run_pipeline

    v = {"input_dir": str(src), "output_dir": str(out), "layout": "wan", "height": shape[1],
         "width": shape[2], "video_mode": "video", "resize_mode": "bilinear",
         "batch_size": batch, "model_path": str(model), "precision": precision,
         "device": device, "overwrite": True, "quiet": True, "finalize": False}
    cfg = resolve(v, set(v), encode=True)
    rep = run_pipeline(cfg, EncodeJob(cfg))
    st = rep["stage_seconds"]
    busy = st["encode"] / (st["encode"] + st["input_wait"])
    return {"shape": shape, "batch": batch, "clips": rep["num_written"],
            "wall_s": rep["wall_seconds"], "clips_per_s_wall": rep["inputs_per_second"],
            "encode_s": st["encode"], "input_wait_s": st["input_wait"],
            "busy_share": round(busy, 4)}


def wan_main(args: argparse.Namespace) -> dict:
    import sys

    sys.path.insert(0, str(ROOT / "benches"))
    from encode_wan_vs_bridge import make_clips

    t0 = time.perf_counter()
    model = build_wan(WORK / "wan-random", args.tiny, args.device)
    print(f"built encoders in {time.perf_counter() - t0:.1f} s")
    frames, h, w = args.wan_shape
    src = WORK / "clips"
    make_clips(src, args.n, frames, h, w)
    rows = []
    for batch in args.batches:
        r = wan_run(model, src, WORK / f"wan-b{batch}", args.wan_shape, batch, args.device,
                    args.precision)
        rows.append(r)
        print("wan", json.dumps(r))
    return {"wan": rows}


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
    from shardcook.config import resolve
    from shardcook.jobs.encode.job import EncodeJob
    from shardcook.pipeline.driver import run_pipeline

    v = {"input_dir": str(src), "output_dir": str(out), "image_size": size, "batch_size": batch,
         "model_path": str(model), "precision": precision, "device": device,
         "t5_max_length": t5_len, "overwrite": True, "quiet": True, "finalize": False,
         "layout": layout}
    cfg = resolve(v, set(v), encode=True)
    rep = run_pipeline(cfg, EncodeJob(cfg))
    st = rep["stage_seconds"]
    return {"size": size, "batch": batch, "samples": rep["num_written"],
            "wall_s": rep["wall_seconds"], "samples_per_s_wall": rep["inputs_per_second"],
            "encode_s": st["encode"], "input_wait_s": st["input_wait"],
            "samples_per_s_encoding": round(
                rep["num_written"] / (st["encode"] + st["input_wait"]), 2),
            "wait_share": round(st["input_wait"] / (st["encode"] + st["input_wait"]), 4)}


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
    8), both fp32, on the same photos listed in a `meta.json`; wall seconds of each process."""
    import subprocess
    import sys

    sys.path.insert(0, str(ROOT / "benches"))
    from encode_vs_bridge import with_tokenizer, write_meta_json

    write_meta_json(src)
    t5 = with_tokenizer(model, "text_encoder_2", "tokenizer_2", WORK / "t5")
    clip = with_tokenizer(model, "text_encoder", "tokenizer", WORK / "clip")
    n = sum(1 for p in src.iterdir() if p.suffix == ".jpg")
    runs = {
        "bridge_script": [sys.executable, str(script), "--data_folder", str(src), "--output_dir",
                          str(WORK / "bridge-out"), "--vae_model", str(model), "--t5_model",
                          str(t5), "--clip_model", str(clip), "--device", device, "--height",
                          str(size), "--width", str(size), "--center-crop",
                          "--no-memory-optimization", "--max_sequence_length", str(t5_len)],
        "shardcook": [sys.executable, "-m", "shardcook", "encode", "--layout", "megatron-bridge",
                      "--model-path", str(model), "--input-dir", str(src), "--output-dir",
                      str(WORK / "sc-bridge-out"), "--image-size", str(size), "--t5-max-length",
                      str(t5_len), "--batch-size", "8", "--device", device, "--overwrite",
                      "--quiet"],
    }
    out: dict = {"size": size, "samples": n}
    for name, cmd in runs.items():
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        out[f"{name}_samples_per_s"] = round(n / (time.perf_counter() - t0), 2)
    out["ratio"] = round(out["shardcook_samples_per_s"] / out["bridge_script_samples_per_s"], 2)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--n", type=int, default=96)
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--t5-len", type=int, default=512)
    ap.add_argument("--bridge-script", type=Path, default=None)
    ap.add_argument("--wan", action="store_true", help="the Wan case instead of FLUX's")
    ap.add_argument("--wan-shape", type=int, nargs=3, default=[81, 480, 832],
                    metavar=("FRAMES", "HEIGHT", "WIDTH"))
    args = ap.parse_args()
    from shardcook.jobs.encode.job import quiet_model_libraries

    quiet_model_libraries()
    if WORK.exists():
        shutil.rmtree(WORK)
    if args.wan:
        (WORK / "results.json").write_text(json.dumps(wan_main(args), indent=2))
        print(f"wrote {WORK / 'results.json'}")
        return
    t0 = time.perf_counter()
    model = build(WORK / "flux-random", args.tiny, args.device)
    print(f"built encoders in {time.perf_counter() - t0:.1f} s")
    src = photos(WORK / "photos", args.n)
    results = {"pipeline": [], "encoder_only": []}
    for size in args.sizes:
        r = pipeline_run(model, src, WORK / f"out{size}", size, args.batches[0], args.device,
                         args.precision, args.t5_len)
        results["pipeline"].append(r)
        print("pipeline", json.dumps(r))
    for size in args.sizes:
        for batch in args.batches:
            for variant in ("baseline", "channels_last", "channels_last+compile"):
                try:
                    rate = encoder_only(model, size, batch, args.device, args.precision, variant,
                                        args.t5_len)
                except Exception as e:  # noqa: BLE001 - a variant that fails is reported, not fatal
                    rate = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                row = {"size": size, "batch": batch, "variant": variant, "images_per_s": rate}
                results["encoder_only"].append(row)
                print("encoder_only", json.dumps(row))
    if args.bridge_script is not None:
        results["bridge"] = bridge_vs_shardcook(model, src, args.sizes[0], args.device,
                                                args.t5_len, args.bridge_script)
        print("bridge", json.dumps(results["bridge"]))
    (WORK / "results.json").write_text(json.dumps(results, indent=2))
    print(f"wrote {WORK / 'results.json'}")


if __name__ == "__main__":
    main()
