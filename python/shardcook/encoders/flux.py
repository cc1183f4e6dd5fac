"""The FLUX.1 family (the model registry's `FLUX` entry): batched VAE latents, T5 prompt
embeddings (`prompt_embeds`) and CLIP pooled embeddings (`pooled_prompt_embeds`)."""

from __future__ import annotations

import hashlib
import io
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shardcook.encoders.loading import (
    load_encoder,
    resolve_sources,
    run_facts,
    torch_dtype,
)
from shardcook.encoders.models import FLUX, SCALING_SHIFT, EncodedPixels
from shardcook.encoders.transfer import to_device
from shardcook.hftoken import resolve_token

if TYPE_CHECKING:
    import numpy as np
    import torch
    from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKL
    from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution
    from transformers import CLIPTextModel, PreTrainedTokenizerBase, T5EncoderModel

log = logging.getLogger(__name__)

CLIP_MAX_LENGTH = 77
#: The names of `encode_text`'s tensors (the registry entry's `text.outputs`).
PROMPT_EMBEDS, POOLED_PROMPT_EMBEDS = FLUX.text.outputs


def sample_seed(seed: int, key: str) -> int:
    """The generator seed of one sample: a hash of (seed, key), so it does not depend on
    batching."""
    digest = hashlib.sha256(f"shardcook/{seed}/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


def drawn_latent(dist: Any, latent_mode: str, seed: int, keys: Sequence[str],
                 device: str) -> torch.Tensor:
    """A VAE posterior's latent as AutoModel's processors take it: its mean (`mode`), or
    diffusers' own draw (`sample`) from one generator per sample seeded by (seed, key), where
    AutoModel's generator is unseeded. (`dist` is diffusers' DiagonalGaussianDistribution,
    whose `sample` takes a list of generators, one per row, though typed for one.)"""
    import torch

    if latent_mode == "mode":
        mean: torch.Tensor = dist.mode()
        return mean
    drawn: torch.Tensor = dist.sample(generator=[
        torch.Generator(device=device).manual_seed(sample_seed(seed, k)) for k in keys])
    return drawn


def tensor_bytes(t: torch.Tensor, dtype: torch.dtype | None = None) -> bytes:
    """`torch.save` bytes of a contiguous CPU clone of `t` (never a view into a batch)."""
    import torch

    own = t.detach().to("cpu", dtype=dtype or t.dtype).contiguous().clone()
    buf = io.BytesIO()
    torch.save(own, buf)
    return buf.getvalue()


@dataclass
class LatentFactors:
    scaling_factor: float
    shift_factor: float
    latent_channels: int


def latent_factors(config: Mapping[str, Any]) -> LatentFactors:
    """Scaling, shift (0 when absent) and channel count from a VAE config."""
    return LatentFactors(float(config.get("scaling_factor", 1.0)),
                         float(config.get("shift_factor") or 0.0),
                         int(config.get("latent_channels", 16)))


def flux_normalisation(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a dataset records of the VAE's normalisation (the model registry's entry)."""
    factors = latent_factors(config)
    return {"kind": SCALING_SHIFT, "scaling_factor": factors.scaling_factor,
            "shift_factor": factors.shift_factor}


def flux_manifest(model: Any, token_file: str | None) -> dict[str, Any]:
    """The manifest's encoder facts for a FLUX run (`model`: the run's `ModelConfig`); reads only
    the VAE config. No token is recorded."""
    from shardcook.encoders.loading import vae_config

    m = model
    sources = resolve_sources(m.model_path, m.vae_path, m.clip_path, m.t5_path, m.revision)
    token, _ = resolve_token(token_file)
    factors = latent_factors(vae_config(sources["vae"], token))
    del token
    return {
        "encoders": {name: src.describe() for name, src in sources.items()},
        "scaling_factor": factors.scaling_factor,
        "shift_factor": factors.shift_factor,
        "latent_channels": factors.latent_channels,
        "t5_max_length": m.t5_max_length,
        "clip_max_length": CLIP_MAX_LENGTH,
        **run_facts(m),
    }


class FluxEncoders:
    """The three FLUX encoders on one device (the registry's `Encoders` protocol).

    Args:
        latent_mode: `sample` draws z ~ N(mean, std) with a generator seeded per (seed, key);
            `mode` takes the distribution's mode (its mean).
        t5_attention_mask: Pass the tokenizer's attention mask to T5 (Megatron-Bridge's script
            does; diffusers' FluxPipeline does not, so padding tokens attend to each other).
        scale_latents: Apply the VAE's shift and scaling factors; False keeps the raw latent.
    """

    def __init__(self, vae: AutoencoderKL, clip_tokenizer: PreTrainedTokenizerBase,
                 clip: CLIPTextModel, t5_tokenizer: PreTrainedTokenizerBase, t5: T5EncoderModel,
                 *, device: str, dtype: torch.dtype, t5_max_length: int = 512,
                 latent_mode: str = "sample", seed: int = 0, t5_attention_mask: bool = False,
                 scale_latents: bool = True) -> None:
        factors = latent_factors(dict(vae.config))
        self.vae, self.clip_tokenizer, self.clip = vae, clip_tokenizer, clip
        self.t5_tokenizer, self.t5 = t5_tokenizer, t5
        self.device, self.dtype = device, dtype
        self.t5_max_length, self.latent_mode, self.seed = t5_max_length, latent_mode, seed
        self.scaling_factor, self.shift_factor = factors.scaling_factor, factors.shift_factor
        self.t5_attention_mask, self.scale_latents = t5_attention_mask, scale_latents

    @classmethod
    def load(cls, *, model_path: str | None = None, vae_path: str | None = None,
             clip_path: str | None = None, t5_path: str | None = None,
             revision: str | None = None, token_file: str | None = None,
             precision: str = "bf16", device: str = "cpu", t5_max_length: int = 512,
             latent_mode: str = "sample", seed: int = 0, t5_attention_mask: bool = False,
             scale_latents: bool = True) -> FluxEncoders:
        """Resolves the sources and the token, then loads all three encoders."""
        # the full path: type checkers read diffusers' top-level name as a torch-less placeholder
        from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKL
        from transformers import CLIPTextModel, T5EncoderModel

        sources = resolve_sources(model_path, vae_path, clip_path, t5_path, revision)
        token, _ = resolve_token(token_file)
        dtype = torch_dtype(precision)
        vae, _ = load_encoder(sources["vae"], token, dtype, device)
        clip, clip_tok = load_encoder(sources["clip"], token, dtype, device)
        t5, t5_tok = load_encoder(sources["t5"], token, dtype, device)
        del token
        # load_encoder loads each encoder with its own class and the text encoders' tokenizers
        assert isinstance(vae, AutoencoderKL)
        assert isinstance(clip, CLIPTextModel) and isinstance(t5, T5EncoderModel)
        assert clip_tok is not None and t5_tok is not None
        return cls(vae, clip_tok, clip, t5_tok, t5, device=device, dtype=dtype,
                   t5_max_length=t5_max_length, latent_mode=latent_mode, seed=seed,
                   t5_attention_mask=t5_attention_mask, scale_latents=scale_latents)

    @classmethod
    def for_run(cls, model: Any, spec: Any, device: str, token_file: str | None
                ) -> FluxEncoders:
        """The encoders of an `encode` run (`model`: its `ModelConfig`, resolved for encode;
        `spec`: its layout's `EncodeSpec`, whose encoder facts say whether T5 sees an attention
        mask and whether latents are stored scaled)."""
        m = model
        return cls.load(
            model_path=m.model_path, vae_path=m.vae_path, clip_path=m.clip_path,
            t5_path=m.t5_path, revision=m.revision, token_file=token_file,
            precision=m.precision, device=device, t5_max_length=m.t5_max_length,
            latent_mode=m.latent_mode, seed=m.seed,
            t5_attention_mask=bool(spec.encoder_fact("t5_attention_mask", False)),
            scale_latents=bool(spec.encoder_fact("latents_scaled", True)))

    def _posterior(self, pixels: np.ndarray | Sequence[np.ndarray]
                   ) -> DiagonalGaussianDistribution:
        """[B, H, W, 3] uint8 -> the VAE's latent distribution (call under inference_mode)."""
        import torch

        x = to_device(torch.as_tensor(pixels), self.device)
        x = x.permute(0, 3, 1, 2).to(torch.float32).div_(127.5).sub_(1.0).to(self.dtype)
        dist: DiagonalGaussianDistribution = self.vae.encode(x).latent_dist
        return dist

    @property
    def latent_facts(self) -> dict[str, object]:
        """The VAE's factors, which a sample records so its latents can be scaled later."""
        return {"scaling_factor": self.scaling_factor, "shift_factor": self.shift_factor}

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """[B, H, W, 3] uint8 (one shape) -> latents [B, C, H/8, W/8] on the device (scaled
        unless `scale_latents` is off); with `posterior` (`--latent-mode resample`), the scaled
        mode latents with the unscaled mean and logvar of the same VAE pass."""
        import torch

        with torch.inference_mode():
            dist = self._posterior(pixels)
            if posterior:
                latents = (dist.mode() - self.shift_factor) * self.scaling_factor
                return EncodedPixels(latents, dist.mean, dist.logvar)
            return EncodedPixels(self._latents(dist, keys))

    def _latents(self, dist: DiagonalGaussianDistribution, keys: Sequence[str]) -> torch.Tensor:
        """The latent mode's latents of `dist` (call under inference_mode)."""
        import torch

        if self.latent_mode in ("mode", "resample"):
            z = dist.mode()
        else:
            noise = torch.stack([
                torch.randn(dist.mean.shape[1:], dtype=torch.float32, device=self.device,
                            generator=torch.Generator(device=self.device).manual_seed(
                                sample_seed(self.seed, k)))
                for k in keys]).to(dist.mean.dtype)
            z = dist.mean + dist.std * noise
        if not self.scale_latents:
            unscaled: torch.Tensor = z
            return unscaled
        return (z - self.shift_factor) * self.scaling_factor

    def _masked_t5(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """T5's last hidden state with the attention mask, over the whole padded length, without
        running the positions that cannot differ.

        With the mask, a padding position attends to the real tokens only, and its output
        depends on itself (the pad embedding) and on the relative-position buckets to those
        tokens. Every distance of `relative_attention_max_distance` or more falls in the last
        bucket, so all positions that far past the last real token compute the same thing: the
        encoder runs up to the first of them and its output is repeated for the rest (the same
        values as running all of them, to float rounding).
        """
        import torch

        total = ids.shape[1]
        reach = int(getattr(self.t5.config, "relative_attention_max_distance", total))
        keep = min(total, int(mask.sum(dim=1).max()) + reach)
        out: torch.Tensor = self.t5(
            to_device(ids[:, :keep], self.device),
            attention_mask=to_device(mask[:, :keep], self.device),
            output_hidden_states=False).last_hidden_state
        if keep == total:
            return out
        return torch.cat([out, out[:, -1:].expand(-1, total - keep, -1)], dim=1)

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Captions -> {`prompt_embeds`: T5's last hidden state [B, L, D_t5],
        `pooled_prompt_embeds`: CLIP's pooler output [B, D_clip]}."""
        import torch

        with torch.inference_mode():
            tokens = self.t5_tokenizer(list(captions), padding="max_length",
                                       max_length=self.t5_max_length, truncation=True,
                                       return_tensors="pt")
            if self.t5_attention_mask:
                t5 = self._masked_t5(tokens.input_ids, tokens.attention_mask)
            else:
                t5 = self.t5(to_device(tokens.input_ids, self.device),
                             output_hidden_states=False).last_hidden_state
            cids = self.clip_tokenizer(list(captions), padding="max_length",
                                       max_length=CLIP_MAX_LENGTH,
                                       truncation=True, return_tensors="pt").input_ids
            pooled = self.clip(to_device(cids, self.device),
                               output_hidden_states=False).pooler_output
        return {PROMPT_EMBEDS: t5, POOLED_PROMPT_EMBEDS: pooled}
