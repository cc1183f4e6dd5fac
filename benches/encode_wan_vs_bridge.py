"""`shardcook encode --layout wan` side by side with Megatron-Bridge's Wan prep script
(`examples/models/wan/prepare_dataset/prepare_dataset_wan.py`, one clip at a time: decode, VAE,
UMT5, webdataset ShardWriter) on the same generated clips with the same tiny random-weight Wan
encoders (shardcook.encoders.tiny.build_tiny_wan) on the CPU, in both --video-mode's.

    python benches/encode_wan_vs_bridge.py [--n 192] [--frames 17] [--height 48] [--width 80]
                                           [--num-frames 4] [--rss-clips 1 6]
                                           [--rss-batch-sizes 1 2] [--rss-only]

Bridge's side is the re-typed copy of its script in tests/helpers/bridge_wan.py (sources and
commits named there; Bridge is not installable here, and the copy is what the tests hold
shardcook's output equal to), run from this checkout in its own process, writing its samples with
webdataset's ShardWriter as the script's `--output_format energon` does (needs `webdataset`; without
it the Bridge row is skipped). Both sides: fp32, deterministic latents, clips already at the target
size, bilinear, UMT5 padded to 226. shardcook also finalizes (Energon's index), which Bridge leaves
to a later `energon prepare`. Each side runs as a fresh process on n clips and on 2n: the
whole-process rate at 2n, and the steady-state rate n / (time(2n) - time(n)), in which start-up and
loading cancel out (as benches/encode_vs_bridge.py measures it). The peak RSS is each process's own
(its `VmHWM`).

--rss-clips K [K ...]: also the peak RSS of `shardcook encode --layout wan` on K clips of 81
frames at 480 x 832 (`--video-mode video`, tiny encoders, each --rss-batch-sizes), against the
bytes one such decoded clip takes, and the most decoded bytes that waited for the encoders
(report.json's `prepared_peak_bytes`): the decode -> encode queue is bounded in bytes, so the
peak stops growing once it is full, whatever the number of clips. --rss-only: only that part.
Work files go under bench-out/encode_wan_vs_bridge (git-ignored).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "encode_wan_vs_bridge"

#: Bridge's side, in its own process: the re-typed script over a list of (path, caption).
BRIDGE = """
import json, pickle, sys
sys.path.insert(0, sys.argv[1])
import webdataset as wds
from pathlib import Path
from tests.helpers import bridge_wan
videos, out, mode, nf = json.loads(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], int(sys.argv[5])
samples = bridge_wan.prepare(Path(sys.argv[6]), videos, mode=mode, num_frames=nf)
out.mkdir(parents=True)
with wds.ShardWriter(str(out / "shard-%06d.tar"), maxcount=10000) as sink:
    for key, s in samples.items():
        sink.write({"__key__": key, "pth": s["pth"], "pickle": pickle.dumps(s["pickle"]),
                    "json": s["json"]})
