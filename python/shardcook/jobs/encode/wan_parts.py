"""The parts of one `wan` sample, as Megatron-Bridge's Wan prep script
(`examples/models/wan/prepare_dataset/prepare_dataset_wan.py`) writes them: `pth` (torch.save of
the normalised latent), `pickle` (pickle.dumps of the UMT5 embedding), `json` (Bridge's fields
in its order, then shardcook's own)."""

from __future__ import annotations

import json

from shardcook.jobs.encode.bridge_parts import pickle_tensors
from shardcook.jobs.encode.sample import EncodedClip
from shardcook.layouts.wan import EMBEDDING_PART, LATENT_PART, META_PART


def wan_json(clip: EncodedClip) -> bytes:
    frames, height, width = clip.frames
    meta: dict[str, object] = {
        "video_path": clip.item.source,
        "processed_frames": frames,
        "processed_height": height,
        "processed_width": width,
        "caption": clip.item.caption or "",
        "deterministic_latents": clip.facts["latent_mode"] == "mode",
        "memory_optimization": False,  # no VAE slicing or tiling
        "model_version": clip.family.version,  # Bridge's script: "wan2.1"
        "processing_mode": "video" if clip.frame is None else "frames",
    }
    if clip.frame is not None:
        meta["frame_index"], meta["total_frames_in_video"] = clip.frame
    meta["resize_settings"] = clip.settings
    meta.update(clip.facts)
    return json.dumps(meta).encode("utf-8")  # webdataset's json encoder


def encoded_wan_parts(clip: EncodedClip) -> list[tuple[str, bytes]]:
    """The layout's `encode` part builder."""
    from shardcook.encoders.flux import tensor_bytes
    from shardcook.encoders.wan import PROMPT_EMBEDS

    return [(LATENT_PART, tensor_bytes(clip.latent)),
            (EMBEDDING_PART, pickle_tensors(clip.text[PROMPT_EMBEDS].contiguous().clone())),
            (META_PART, wan_json(clip))]
