"""The video families of benches/automodel_vs_tool.py (Wan 2.1/2.2, HunyuanVideo-1.5, LTX-2):
their models, clips and the two commands; that bench runs and compares them.

AutoModel's side, in a process of its own on one device, "cpu": the tool's `video` command
(`preprocess_video_dataset` for a local folder, vendored in
tests/vendored/automodel/preprocessing_multiprocess.py) as its own functions in their order:
`_get_media_files(video_dir, VIDEO_EXTENSIONS)`, the sidecar caption loader it picks with
`get_caption_loader`, the worker config it builds, the body of `_init_video_worker` without its
`torch.cuda.set_device` (the processor's own `load_models`, the bucket calculator at the
processor's quantisation), the tool's `_process_video` on every clip in turn as
`_process_video_shard_on_gpu`'s loop calls it, then `_save_metadata_shards` with the same extra
fields. Left out: `torch.cuda.device_count()`'s refusal and the one-worker spawn Pool the tool
starts for one GPU (one more interpreter start on its side).

shardcook's side: `encode --layout automodel --model-type F --device cpu --video-mode video
--num-frames N --max-pixels P`. Both: video mode, N frames per clip (17: 4n+1 for Wan and
HunyuanVideo-1.5, 8n+1 for LTX-2), the same pixel budget, `.meta` files, sidecar captions.

Models: the tiny builders' folders (shardcook.encoders.tiny), their VAEs and text encoders made
--width times wider with fresh seeded weights of the same classes (a rebuilt VAE's latent
statistics are the class's defaults: both sides read the same folder). Clips: 24 fps H.264 of
several aspect ratios (several buckets), 1.5 s, every other one with an AAC track (LTX-2
encodes it; a clip without one gets silence on both sides), each with a same-stem `.json`
caption.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from widened_models import rebuild_diffusers, rebuild_transformers

ROOT = Path(__file__).resolve().parents[1]

MAX_PIXELS = 256 * 256
NUM_FRAMES = 17
FPS = 24
#: (width, height) of the clips, in turn: 16:9, 9:16, 1:1, 4:3, 21:9.
SIZES = ((320, 180), (180, 320), (240, 240), (320, 240), (336, 144))
SECONDS = 1.5

#: AutoModel's side, in its own process: the tool's own video functions, on the CPU.
TOOL_DRIVER = """
import importlib, logging, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tqdm import tqdm
from tests.vendored.automodel import preprocessing_multiprocess as tool
module, name, model, video_dir, out, max_pixels, num_frames = sys.argv[2:9]
max_pixels, num_frames = int(max_pixels), int(num_frames)
# what the tool's `from tools.diffusion.processors import ...` does: register the processor
importlib.import_module(f"tests.vendored.automodel.processors.{module}")
logging.basicConfig(level=logging.INFO)
# preprocess_video_dataset for a local folder, on one device
out = Path(out)
out.mkdir(parents=True, exist_ok=True)
processor = tool.ProcessorRegistry.get(name)
video_files = tool._get_media_files(Path(video_dir), tool.VIDEO_EXTENSIONS)
caption_cache = tool.get_caption_loader("sidecar").load_captions(video_files, "caption")
video_config = {"mode": "video", "num_frames": num_frames, "target_frames": None,
                "target_height": None, "target_width": None, "resize_mode": "bilinear",
                "center_crop": True, "deterministic": True, "output_format": "meta"}
# _init_video_worker, less torch.cuda.set_device
tool._worker_device = "cpu"
tool._worker_config = video_config
tool._worker_processor = tool.ProcessorRegistry.get(name)
tool._worker_models = tool._worker_processor.load_models(model, "cpu")
quantization = getattr(tool._worker_processor, "quantization", 8)
tool._worker_calculator = tool.MultiTierBucketCalculator(quantization=quantization,
                                                         max_pixels=max_pixels)
# _process_video_shard_on_gpu's loop
results = []
for video_path in tqdm(video_files, desc="cpu"):
    caption = caption_cache.get(video_path.name)
    results.extend(tool._process_video((str(video_path), str(out), caption, video_config)))
