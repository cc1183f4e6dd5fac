"""The parts of one `mlperf` (`preencoded_numpy`) sample written by `encode --layout mlperf`, as
MLCommons stores its pre-encoded Flux.1 data: each bfloat16 tensor as the `.npy` bytes of its
uint16 bits, the VAE posterior (mean, logvar) unscaled, and a json sidecar with the key."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING

from shardcook.jobs.encode.sample import EncodedSample
from shardcook.layouts.mlperf import CLIP_PART, JSON_PART, LOGVAR_PART, MEAN_PART, T5_PART

if TYPE_CHECKING:
    import torch


def bf16_npy(tensor: torch.Tensor) -> bytes:
    """`numpy.save` of the tensor's bfloat16 bits as uint16 (C order, no pickle)."""
    import numpy as np
    import torch

    if tensor.dtype != torch.bfloat16:
        raise ValueError(f"the mlperf layout stores bfloat16 tensors, not {tensor.dtype}")
    bits = tensor.detach().contiguous().cpu().view(torch.int16).numpy().view(np.uint16)
    buf = io.BytesIO()
    np.save(buf, bits, allow_pickle=False)
    return buf.getvalue()


def mlperf_parts(key: str, prompt: torch.Tensor, pooled: torch.Tensor, mean: torch.Tensor,
                 logvar: torch.Tensor) -> list[tuple[str, bytes]]:
    """(part, bytes) of one sample, in the layout's order."""
    return [(T5_PART, bf16_npy(prompt)), (CLIP_PART, bf16_npy(pooled)),
            (MEAN_PART, bf16_npy(mean)), (LOGVAR_PART, bf16_npy(logvar)),
            (JSON_PART, json.dumps({"key": key}).encode("utf-8"))]


def encoded_mlperf_parts(s: EncodedSample) -> list[tuple[str, bytes]]:
    """The layout's `encode` part builder: the posterior, not the latent, is stored."""
    from shardcook.encoders.flux import POOLED_PROMPT_EMBEDS, PROMPT_EMBEDS

    mean, logvar = s.posterior
    return mlperf_parts(s.item.key, s.text[PROMPT_EMBEDS], s.text[POOLED_PROMPT_EMBEDS], mean,
                        logvar)
