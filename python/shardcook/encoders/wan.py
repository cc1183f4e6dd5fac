"""The Wan family (the model registry's `WAN` entry), batched: `AutoencoderKLWan` latents of
RGB clips, normalised by the VAE config's own `latents_mean` / `latents_std`, and UMT5 prompt
embeddings padded to 226 tokens with the rows past each caption's length zeroed, as
Megatron-Bridge's Wan prep script stores them (its `_encode_video_latents` and `_encode_text`).

`--model-path` names a diffusers-format Wan folder or hub repo holding vae/, text_encoder/ and
tokenizer/.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from shardcook.encoders.loading import (
    EncoderSource,
    VaeAndText,
    diffusers_vae,
    folder_sources,
    run_facts,
    text_model,
    vae_config,
)
from shardcook.encoders.models import LATENTS_MEAN_STD, WAN, EncodedPixels
from shardcook.encoders.transfer import to_device
from shardcook.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from diffusers.models.autoencoders.autoencoder_kl_wan import AutoencoderKLWan
    from transformers import PreTrainedTokenizerBase, UMT5EncoderModel

DEFAULT_MODEL = WAN.default_model
#: Bridge's `max_sequence_length` (WanPipeline's too).
TEXT_LENGTH = 226
#: The name of `encode_text`'s one tensor (the registry entry's `text.outputs`).
(PROMPT_EMBEDS,) = WAN.text.outputs
#: encoder -> (model subfolder, tokenizer subfolder) inside a diffusers-format Wan folder
WAN_LAYOUT = {"vae": ("vae", None), "umt5": ("text_encoder", "tokenizer")}


def prompt_clean(text: str) -> str:
    """WanPipeline's (and Bridge's) prompt cleaning: ftfy when installed, HTML entities
    unescaped twice, whitespace collapsed."""
    try:
        import ftfy  # type: ignore[import-not-found]  # optional, as in diffusers' WanPipeline
    except ImportError:
        pass
    else:
        text = ftfy.fix_text(text)
    text = html.unescape(html.unescape(text)).strip()
    return re.sub(r"\s+", " ", text).strip()


@dataclass(frozen=True)
class Normalisation:
    """A VAE's per-channel latent statistics, from its config (Wan's, Qwen-Image's)."""

    latents_mean: tuple[float, ...]
    latents_std: tuple[float, ...]

    def describe(self) -> dict[str, Any]:
        return {"latents_mean": list(self.latents_mean), "latents_std": list(self.latents_std)}


def normalisation(config: Mapping[str, Any], model: str = "Wan") -> Normalisation:
    """The VAE config's `latents_mean` / `latents_std`; ConfigError naming the `model` whose VAE
    lacks them (Qwen-Image's VAE keeps them the same way)."""
    mean, std = config.get("latents_mean"), config.get("latents_std")
    z_dim = config.get("z_dim")
    if not isinstance(mean, list) or not isinstance(std, list) or not mean or (
            len(mean) != len(std) or (z_dim is not None and len(mean) != z_dim)):
        raise ConfigError(f"The {model} VAE's config.json must hold latents_mean and "
                          "latents_std, one value per latent channel; this VAE cannot normalise "
                          "its latents.")
    return Normalisation(tuple(float(v) for v in mean), tuple(float(v) for v in std))


def resolve_sources(model_path: str | None, revision: str | None = None
                    ) -> dict[str, EncoderSource]:
    """The source of the VAE and of UMT5 (with its tokenizer) inside `--model-path`."""
    return folder_sources(model_path or DEFAULT_MODEL, revision, WAN_LAYOUT, "Wan")


def load_vae(src: EncoderSource, token: str | None, dtype: torch.dtype, device: str
             ) -> AutoencoderKLWan:
    """The Wan VAE in eval mode on `device`."""
    # the full path: type checkers read diffusers' top-level name as a torch-less placeholder
    from diffusers.models.autoencoders.autoencoder_kl_wan import AutoencoderKLWan

    vae: AutoencoderKLWan = diffusers_vae(AutoencoderKLWan, src, token, dtype, device)
    return vae