"""


def make_clips(folder: Path, n: int, frames: int, h: int, w: int) -> list[tuple[str, str]]:
    """n H.264 clips of a bar sweeping over noise, each with a same-stem `.json` caption
    (Bridge's convention); [(path, caption)] in name order, as both sides read them."""
    import av

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    videos = []
    for i in range(n):
        path = folder / f"clip_{i:05}.mp4"
        with av.open(str(path), mode="w") as container:
            stream = container.add_stream("libx264", rate=16)
            stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
            base = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
            for t in range(frames):
                img = base.copy()
                img[:, (t * 5 + i) % w] = 255
                for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                    container.mux(packet)
            container.mux(stream.encode())
        caption = f"a white bar sweeping over noise, clip {i}"
        path.with_suffix(".json").write_text(json.dumps({"caption": caption}), encoding="utf-8")
        videos.append((str(path), caption))
    return videos


def timed(cmd: list[str]) -> tuple[float, int]:
    """Runs cmd; (wall seconds, its peak RSS in MiB).

    The peak is the process's own high-water mark (`VmHWM`), read every 0.1 s while it runs.
    wait4's `ru_maxrss` is not used: the kernel carries the parent's high-water mark across the
    child's exec, so a parent holding models (encode_gpu.py's) would be reported for each child.
    """
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak_kib = 0
        while proc.poll() is None:
            peak_kib = max(peak_kib, vm_hwm_kib(proc.pid))
            time.sleep(0.1)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            err.seek(0)
            sys.exit(f"{cmd[:4]} failed ({proc.returncode}): {err.read().decode()[-2000:]}")
    return wall, peak_kib // 1024


def vm_hwm_kib(pid: int) -> int:
    """The process's peak resident set so far (kB), 0 once it has gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines()
                 if line.startswith("VmHWM:")), 0)


def shardcook_cmd(model: Path, src: Path, out: Path, h: int, w: int, mode: list[str],
                  batch: int) -> list[str]:
    return [sys.executable, "-m", "shardcook", "encode", "--layout", "wan", "--input-dir",
            str(src), "--output-dir", str(out), "--model-path", str(model), "--height", str(h),
            "--width", str(w), "--video-mode", *mode, "--resize-mode", "bilinear",
            "--latent-mode", "mode", "--device", "cpu", "--precision", "fp32", "--batch-size",
            str(batch), "--shard-size", "8", "--overwrite", "--quiet"]


def subset(videos: list[tuple[str, str]], n: int, dest: Path) -> Path:
    """dest: hard links to the first n clips and their captions."""
    dest.mkdir(parents=True)
    for path, _ in videos[:n]:
        for f in (Path(path), Path(path).with_suffix(".json")):
            os.link(f, dest / f.name)
    return dest


def compare(args: argparse.Namespace, model: Path, videos: list[tuple[str, str]],
            bridge: bool) -> None:
    sys.path.insert(0, str(ROOT / "benches"))
    from encode_vs_bridge import count_samples

    sizes = (args.n, 2 * args.n)
    src = {sizes[1]: WORK / f"clips-{sizes[1]}"}
    src[sizes[0]] = subset(videos, sizes[0], WORK / f"clips-{sizes[0]}")
    modes = {"video": ["video"], "frames": ["frames", "--num-frames", str(args.num_frames)]}
    names = ["shardcook encode"] + (["Bridge's script"] if bridge else [])
    for mode, flags in modes.items():
        per = args.num_frames if mode == "frames" else 1
        t: dict[tuple[str, int], float] = {}
        rss: dict[str, int] = {}
        for n in sizes:
            out = WORK / f"sc-{mode}-{n}"
            t["shardcook encode", n], rss["shardcook encode"] = timed(shardcook_cmd(
                model, src[n], out, args.height, args.width, flags, args.batch_size))
            assert count_samples(out, ".pth") == n * per, "shardcook skipped clips"
            shutil.rmtree(out)
            if bridge:
                out = WORK / f"bridge-{mode}-{n}"
                listed = [(str(src[n] / Path(p).name), c) for p, c in videos[:n]]
                t["Bridge's script", n], rss["Bridge's script"] = timed(
                    [sys.executable, "-c", BRIDGE, str(ROOT), json.dumps(listed), str(out), mode,
                     str(args.num_frames), str(model)])
                assert count_samples(out, ".pth") == n * per, "Bridge's script skipped clips"
                shutil.rmtree(out)
        print(f"--video-mode {' '.join(flags)}: {sizes[1]} clips of {args.frames} frames at "
              f"{args.height} x {args.width} ({sizes[1] * per} samples), tiny Wan encoders, fp32, "
              f"CPU ({os.cpu_count()} cores), shardcook --batch-size {args.batch_size}")
        whole, steady = {}, {}
        for name in names:
            t_n, t_2n = t[name, sizes[0]], t[name, sizes[1]]
            whole[name], steady[name] = sizes[1] / t_2n, args.n / (t_2n - t_n)
            print(f"  {name:<17} {sizes[0]} clips {t_n:6.2f} s, {sizes[1]} clips {t_2n:6.2f} s: "
                  f"whole run {whole[name]:6.2f} clips/s, steady state {steady[name]:6.2f} "
                  f"clips/s, peak RSS {rss[name]} MiB")
        if bridge:
            a, b = names
            print(f"  ratio: whole run {whole[a] / whole[b]:.2f}x, "
                  f"steady state {steady[a] / steady[b]:.2f}x")


def rss_480p(model: Path, counts: list[int], batch_sizes: list[int]) -> None:
    h, w, frames = 480, 832, 81
    videos = make_clips(WORK / "clips-480p", max(counts), frames, h, w)
    clip_mib = frames * h * w * 3 / 2**20
    print(f"clips of {frames} frames at {h} x {w} (one decoded: {clip_mib:.0f} MiB uint8, "
          f"{4 * clip_mib:.0f} MiB as the fp32 VAE input), --video-mode video, tiny encoders, "
          f"fp32, CPU ({os.cpu_count()} cores)")
    for k in counts:
        src = subset(videos, k, WORK / f"clips-480p-{k}")
        for batch in batch_sizes:
            out = WORK / "sc-480p"
            wall, rss = timed(shardcook_cmd(model, src, out, h, w, ["video"], batch))
            report = json.loads((out / ".shardcook" / "report.json").read_text())
            assert report["num_written"] == k, "shardcook skipped clips"
            queued = report.get("prepared_peak_bytes", 0) / 2**20
            print(f"  {k:3} clips, --batch-size {batch}: peak RSS {rss} MiB, at most "
                  f"{queued:.0f} MiB decoded waiting for the encoders, {wall:.1f} s")
            shutil.rmtree(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=192, help="clips of the smaller run (the other: 2n)")
    ap.add_argument("--frames", type=int, default=17)
    ap.add_argument("--height", type=int, default=48)
    ap.add_argument("--width", type=int, default=80)
    ap.add_argument("--num-frames", type=int, default=4, help="--video-mode frames' N")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--rss-clips", type=int, nargs="*", default=[],
                    help="also the peak RSS on this many 81-frame 480 x 832 clips (each count)")
    ap.add_argument("--rss-batch-sizes", type=int, nargs="+", default=[1],
                    help="the --batch-size values of the peak RSS runs")
    ap.add_argument("--rss-only", action="store_true", help="only the peak RSS runs")
    args = ap.parse_args()
    from shardcook.encoders.tiny import build_tiny_wan

    if WORK.exists():
        shutil.rmtree(WORK)
    model = build_tiny_wan(WORK / "tiny-wan-DEMO-WEIGHTS")
    if not args.rss_only:
        videos = make_clips(WORK / f"clips-{2 * args.n}", 2 * args.n, args.frames, args.height,
                            args.width)
        bridge = importlib.util.find_spec("webdataset") is not None
        if not bridge:
            print("Bridge row skipped: its script writes with webdataset "
                  "(pip install webdataset).")
        compare(args, model, videos, bridge)
    if args.rss_clips:
        rss_480p(model, args.rss_clips, args.rss_batch_sizes)


if __name__ == "__main__":
    main()
