"""Wan 2.1 and Wan 2.2 A14B as NeMo AutoModel's `wan` / `wan2.2` processors
(`tools/diffusion/processors/wan.py`) encode them for its diffusion cache (`encode --layout
automodel --model-type wan`): the VAE in fp16 on a GPU and fp32 on the CPU, with tiling and
slicing on; UMT5 in bf16 on a GPU and fp32 on the CPU; the latent normalised by the VAE config's
`latents_mean` / `latents_std` in the VAE's dtype and stored in fp16 [1, C, T', h, w]; UMT5's
last hidden state of each caption alone, rows past its tokens zeroed, in UMT5's dtype."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from shardcook.encoders.models import CacheSample, EncodedPixels
from shardcook.encoders.wan import WanEncoders, scaled_clips

if TYPE_CHECKING:
    import numpy as np
    import torch


class AutoModelWanEncoders(WanEncoders):
    """Wan's encoders computing what AutoModel's `wan` processor stores.

    `latent_mode` `mode` is AutoModel's default (`--deterministic`: the posterior mean);
    `sample` (its `--stochastic`) draws as diffusers does, from a generator seeded by (seed,
    sample key) where AutoModel's global generator is unseeded.
    """

    #: AutoModel's frames mode casts each frame's [-1, 1] values to fp16 before the VAE's own
    #: dtype (`_frame_to_video_tensor`); its video mode goes from fp32 straight to it.
    frames_in_half = False

    @classmethod
    def for_run(cls, model: Any, spec: Any, device: str, token_file: str | None
                ) -> AutoModelWanEncoders:
        """The dtypes AutoModel's `load_models` picks by device, whatever `--precision` says."""
        import torch

        gpu = device.startswith("cuda")
        vae_dtype = torch.float16 if gpu else torch.float32
        # UMT5 overflows in fp16, so AutoModel runs it in bf16 on a GPU
        text_dtype = torch.bfloat16 if gpu else torch.float32
        vae, tokenizer, umt5 = cls.parts(model.model_path, model.revision, token_file,
                                         vae_dtype, text_dtype, device)
        # AutoModel encodes with both on; tiling changes the latents of frames over 256 pixels
        vae.enable_slicing()
        vae.enable_tiling()
        return cls(vae, tokenizer, umt5, device=device, dtype=vae_dtype,
                   latent_mode=model.latent_mode, seed=model.seed)

    @cached_property
    def _input_values(self) -> torch.Tensor:
        """Each uint8 value as AutoModel feeds it to the VAE: v / 255 and (x - 0.5) / 0.5 in
        fp32 on the host, then (frames mode) fp16, then the VAE's dtype."""
        import torch

        values = (torch.arange(256, dtype=torch.float32) / 255.0 - 0.5) / 0.5
        if self.frames_in_half:
            values = values.to(torch.float16)
        return values.to(self.dtype).to(self.device)

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """B [T, H, W, 3] uint8 clips of one shape -> latents [B, C, T', H/8, W/8] in fp16,
        normalised in the VAE's dtype; with `posterior`, the VAE's mean and logvar too."""
        import torch

        from shardcook.encoders.flux import drawn_latent

        with torch.inference_mode():
            x = scaled_clips(pixels, self._input_values, self.device)
            dist = self.vae.encode(x.permute(0, 4, 1, 2, 3).contiguous()).latent_dist
            z = drawn_latent(dist, self.latent_mode, self.seed, keys, self.device)
            view = (1, -1, 1, 1, 1)
            mean = torch.tensor(self.norm.latents_mean, device=self.device, dtype=z.dtype)
            std = torch.tensor(self.norm.latents_std, device=self.device, dtype=z.dtype)
            latents = ((z - mean.view(view)) / std.view(view)).to(torch.float16)
            if posterior:
                return EncodedPixels(latents, dist.mean, dist.logvar)
            return EncodedPixels(latents)

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Each caption encoded alone, as AutoModel does (a batch may round differently), then
        stacked: {`prompt_embeds`: [B, 226, D]} in UMT5's dtype (the cache's
        `text_embeddings`)."""
        import torch

        rows = [super(AutoModelWanEncoders, self).encode_text([c]) for c in captions]
        return {name: torch.cat([row[name] for row in rows]) for name in rows[0]}


def wan_cache(sample: CacheSample) -> dict[str, object]:
    """One cache file's dict, key for key and in the order of AutoModel's `WanProcessor.
    get_cache_data`; the latent and text keep AutoModel's batch dimension of 1. `extra` holds
    the video's `first_frame` (a uint8 [H, W, 3] tensor, None in frames mode), `num_frames`,
    `deterministic`, `mode` and `model_version`."""
    e = sample.extra
    return {
        "video_latents": sample.latent.unsqueeze(0),
        "text_embeddings": sample.text["prompt_embeds"].unsqueeze(0),
        "first_frame": e["first_frame"],
        **sample.video_metadata(),
    }