def load_umt5(src: EncoderSource, token: str | None, dtype: torch.dtype, device: str
              ) -> tuple[UMT5EncoderModel, PreTrainedTokenizerBase]:
    """UMT5 in eval mode on `device`, and its tokenizer."""
    from transformers import AutoTokenizer, UMT5EncoderModel

    return text_model(UMT5EncoderModel, AutoTokenizer, src, token, dtype, device)


class WanEncoders(VaeAndText):
    """Wan's VAE and UMT5 on one device (the registry's `Encoders` protocol).

    Args:
        latent_mode: `mode` stores the posterior mean (Bridge's deterministic latents);
            `sample` draws z ~ N(mean, std) with a generator seeded per (seed, key).
    """

    TEXT = "umt5"
    sources = staticmethod(resolve_sources)
    read_vae = staticmethod(load_vae)
    read_text = staticmethod(load_umt5)

    def __init__(self, vae: AutoencoderKLWan, tokenizer: PreTrainedTokenizerBase,
                 umt5: UMT5EncoderModel, *, device: str, dtype: torch.dtype,
                 latent_mode: str = "mode", seed: int = 0) -> None:
        self.vae, self.tokenizer, self.umt5 = vae, tokenizer, umt5
        self.device, self.dtype, self.latent_mode, self.seed = device, dtype, latent_mode, seed
        self.norm = normalisation(dict(vae.config))

    @property
    def latent_facts(self) -> dict[str, object]:
        """Nothing: the manifest records the normalisation (`wan_manifest`)."""
        return {}

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """B [T, H, W, 3] uint8 RGB clips of one shape -> normalised latents
        [B, 16, 1 + (T-1)//4, H/8, W/8] on the device; with `posterior`, also the VAE's mean
        and logvar, not normalised."""
        import torch

        from shardcook.encoders.flux import sample_seed

        with torch.inference_mode():
            # Bridge's arithmetic: [0, 1] (`scaled_clips`), then [-1, 1] in the model's dtype
            x = scaled_clips(pixels, self._unit_values, self.device) * 2.0 - 1.0
            dist = self.vae.encode(x.permute(0, 4, 1, 2, 3).contiguous()).latent_dist
            z = dist.mean
            if self.latent_mode == "sample":
                noise = torch.stack([
                    torch.randn(z.shape[1:], dtype=torch.float32, device=self.device,
                                generator=torch.Generator(device=self.device).manual_seed(
                                    sample_seed(self.seed, k)))
                    for k in keys]).to(z.dtype)
                z = z + dist.std * noise
            view = (1, -1, 1, 1, 1)
            mean = torch.tensor(self.norm.latents_mean, device=self.device, dtype=z.dtype)
            std = torch.tensor(self.norm.latents_std, device=self.device, dtype=z.dtype)
            latents: torch.Tensor = (z - mean.view(view)) / std.view(view)
            if posterior:
                return EncodedPixels(latents, dist.mean, dist.logvar)
            return EncodedPixels(latents)

    @cached_property
    def _unit_values(self) -> torch.Tensor:
        return unit_values(self.dtype).to(self.device)

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Captions -> {`prompt_embeds`: UMT5 embeddings [B, 226, D]} on the device, each
        cleaned by `prompt_clean`, encoded with the attention mask, rows past its length
        zero."""
        import torch

        with torch.inference_mode():
            tokens = self.tokenizer([prompt_clean(c) for c in captions], max_length=TEXT_LENGTH,
                                    padding="max_length", truncation=True, return_tensors="pt",
                                    return_attention_mask=True)
            mask = to_device(tokens.attention_mask, self.device)
            out: torch.Tensor = self.umt5(input_ids=to_device(tokens.input_ids, self.device),
                                          attention_mask=mask).last_hidden_state
            zeroed: torch.Tensor = out.masked_fill(~mask.gt(0).unsqueeze(-1), 0.0)
            return {PROMPT_EMBEDS: zeroed}


def unit_values(dtype: torch.dtype) -> torch.Tensor:
    """Each uint8 value v as Bridge's Wan script scales it: v / 255 in float32 on the host (numpy's
    division), then `dtype`; a table of 256 on the CPU."""
    import torch

    return (torch.arange(256, dtype=torch.float32) / 255.0).to(dtype)


def scaled_clips(clips: Sequence[np.ndarray] | np.ndarray, table: torch.Tensor, device: str
                 ) -> torch.Tensor:
    """B [T, H, W, 3] uint8 clips of one shape as one [B, T, H, W, 3] tensor on `device`, each
    value looked up in `table` (`unit_values`, on `device`). The clips travel as uint8, a quarter
    of the float bytes, and the table keeps the device's own division out: CUDA divides by a
    constant as a multiplication by its reciprocal, which differs from the host's in the last bit
    of float32. One frame at a time, so the lookup's indices stay small."""
    import torch

    x = torch.empty((len(clips), *clips[0].shape), dtype=table.dtype, device=device)
    for i, clip in enumerate(clips):
        frames = to_device(torch.from_numpy(clip), device)
        for t in range(frames.shape[0]):
            x[i, t] = table[frames[t].int()]
    return x


