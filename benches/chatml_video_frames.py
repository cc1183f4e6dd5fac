"""`shardcook chatml --video-layout frames` on generated 720p clips: frames kept per second.

    python benches/chatml_video_frames.py [--clips 8] [--seconds 10] [--workers N] [--max-pixels P]

Generates `--clips` H.264 1280x720 30 fps clips of `--seconds` each (moving gradients, so the
encoder has real work), one clip per conversation, and runs `shardcook chatml` with the default
`--video-fps 2 --max-frames 32`. Prints the frames stored, the wall time of the whole command and
of its processing stage, and frames/s for both (best of 3). Work files go under bench-out/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench-out" / "chatml_video_frames"


def make_clip(path: Path, seconds: float, seed: int) -> None:
    import av

    h, w, fps = 720, 1280, 30
    yy, xx = np.mgrid[0:h, 0:w]
    with av.open(str(path), "w", format="mp4") as c:
        s = c.add_stream("libx264", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        for k in range(int(seconds * fps)):
            shift = 7 * k + 31 * seed
            frame = np.stack([(xx + shift) % 256, (yy + 2 * shift) % 256,
                              (xx + yy - shift) % 256], -1).astype(np.uint8)
            for p in s.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--max-pixels", type=int, default=None)
    args = ap.parse_args()
    src = WORK / "in"
    src.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(args.clips):
        clip = src / f"clip{i}_{args.seconds:g}s.mp4"
        if not clip.is_file():
            make_clip(clip, args.seconds, i)
        lines.append(json.dumps({"id": str(i), "video": clip.name, "conversation": [
            {"from": "human", "value": "<video>What happens?"},
            {"from": "gpt", "value": "Colours move."}]}))
    jsonl = src / "clips.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "shardcook", "chatml", "--input", str(jsonl), "--output-dir",
           str(WORK / "out"), "--val-fraction", "0", "--workers", str(args.workers),
           "--overwrite", "--quiet"]
    if args.max_pixels:
        cmd += ["--max-pixels", str(args.max_pixels)]
    best = None
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        wall = time.perf_counter() - t0
        rep = json.loads((WORK / "out" / ".shardcook" / "report.json").read_text())
        m = json.loads((WORK / "out" / ".shardcook" / "manifest.json").read_text())
        frames = m["media_totals"]["frames"]
        stage = rep["stage_seconds"]["preprocess"]
        if best is None or wall < best[0]:
            best = (wall, stage, frames)
    wall, stage, frames = best
    print(f"{args.clips} clips x {args.seconds:g} s 1280x720 30 fps, workers {args.workers}, "
          f"max-pixels {args.max_pixels}: {frames} frames stored")
    print(f"  whole command: {wall:.2f} s = {frames / wall:.1f} frames/s")
    print(f"  processing stage (decode, select, resize, JPEG): {stage:.2f} s = "
          f"{frames / stage:.1f} frames/s")
    shutil.rmtree(WORK / "out")


if __name__ == "__main__":
    main()