tool._save_metadata_shards(results, out, name, model, processor.model_type, 10000,
                           {"caption_format": "sidecar", "caption_field": "caption",
                            "max_pixels": max_pixels, "mode": "video", "target_frames": None})
"""


# ---- models -------------------------------------------------------------------------------


def wan_models(root: Path, width: int) -> Path:
    """Wan: tiny AutoencoderKLWan and UMT5EncoderModel, `width` times wider."""
    from diffusers.models.autoencoders.autoencoder_kl_wan import AutoencoderKLWan
    from shardcook.encoders.tiny import build_tiny_wan
    from transformers import UMT5EncoderModel

    build_tiny_wan(root)
    rebuild_diffusers(root / "vae", AutoencoderKLWan, base_dim=8 * width)

    def umt5(c: Any) -> None:
        c.d_model, c.d_ff, c.d_kv = 32 * width, 64 * width, 8 * width

    rebuild_transformers(root / "text_encoder", UMT5EncoderModel, umt5)
    return root


def hunyuan_models(root: Path, width: int) -> Path:
    """HunyuanVideo-1.5: tiny AutoencoderKLHunyuanVideo15, Qwen2.5-VL text model, ByT5 and
    SigLIP, `width` times wider (Qwen's heads keep their size of 16, which its rotary sections
    fill)."""
    from diffusers.models.autoencoders.autoencoder_kl_hunyuanvideo15 import (
        AutoencoderKLHunyuanVideo15,
    )
    from shardcook.encoders.tiny import build_tiny_hunyuan_video
    from transformers import Qwen2_5_VLTextModel, SiglipVisionModel, T5EncoderModel

    build_tiny_hunyuan_video(root)
    rebuild_diffusers(root / "vae", AutoencoderKLHunyuanVideo15,
                      block_out_channels=[8 * width] * 5)

    def qwen(c: Any) -> None:
        c.hidden_size, c.intermediate_size = 32 * width, 64 * width
        c.num_attention_heads, c.num_key_value_heads = 2 * width, width

    def byt5(c: Any) -> None:
        c.d_model, c.d_ff, c.d_kv = 24 * width, 48 * width, 8 * width

    def siglip(c: Any) -> None:
        c.hidden_size, c.intermediate_size = 16 * width, 32 * width
        c.num_attention_heads = 2 * width

    rebuild_transformers(root / "text_encoder", Qwen2_5_VLTextModel, qwen)
    rebuild_transformers(root / "text_encoder_2", T5EncoderModel, byt5)
    rebuild_transformers(root / "image_encoder", SiglipVisionModel, siglip)
    return root


def ltx2_models(root: Path, width: int) -> Path:
    """LTX-2: tiny video VAE and Gemma-3, `width` times wider, the text connectors rebuilt for
    Gemma's wider hidden states (heads keep their size of 16). The audio VAE stays as built:
    diffusers sizes its latent statistics by its base channels, which must stay its latent
    channels times mel bins, and 1.5 s of 16 kHz mel is a small part of the work."""
    from diffusers.models.autoencoders.autoencoder_kl_ltx2 import AutoencoderKLLTX2Video
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors
    from shardcook.encoders.tiny import TINY_GEMMA_DIM, build_tiny_ltx2
    from transformers import Gemma3ForConditionalGeneration

    build_tiny_ltx2(root)
    rebuild_diffusers(root / "vae", AutoencoderKLLTX2Video,
                      block_out_channels=[8 * width] * 4)

    def gemma(c: Any) -> None:
        t = c.text_config
        t.hidden_size, t.intermediate_size = TINY_GEMMA_DIM * width, 64 * width
        t.num_attention_heads, t.num_key_value_heads = 2 * width, width

    rebuild_transformers(root / "text_encoder", Gemma3ForConditionalGeneration, gemma)
    rebuild_diffusers(root / "connectors", LTX2TextConnectors,
                      caption_channels=TINY_GEMMA_DIM * width)
    return root


#: --model-type: (model builder, the vendored processor's module, the tool's --processor).
FAMILIES = {"wan": (wan_models, "wan", "wan"), "wan2.2": (wan_models, "wan", "wan2.2"),
            "hunyuanvideo-1.5": (hunyuan_models, "hunyuan", "hunyuanvideo-1.5"),
            "ltx2": (ltx2_models, "ltx2", "ltx2")}

#: AutoModel's hunyuan processor asks for 64-pixel VAE tiles, which diffusers pairs with a
#: 16-latent tile, so past 64 pixels a side its latents overlap and come out larger than
#: H/16 x W/16; shardcook does not copy that fault (docs/FORMAT.md).
LOOSE_SHAPES = {"hunyuanvideo-1.5": ("video_latents",)}


def models(family: str, root: Path, width: int) -> Path:
    return FAMILIES[family][0](root, width)


# ---- inputs -------------------------------------------------------------------------------


def write_clip(path: Path, size: tuple[int, int], seed: int, audio: bool) -> None:
    """SECONDS of generated frames at FPS (H.264), with a tone a little longer (AAC, 44.1 kHz
    stereo) when `audio`."""
    import av
    import numpy as np

    from tests.helpers.video import frames

    w, h = size
    with av.open(str(path), mode="w") as container:
        video = container.add_stream("libx264", rate=FPS)
        video.width, video.height, video.pix_fmt = w, h, "yuv420p"
        track = container.add_stream("aac", rate=44100) if audio else None  # before any packet
        if track is not None:
            track.layout = "stereo"
        for f in frames(int(SECONDS * FPS), h, w, seed=seed):
            container.mux(video.encode(av.VideoFrame.from_ndarray(f, format="rgb24")))
        container.mux(video.encode())
        if track is None:
            return
        t = np.arange(int(44100 * (SECONDS + 0.2))) / 44100
        wave = (0.4 * np.sin(2 * np.pi * (220 + 55 * seed) * t)).astype(np.float32)
        for i in range(0, t.size, 1024):
            chunk = np.ascontiguousarray(np.stack([wave[i:i + 1024]] * 2))
            frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout="stereo")
            frame.sample_rate, frame.pts = 44100, i
            container.mux(track.encode(frame))
        container.mux(track.encode())


def make_inputs(folder: Path, n: int) -> dict:
    """n clips `clip_<i>.mp4`, sizes in turn from SIZES, every other one with audio, each with
    its sidecar caption `clip_<i>.json`."""
    folder.mkdir(parents=True)
    for i in range(n):
        name = folder / f"clip_{i:04d}.mp4"
        write_clip(name, SIZES[i % len(SIZES)], seed=i, audio=i % 2 == 0)
        name.with_suffix(".json").write_text(
            json.dumps({"caption": f"a coloured square moving across clip {i}"}))
    return {"sizes": sorted({SIZES[i % len(SIZES)] for i in range(n)})}


def first_inputs(src: Path, n: int, dest: Path) -> Path:
    """dest: hard links to the first n clips of src, with their captions."""
    dest.mkdir(parents=True)
    for clip in sorted(src.glob("*.mp4"))[:n]:
        for path in (clip, clip.with_suffix(".json")):
            os.link(path, dest / path.name)
    return dest


def describe(info: dict, count: int) -> str:
    sizes = ", ".join(f"{w}x{h}" for w, h in info["sizes"])
    return (f"{count} clips of {SECONDS} s at {FPS} fps ({sizes}; every other one with audio), "
            f"{NUM_FRAMES} frames each in video mode, buckets of <= {MAX_PIXELS} px, each "
            "processor's CPU dtypes")


# ---- commands -----------------------------------------------------------------------------


def shardcook_cmd(family: str, model: Path, src: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "shardcook", "encode", "--layout", "automodel", "--model-type",
            family, "--model-path", str(model), "--input-dir", str(src), "--output-dir",
            str(out), "--device", "cpu", "--video-mode", "video", "--num-frames",
            str(NUM_FRAMES), "--max-pixels", str(MAX_PIXELS), "--overwrite", "--quiet"]


def tool_cmd(family: str, model: Path, src: Path, out: Path) -> list[str]:
    _, module, name = FAMILIES[family]
    return [sys.executable, "-c", TOOL_DRIVER, str(ROOT), module, name, str(model), str(src),
            str(out), str(MAX_PIXELS), str(NUM_FRAMES)]
