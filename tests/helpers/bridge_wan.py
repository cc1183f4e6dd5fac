"""Megatron-Bridge's Wan data path, re-typed for the tests (Bridge is not installable here).

- The prep script: NVIDIA-NeMo/DFM `examples/megatron/recipes/wan/prepare_dataset_wan.py` at
  commit e3d9ae506d8b91aaf0badf9e47ab71f15aecf6ba (the script Megatron-Bridge ships as
  `examples/models/wan/prepare_dataset/prepare_dataset_wan.py`): `prompt_clean`,
  `_calculate_resize_dimensions`, `_encode_text`, `_encode_video_latents`, the frame pick of
  `_extract_evenly_spaced_frames`, and the sample dicts of `main` for `--output_format energon`.
  One substitution: it reads frames with OpenCV (`cv2.VideoCapture`, BGR -> RGB), which is not
  installed here; `read_frames` reads them with PyAV as RGB24 at about OpenCV's cost, and the
  tests use clips already at the target size, so its `cv2.resize` would return the frame
  unchanged.
- The task encoder: NVIDIA-NeMo/Megatron-Bridge
  `src/megatron/bridge/diffusion/data/wan/wan_taskencoder.py` at commit
  0c89948203ff524204a8609d9b8130312afc607c (`cook`, `WanTaskEncoder.encode_sample`), with
  `grid_sizes_calculation` and `patchify` from `src/megatron/bridge/diffusion/models/wan/utils.py`
  at a4a6cca073456be662d8d60e2e626f62683a36e2; context parallelism taken as 1 (no
  `megatron.core` here), and `batch` stacking samples instead of Bridge's sequence packing.
"""

from __future__ import annotations

import html
import pickle
import re
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F


def prompt_clean(text: str) -> str:
    try:
        import ftfy
    except ImportError:
        pass
    else:
        text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


def calculate_resize_dimensions(original_height, original_width, target_size,
                                maintain_aspect_ratio, center_crop=False):
    if target_size is None:
        return original_height, original_width
    target_height, target_width = target_size
    if not maintain_aspect_ratio:
        return target_height, target_width
    original_aspect = original_width / max(1, original_height)
    target_aspect = target_width / max(1, target_height)
    if center_crop:
        if original_aspect > target_aspect:
            return target_height, int(target_height * original_aspect)
        return int(target_width / original_aspect), target_width
    if original_aspect > target_aspect:
        return int(target_width / original_aspect), target_width
    return target_height, int(target_height * original_aspect)


def read_frames(video_path: str) -> list[np.ndarray]:
    """Every frame as H x W x 3 uint8 RGB (PyAV in place of OpenCV, see the module docstring),
    at OpenCV's cost: a `cv2.VideoCapture` decodes with FFmpeg's threads (as `AUTO` here) and
    keeps one swscale context for the clip (one reformatter here; PyAV's `to_ndarray(format=)`
    would build one per frame, which OpenCV does not)."""
    import av
    from av.video.reformatter import VideoReformatter

    reformatter = VideoReformatter()
    with av.open(video_path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        return [reformatter.reformat(f, format="rgb24").to_ndarray()
                for f in container.decode(stream)]


def load_models(model_id: Path):
    from diffusers import AutoencoderKLWan
    from transformers import AutoTokenizer, UMT5EncoderModel

    dtype = torch.float32  # the script's dtype on the CPU
    text_encoder = UMT5EncoderModel.from_pretrained(model_id, subfolder="text_encoder",
                                                    torch_dtype=dtype).eval()
    vae = AutoencoderKLWan.from_pretrained(model_id, subfolder="vae", torch_dtype=dtype).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_id, subfolder="tokenizer")
    return vae, text_encoder, tokenizer, dtype


@torch.no_grad()
def encode_text(tokenizer, text_encoder, caption, max_sequence_length=226):
    caption = prompt_clean(caption)
    inputs = tokenizer(caption, max_length=max_sequence_length, padding="max_length",
                       truncation=True, return_tensors="pt", return_attention_mask=True)
    seq_lens = inputs["attention_mask"].gt(0).sum(dim=1).long()
    prompt_embeds = text_encoder(input_ids=inputs["input_ids"],
                                 attention_mask=inputs["attention_mask"]).last_hidden_state
    prompt_embeds = [u[:v] for u, v in zip(prompt_embeds, seq_lens, strict=True)]
    return torch.stack([torch.cat([u, u.new_zeros(max_sequence_length - u.size(0), u.size(1))])
                        for u in prompt_embeds], dim=0)


@torch.no_grad()
def encode_video_latents(vae, video_tensor):
    video_tensor = video_tensor.to(dtype=vae.dtype)
    video_tensor = video_tensor * 2.0 - 1.0
    video_latents = vae.encode(video_tensor).latent_dist.mean  # deterministic_latents
    latents_mean = torch.tensor(vae.config.latents_mean, dtype=vae.dtype).view(1, -1, 1, 1, 1)
    latents_std = torch.tensor(vae.config.latents_std, dtype=vae.dtype).view(1, -1, 1, 1, 1)
    return (video_latents - latents_mean) / latents_std


def _video_tensor(frames: list[np.ndarray], dtype) -> torch.Tensor:
    video_array = np.array([f.astype(np.float32) / 255.0 for f in frames])  # T, H, W, C
    return torch.from_numpy(video_array).permute(3, 0, 1, 2).unsqueeze(0).to(dtype=dtype)