def wan_normalisation(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a dataset records of the VAE's normalisation (the model registry's entry)."""
    return {"kind": LATENTS_MEAN_STD, **normalisation(config).describe()}


def wan_manifest(model: Any, token_file: str | None) -> dict[str, Any]:
    """The manifest's encoder facts for a Wan run (`model`: the run's `ModelConfig`); reads only
    the VAE config. No token is recorded."""
    from shardcook.hftoken import resolve_token

    sources = resolve_sources(model.model_path, model.revision)
    token, _ = resolve_token(token_file)
    config = vae_config(sources["vae"], token)
    del token
    return {
        "model": "wan",
        "encoders": {name: src.describe() for name, src in sources.items()},
        "vae_class": str(config.get("_class_name", "AutoencoderKLWan")),
        "normalisation": wan_normalisation(config),
        "latent_channels": int(config.get("z_dim", 16)),
        "text_max_length": TEXT_LENGTH,
        **run_facts(model),
    }


class WanDecoder:
    """The first frame of a stored `wan` latent, decoded by the Wan VAE of `model_path` (for
    `preview`): the latent is un-normalised with the manifest's recorded normalisation (else
    the VAE config's), and its first latent frame, which Wan's causal VAE encodes from the
    clip's first frame alone, is decoded."""

    def __init__(self, model_path: str, manifest: Mapping[str, Any],
                 token_file: str | None = None) -> None:
        import torch

        from shardcook.hftoken import resolve_token

        token, _ = resolve_token(token_file)
        self.vae = load_vae(resolve_sources(model_path)["vae"], token, torch.float32, "cpu")
        del token
        recorded = manifest.get("normalisation")
        norm = normalisation(recorded if isinstance(recorded, dict) and recorded.get(
            "kind") == LATENTS_MEAN_STD else dict(self.vae.config))
        self.mean = torch.tensor(norm.latents_mean).view(-1, 1, 1, 1)
        self.std = torch.tensor(norm.latents_std).view(-1, 1, 1, 1)

    def __call__(self, latent: torch.Tensor) -> np.ndarray:
        """A latent frame [C, h, w] -> the RGB frame [8h, 8w, 3] uint8."""
        import torch

        with torch.inference_mode():
            z = latent.float()[:, None] * self.std + self.mean
            x: torch.Tensor = self.vae.decode(z[None]).sample[0, :, 0]
        return ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).numpy()
