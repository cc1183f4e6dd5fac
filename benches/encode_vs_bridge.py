"""`shardcook encode --layout megatron-bridge` side by side with Megatron-Bridge's own script,
`examples/diffusion/recipes/flux/prepare_energon_dataset_flux.py` (one image at a time: cv2
decode/resize, VAE, T5, CLIP, webdataset.ShardWriter), on the same photos with the same tiny
random-weight FLUX-layout encoders (shardcook.encoders.tiny) on the CPU.

    python benches/encode_vs_bridge.py --bridge-script PATH [--n 192] [--size 256] [--repeats 1]

PATH is a local copy of Bridge's public script (not part of this repository; get it from
https://github.com/NVIDIA-NeMo/Megatron-Bridge at that path; it needs opencv-python-headless,
webdataset and tqdm, no Megatron). Without it the Bridge row is skipped. Both sides read the same
folder's `meta.json` ({"file_name", "caption"} rows), crop to --size x --size (Bridge:
`--center-crop`, its default bilinear filter, `--no-memory-optimization` so the tiny VAE is not
tiled; shardcook: `--resize-mode crop`), T5 padded to 512 as Bridge does, fp32, and run as
separate processes; times include start-up and loading the encoders, and shardcook's finalize
(Energon's index), which Bridge leaves to a later `energon prepare`. Each side runs on n photos
and on 2n (the n plus n more): the whole-process rate at 2n, and the steady-state rate
n / (time(2n) - time(n)), in which start-up and loading cancel out. Work files go under
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
    """One folder holding an encoder and its tokenizer (how Bridge's script loads each), as hard
    links where the file system has them (T5-XXL's weights are 10 GB)."""
    dest.mkdir(parents=True, exist_ok=True)
    for sub in (encoder, tokenizer):
        for f in (model / sub).iterdir():
            try:
                os.link(f, dest / f.name)
            except OSError:
                shutil.copy(f, dest / f.name)
    return dest


def write_meta_json(src: Path) -> None:
    """Bridge's `meta.json`: one {"file_name", "caption"} per image, in name order."""
    rows = [{"file_name": p.name, "caption": p.with_suffix(".txt").read_text()}
            for p in sorted(src.iterdir()) if p.suffix != ".txt"]
    (src / "meta.json").write_text(json.dumps(rows), encoding="utf-8")


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def first_photos(src: Path, n: int, dest: Path) -> None:
    """dest: hard links to the first n photos of src (and their captions), with their meta.json."""
    rows = json.loads((src / "meta.json").read_text(encoding="utf-8"))[:n]
    dest.mkdir(parents=True)
    for row in rows:
        for f in (src / row["file_name"], (src / row["file_name"]).with_suffix(".txt")):
            os.link(f, dest / f.name)
    (dest / "meta.json").write_text(json.dumps(rows), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bridge-script", type=Path, default=None,
                    help="A local copy of Bridge's prepare_energon_dataset_flux.py.")
    ap.add_argument("--n", type=int, default=192)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    from shardcook.encoders.tiny import build_tiny_flux

    if WORK.exists():
        shutil.rmtree(WORK)
    model = build_tiny_flux(WORK / "tiny-flux-DEMO-WEIGHTS")
    with_tokenizer(model, "text_encoder_2", "tokenizer_2", WORK / "t5")
    with_tokenizer(model, "text_encoder", "tokenizer", WORK / "clip")
    sys.path.insert(0, str(ROOT / "benches"))
    from raw_vs_peers import make_photos

    sizes = (args.n, 2 * args.n)
    src = {sizes[1]: WORK / f"photos-{sizes[1]}"}
    info = make_photos(src[sizes[1]], sizes[1])
    write_meta_json(src[sizes[1]])
    src[sizes[0]] = WORK / f"photos-{sizes[0]}"
    first_photos(src[sizes[1]], sizes[0], src[sizes[0]])
    script = args.bridge_script
    if script is not None and not script.is_file():
        sys.exit(f"--bridge-script {script} does not exist.")
    if script is None:
        print("Bridge row skipped: pass --bridge-script with a local copy of Megatron-Bridge's "
              "examples/diffusion/recipes/flux/prepare_energon_dataset_flux.py "
              "(github.com/NVIDIA-NeMo/Megatron-Bridge); it needs opencv-python-headless.")
    names = ["shardcook encode"] + (["Bridge's script"] if script is not None else [])
    times: dict[tuple[str, int], list[float]] = {(k, n): [] for k in names for n in sizes}
    for r in range(args.repeats):  # alternate, so background load hits both alike
        for n in sizes:
            if script is not None:
                out = WORK / f"bridge{r}-{n}"
                times["Bridge's script", n].append(
                    timed(bridge_cmd(script, model, src[n], out, args.size)))
                assert count_samples(out, ".pickle") == n, "Bridge's script skipped samples"
                shutil.rmtree(out)
            out = WORK / f"sc{r}-{n}"
            times["shardcook encode", n].append(
                timed(shardcook_cmd(model, src[n], out, args.size)))
            assert count_samples(out, ".pickle") == n
            shutil.rmtree(out)
    print(f"{sizes[1]} photos of {info['mp_min']}-{info['mp_max']} MP (mean {info['mp_mean']}, "
          f"{info['formats']}) -> {args.size} px crop, tiny encoders (fp32, CPU, "
          f"{os.cpu_count()} cores), T5 length {T5_LEN}; medians of {args.repeats} run(s), each a "
          "fresh process (start-up, loading, encoding, writing)")
    whole, steady = {}, {}
    for name in names:
        t_n, t_2n = (statistics.median(times[name, n]) for n in sizes)
        whole[name], steady[name] = sizes[1] / t_2n, args.n / (t_2n - t_n)
        print(f"  {name:<17} {sizes[0]} photos {t_n:6.2f} s, {sizes[1]} photos {t_2n:6.2f} s: "
              f"whole run {whole[name]:6.2f} samples/s, steady state {steady[name]:6.2f} "
              "samples/s")
    if len(names) == 2:
        a, b = names
        print(f"  ratio: whole run ({sizes[1]} photos) {whole[a] / whole[b]:.2f}x, "
              f"steady state {steady[a] / steady[b]:.2f}x")


if __name__ == "__main__":
    main()