def prepare(model_id: Path, videos: list[tuple[str, str]], *, mode: str, num_frames: int = 10
            ) -> dict[str, dict[str, Any]]:
    """The samples `main` writes for `videos` [(path, caption)] (deterministic latents, fp32,
    target size = the clips' size), by key: {"pth": latents, "pickle": text embedding,
    "json": meta}."""
    vae, text_encoder, tokenizer, dtype = load_models(model_id)
    out: dict[str, dict[str, Any]] = {}
    for index, (video_path, caption_text) in enumerate(videos):
        frames = read_frames(video_path)
        h, w = frames[0].shape[:2]
        settings = {"target_size": (h, w), "resize_mode": "bilinear",
                    "maintain_aspect_ratio": True, "center_crop": False}
        common = {"video_path": video_path}
        text_embed_cpu = encode_text(tokenizer, text_encoder, caption_text)[0]
        if mode == "video":
            latents = encode_video_latents(vae, _video_tensor(frames, dtype))[0]
            out[f"{index:06}"] = {"pth": latents, "pickle": text_embed_cpu, "json": {
                **common, "processed_frames": len(frames), "processed_height": h,
                "processed_width": w, "caption": caption_text, "deterministic_latents": True,
                "memory_optimization": True, "model_version": "wan2.1",
                "processing_mode": "video", "resize_settings": settings}}
            continue
        end = len(frames) - 1
        picks = [0] if num_frames <= 1 else np.linspace(0, end, num_frames, dtype=int).tolist()
        for frame_idx, pick in enumerate(picks, start=1):
            latents = encode_video_latents(vae, _video_tensor([frames[pick]], dtype))[0]
            out[f"{index:06}_{frame_idx:02}"] = {"pth": latents, "pickle": text_embed_cpu,
                                                 "json": {
                **common, "processed_frames": 1, "processed_height": h, "processed_width": w,
                "caption": caption_text, "deterministic_latents": True,
                "memory_optimization": True, "model_version": "wan2.1",
                "processing_mode": "frames", "frame_index": frame_idx,
                "total_frames_in_video": len(picks), "resize_settings": settings}}
    return out


# ---- Bridge's WanTaskEncoder ----------------------------------------------------------------


def grid_sizes_calculation(input_shape, patch_size):
    return [d // p for d, p in zip(input_shape, patch_size, strict=True)]


def patchify(x, patch_size):
    out = []
    for u in x:
        c, f_pf, h_ph, w_pw = u.shape
        pf, ph, pw = patch_size
        assert f_pf % pf == 0 and h_ph % ph == 0 and w_pw % pw == 0
        fp, hp, wp = f_pf // pf, h_ph // ph, w_pw // pw
        t = u.reshape(c, fp, pf, hp, ph, wp, pw).permute(1, 3, 5, 2, 4, 6, 0)
        out.append(t.reshape(fp * hp * wp, c * (pf * ph * pw)))
    return out


def wan_batches(root: Path) -> list[dict[str, Any]]:
    """Every sample of `root` through Energon with Bridge's cooker and `encode_sample`, one
    sample per batch."""
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        SkipSample,
        WorkerConfig,
        basic_sample_keys,
        get_loader,
        get_train_dataset,
        stateless,
    )

    @stateless
    def cook(sample: dict) -> dict:
        return dict(**basic_sample_keys(sample), json=sample["json"], pth=sample["pth"],
                    pickle=sample["pickle"])

    class WanTaskEncoder(DefaultTaskEncoder):
        cookers: ClassVar = [Cooker(cook)]
        patch_spatial, patch_temporal = 2, 1

        @stateless
        def encode_sample(self, sample: dict) -> dict:
            video_latent = sample["pth"]
            context_embeddings = sample["pickle"]
            if torch.isnan(video_latent).any() or torch.isinf(video_latent).any():
                raise SkipSample()
            if torch.max(torch.abs(video_latent)) > 1e3:
                raise SkipSample()
            patch = (self.patch_temporal, self.patch_spatial, self.patch_spatial)
            grid_size = grid_sizes_calculation(video_latent.shape[1:], patch)
            video_latent = patchify([video_latent], patch)[0]
            context_max_len = 512
            context_embeddings = F.pad(context_embeddings,
                                       (0, 0, 0, context_max_len - context_embeddings.shape[0]))
            return {"__key__": sample["__key__"], "video": video_latent,
                    "context_embeddings": context_embeddings,
                    "latent_shape": torch.tensor(grid_size, dtype=torch.int32),
                    "seq_len_q": torch.tensor([video_latent.shape[0]], dtype=torch.int32),
                    "video_metadata": sample["json"]}

        @stateless
        def batch(self, samples):
            return samples[0]

    ds = get_train_dataset(root, batch_size=1, shuffle_buffer_size=None,
                           max_samples_per_sequence=None, repeat=False,
                           worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0),
                           task_encoder=WanTaskEncoder())
    return list(get_loader(ds))


def expected_sample(sample: dict[str, Any]) -> dict[str, Any]:
    """What `encode_sample` gives for a sample `prepare` returned (pickle round trip included)."""
    latent = sample["pth"]
    grid = grid_sizes_calculation(latent.shape[1:], (1, 2, 2))
    video = patchify([latent], (1, 2, 2))[0]
    context = pickle.loads(pickle.dumps(sample["pickle"]))
    return {"video": video, "context_embeddings": F.pad(context, (0, 0, 0, 512 - 226)),
            "latent_shape": torch.tensor(grid, dtype=torch.int32)}
