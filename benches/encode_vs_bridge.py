"""`shardcook encode --layout megatron-bridge` side by side with Megatron-Bridge's own script,
`examples/diffusion/recipes/flux/prepare_energon_dataset_flux.py` (one image at a time: cv2
decode/resize, VAE, T5, CLIP, webdataset.ShardWriter), on the same photos with the same tiny
random-weight FLUX-layout encoders (shardcook.encoders.tiny) on the CPU.

    python benches/encode_vs_bridge.py --bridge-script PATH [--n 48] [--size 256] [--repeats 2]

PATH is a local copy of Bridge's public script (not part of this repository; get it from
https://github.com/NVIDIA-NeMo/Megatron-Bridge at that path; it needs opencv-python-headless,
webdataset and tqdm, no Megatron). Without it the Bridge row is skipped. Both sides read the same
folder's `meta.json` ({"file_name", "caption"} rows), crop to --size x --size (Bridge:
`--center-crop`, its default bilinear filter, `--no-memory-optimization` so the tiny VAE is not
tiled; shardcook: `--resize-mode crop`), T5 padded to 512 as Bridge does, fp32, and run as
separate processes; times include start-up and loading the encoders, and shardcook's finalize
(Energon's index), which Bridge leaves to a later `energon prepare`. Work files go under
bench-out/encode_vs_bridge (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "encode_vs_bridge"
T5_LEN = 512


def with_tokenizer(model: Path, encoder: str, tokenizer: str, dest: Path) -> Path:
    """One folder holding an encoder and its tokenizer (how Bridge's script loads each)."""
    dest.mkdir(parents=True, exist_ok=True)
    for sub in (encoder, tokenizer):
        for f in (model / sub).iterdir():
            shutil.copy(f, dest / f.name)
    return dest


def write_meta_json(src: Path) -> None:
    """Bridge's `meta.json`: one {"file_name", "caption"} per image, in name order."""
    rows = [{"file_name": p.name, "caption": p.with_suffix(".txt").read_text()}
            for p in sorted(src.iterdir()) if p.suffix != ".txt"]
    (src / "meta.json").write_text(json.dumps(rows), encoding="utf-8")


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env={**os.environ, "PYTHONPATH": str(ROOT / "python")})
    return time.perf_counter() - t0


def shardcook_cmd(model: Path, src: Path, out: Path, size: int) -> list[str]:
    return [sys.executable, "-m", "shardcook", "encode", "--layout", "megatron-bridge",
            "--model-path", str(model), "--input-dir", str(src), "--output-dir", str(out),
            "--image-size", str(size), "--resize-mode", "crop", "--t5-max-length", str(T5_LEN),
            "--batch-size", "8", "--device", "cpu", "--overwrite", "--quiet"]


def bridge_cmd(script: Path, model: Path, src: Path, out: Path, size: int) -> list[str]:
    return [sys.executable, str(script), "--data_folder", str(src), "--output_dir", str(out),
            "--vae_model", str(model), "--t5_model", str(WORK / "t5"),
            "--clip_model", str(WORK / "clip"), "--device", "cpu", "--height", str(size),
            "--width", str(size), "--center-crop", "--no-memory-optimization",
            "--max_sequence_length", str(T5_LEN)]


def count_samples(out: Path, suffix: str) -> int:
    n = 0
    for shard in out.glob("*.tar"):
        with tarfile.open(shard) as tar:
            n += sum(1 for m in tar.getmembers() if m.name.endswith(suffix))
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bridge-script", type=Path, default=None,
                    help="A local copy of Bridge's prepare_energon_dataset_flux.py.")
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    import torch
    from shardcook.encoders.tiny import build_tiny_flux

    if WORK.exists():
        shutil.rmtree(WORK)
    model = build_tiny_flux(WORK / "tiny-flux-DEMO-WEIGHTS")
    with_tokenizer(model, "text_encoder_2", "tokenizer_2", WORK / "t5")
    with_tokenizer(model, "text_encoder", "tokenizer", WORK / "clip")
    sys.path.insert(0, str(ROOT / "benches"))
    from raw_vs_peers import make_photos

    src = WORK / f"photos-{args.n}"
    info = make_photos(src, args.n)
    write_meta_json(src)
    script = args.bridge_script
    if script is not None and not script.is_file():
        sys.exit(f"--bridge-script {script} does not exist.")
    if script is None:
        print("Bridge row skipped: pass --bridge-script with a local copy of Megatron-Bridge's "
              "examples/diffusion/recipes/flux/prepare_energon_dataset_flux.py "
              "(github.com/NVIDIA-NeMo/Megatron-Bridge); it needs opencv-python-headless.")
    times: dict[str, list[float]] = {"shardcook encode": [], "Bridge's script": []}
    for r in range(args.repeats):  # alternate, so background load hits both alike
        if script is not None:
            out = WORK / f"bridge{r}"
            times["Bridge's script"].append(timed(bridge_cmd(script, model, src, out, args.size)))
            assert count_samples(out, ".pickle") == args.n, "Bridge's script skipped samples"
        out = WORK / f"sc{r}"
        times["shardcook encode"].append(timed(shardcook_cmd(model, src, out, args.size)))
        assert count_samples(out, ".pickle") == args.n
    print(f"{args.n} photos of {info['mp_min']}-{info['mp_max']} MP (mean {info['mp_mean']}, "
          f"{info['formats']}) -> {args.size} px crop, tiny encoders (fp32, CPU, "
          f"{torch.get_num_threads()} torch threads), T5 length {T5_LEN}, medians of "
          f"{args.repeats} runs (each a fresh process: start-up, loading, encoding, writing)")
    rates = {}
    for name, ts in times.items():
        if ts:
            rates[name] = args.n / statistics.median(ts)
            print(f"  {name:<17} {rates[name]:7.2f} samples/s   runs: "
                  + ", ".join(f"{t:.2f} s" for t in ts))
    if len(rates) == 2:
        ratio = rates["shardcook encode"] / rates["Bridge's script"]
        print(f"  ratio: {ratio:.2f}x")


if __name__ == "__main__":
    main()
