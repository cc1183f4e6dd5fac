"""The FLUX.2 family (the model registry's `FLUX2` entry), batched, as NeMo AutoModel's FLUX.2
processor computes it: `AutoencoderKLFlux2` latents patchified 2x2 (32 channels to 128) and
normalised by the VAE's batch-norm running statistics, and the Mistral-3 text encoder's hidden
states of layers 10, 20 and 30 side by side, over the system prompt and the caption padded to
512 tokens.

`--model-path` names a diffusers-format FLUX.2 folder or hub repo holding vae/, text_encoder/
and tokenizer/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from shardcook.encoders.loading import (
    EncoderSource,
    VaeAndText,
    diffusers_vae,
    folder_sources,
    run_facts,
    text_model,
)
from shardcook.encoders.models import FLUX2, PATCH_BATCH_NORM, CacheSample, EncodedPixels
from shardcook.encoders.transfer import to_device
from shardcook.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from diffusers.models.autoencoders.autoencoder_kl_flux2 import AutoencoderKLFlux2
    from transformers import Mistral3ForConditionalGeneration, PreTrainedTokenizerBase

#: The processor's `max_sequence_length`: every caption, system prompt included, padded or cut
#: to this many tokens.
TEXT_LENGTH = 512
#: The hidden states the processor reads (`text_encoder_out_layers`), index 0 the embeddings.
TEXT_LAYERS = (10, 20, 30)
#: The spatial patch folded into channels (the VAE config's `patch_size`, FLUX.2's 2x2).
PATCH = 2
#: The name of `encode_text`'s one tensor (the registry entry's `text.outputs`).
(PROMPT_EMBEDS,) = FLUX2.text.outputs
#: encoder -> (model subfolder, tokenizer subfolder) inside a diffusers-format FLUX.2 folder
FLUX2_LAYOUT = {"vae": ("vae", None), "mistral": ("text_encoder", "tokenizer")}


def system_message() -> str:
    """The system prompt every caption is encoded after: diffusers' `Flux2Pipeline`'s, which
    the processor's `encode_prompt` uses."""
    from diffusers.pipelines.flux2.system_messages import SYSTEM_MESSAGE

    return str(SYSTEM_MESSAGE)


def conversation(caption: str, system: str) -> list[dict[str, Any]]:
    """One caption as the pipeline's chat: the system prompt, then the caption as the user's
    turn, with any `[IMG]` removed (an image token without an image breaks the tokenizer)."""
    return [{"role": "system", "content": [{"type": "text", "text": system}]},
            {"role": "user", "content": [{"type": "text", "text": caption.replace("[IMG]", "")}]}]


def resolve_sources(model_path: str | None, revision: str | None = None
                    ) -> dict[str, EncoderSource]:
    """The source of the VAE and of Mistral (with its tokenizer) inside `--model-path`."""
    return folder_sources(model_path or FLUX2.default_model, revision, FLUX2_LAYOUT, "FLUX.2")


def load_vae(src: EncoderSource, token: str | None, dtype: torch.dtype, device: str
             ) -> AutoencoderKLFlux2:
    """The FLUX.2 VAE in eval mode on `device`, its batch norm's statistics in `dtype` as the
    processor has them (its pipeline loads everything in that dtype)."""
    # the full path: type checkers read diffusers' top-level name as a torch-less placeholder
    from diffusers.models.autoencoders.autoencoder_kl_flux2 import AutoencoderKLFlux2

    vae: AutoencoderKLFlux2 = diffusers_vae(AutoencoderKLFlux2, src, token, dtype, device)
    return vae


def load_mistral(src: EncoderSource, token: str | None, dtype: torch.dtype, device: str
                 ) -> tuple[Mistral3ForConditionalGeneration, PreTrainedTokenizerBase]:
    """Mistral-3 in eval mode on `device`, and its tokenizer: what `AutoProcessor` loads from
    tokenizer/, as the pipeline does (FLUX.2's PixtralProcessor, whose padding side, truncation
    and chat template are the folder's)."""
    from transformers import AutoProcessor, Mistral3ForConditionalGeneration

    return text_model(Mistral3ForConditionalGeneration, AutoProcessor, src, token, dtype, device)


def batch_norm_stats(vae: AutoencoderKLFlux2) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean, std), each [1, C, 1, 1] float32 on the VAE's device, of its batch norm: the
    running mean, and the square root of the running variance plus `batch_norm_eps`, taken in
    the VAE's dtype before float32, as the processor (and `Flux2Pipeline`) computes them."""
    import torch

    running_mean, running_var = vae.bn.running_mean, vae.bn.running_var
    assert running_mean is not None and running_var is not None  # the VAE tracks its statistics
    mean = running_mean.view(1, -1, 1, 1).float()
    std = torch.sqrt(running_var.view(1, -1, 1, 1) + vae.config["batch_norm_eps"]).float()
    return mean, std


def patchify(z: torch.Tensor) -> torch.Tensor:
    """[B, C, h, w] -> [B, 4C, h/2, w/2]: each 2x2 patch folded into channels, channel-major
    (c, dy, dx), as `Flux2Pipeline._patchify_latents` folds them."""
    b, c, h, w = z.shape
    z = z.view(b, c, h // PATCH, PATCH, w // PATCH, PATCH).permute(0, 1, 3, 5, 2, 4)
    return z.reshape(b, c * PATCH * PATCH, h // PATCH, w // PATCH)


def unpatchify(z: torch.Tensor) -> torch.Tensor:
    """The inverse of `patchify`: [B, 4C, h, w] -> [B, C, 2h, 2w]."""
    b, c, h, w = z.shape
    z = z.reshape(b, c // (PATCH * PATCH), PATCH, PATCH, h, w).permute(0, 1, 4, 2, 5, 3)
    return z.reshape(b, c // (PATCH * PATCH), h * PATCH, w * PATCH)


def unit_values(dtype: torch.dtype) -> torch.Tensor:
    """Each uint8 value v as the processor's `preprocess_image` scales it, (v / 255 - 0.5) / 0.5
    in float32 on the host, then `dtype`: a table of 256 on the CPU, so the device's own
    division (a multiplication by the reciprocal on CUDA) never enters."""
    import torch

    return ((torch.arange(256, dtype=torch.float32) / 255.0 - 0.5) / 0.5).to(dtype)


class Flux2Encoders(VaeAndText):
    """FLUX.2's VAE and Mistral-3 on one device (the registry's `Encoders` protocol).

    Args:
        latent_mode: `mode` (the processor's) stores the posterior's mode; `sample` draws
            z ~ N(mean, std) with a generator seeded per (seed, key).
    """

    TEXT = "mistral"
    sources = staticmethod(resolve_sources)
    read_vae = staticmethod(load_vae)
    read_text = staticmethod(load_mistral)

    def __init__(self, vae: AutoencoderKLFlux2, tokenizer: PreTrainedTokenizerBase,
                 mistral: Mistral3ForConditionalGeneration, *, device: str, dtype: torch.dtype,
                 latent_mode: str = "mode", seed: int = 0) -> None:
        self.vae, self.tokenizer, self.mistral = vae, tokenizer, mistral
        self.device, self.dtype, self.latent_mode, self.seed = device, dtype, latent_mode, seed
        self.bn_mean, self.bn_std = batch_norm_stats(vae)
        self.system = system_message()

    @property
    def latent_facts(self) -> dict[str, object]:
        """Nothing: the manifest records the normalisation (`flux2_manifest`)."""
        return {}

    @cached_property
    def _unit_values(self) -> torch.Tensor:
        return unit_values(self.dtype).to(self.device)

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """[B, H, W, 3] uint8 RGB of one shape -> latents [B, 4C, H/16, W/16] float32 on the
        device: the VAE's z in its dtype, then in float32 patchified and normalised by the batch
        norm; with `posterior`, the mode's latents with the VAE's mean and logvar, patchified
        (the latents' shape) and not normalised."""
        import torch

        from shardcook.encoders.flux import sample_seed

        with torch.inference_mode():
            x = self._unit_values[to_device(torch.as_tensor(pixels), self.device).int()]
            dist = self.vae.encode(x.permute(0, 3, 1, 2).contiguous()).latent_dist
            z = dist.mode()
            if self.latent_mode == "sample" and not posterior:
                noise = torch.stack([
                    torch.randn(z.shape[1:], dtype=torch.float32, device=self.device,
                                generator=torch.Generator(device=self.device).manual_seed(
                                    sample_seed(self.seed, k)))
                    for k in keys]).to(z.dtype)
                z = dist.mean + dist.std * noise
            latents = (patchify(z.float()) - self.bn_mean) / self.bn_std
            if posterior:
                return EncodedPixels(latents, patchify(dist.mean), patchify(dist.logvar))
            return EncodedPixels(latents)

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Captions -> {`prompt_embeds`: [B, 512, 3D] in the model's dtype on the device}: each
        caption after the system prompt in the tokenizer's chat template, padded (on the
        tokenizer's side) or cut to 512 tokens, Mistral run with the attention mask, and the
        hidden states of layers 10, 20 and 30 of each token side by side."""
        import torch

        with torch.inference_mode():
            tokens: Any = self.tokenizer.apply_chat_template(
                [conversation(c, self.system) for c in captions], add_generation_prompt=False,
                tokenize=True, return_dict=True, return_tensors="pt", padding="max_length",
                truncation=True, max_length=TEXT_LENGTH)
            out = self.mistral(input_ids=to_device(tokens["input_ids"], self.device),
                               attention_mask=to_device(tokens["attention_mask"], self.device),
                               output_hidden_states=True, use_cache=False)
            layers = torch.stack([out.hidden_states[k] for k in TEXT_LAYERS], dim=2)
            b, length, n, d = layers.shape
            embeds: torch.Tensor = layers.to(self.mistral.dtype).reshape(b, length, n * d)
            return {PROMPT_EMBEDS: embeds}


def flux2_cache(sample: CacheSample) -> dict[str, object]:
    """One file of NeMo AutoModel's diffusion cache, key for key as its FLUX.2 processor's
    `get_cache_data` builds it: the latent [4C, H/16, W/16] and `prompt_embeds` [512, 3D], both
    in float16 and without a batch dimension, then the input's facts."""
    import torch

    return {"latent": sample.latent.to(torch.float16),
            "prompt_embeds": sample.text[PROMPT_EMBEDS].to(torch.float16),
            **sample.metadata()}


def flux2_normalisation(stats: Mapping[str, Any]) -> dict[str, Any]:
    """What a dataset records of the VAE's normalisation (the model registry's entry), from the
    VAE config with its batch norm's statistics as `vae_statistics` gives them (FLUX.2 keeps them
    in its weights, not in config.json)."""
    mean, std = stats.get("bn_mean"), stats.get("bn_std")
    if not isinstance(mean, list) or not isinstance(std, list) or not mean or len(mean) != len(
            std):
        raise ConfigError("The FLUX.2 VAE has no batch norm statistics, one per patchified "
                          "latent channel; this VAE cannot normalise its latents.")
    return {"kind": PATCH_BATCH_NORM, "patch_size": [PATCH, PATCH],
            "batch_norm_eps": float(stats.get("batch_norm_eps", 1e-4)),
            "bn_mean": [float(v) for v in mean], "bn_std": [float(v) for v in std]}


def vae_statistics(vae: AutoencoderKLFlux2) -> dict[str, Any]:
    """The VAE's config with its batch norm's (mean, std) as the encoders apply them
    (`batch_norm_stats`), as lists."""
    mean, std = batch_norm_stats(vae)
    return {**dict(vae.config), "bn_mean": mean.flatten().tolist(),
            "bn_std": std.flatten().tolist()}


def flux2_manifest(model: Any, token_file: str | None) -> dict[str, Any]:
    """The manifest's encoder facts for a FLUX.2 run (`model`: the run's `ModelConfig`): the VAE
    is loaded on the CPU in the run's precision, for the statistics its weights hold. No token
    is recorded."""
    from shardcook.encoders.loading import torch_dtype
    from shardcook.hftoken import resolve_token

    sources = resolve_sources(model.model_path, model.revision)
    token, _ = resolve_token(token_file)
    vae = load_vae(sources["vae"], token, torch_dtype(model.precision), "cpu")
    del token
    stats = vae_statistics(vae)
    return {
        "model": FLUX2.name,
        "encoders": {name: src.describe() for name, src in sources.items()},
        "vae_class": str(stats.get("_class_name", "AutoencoderKLFlux2")),
        "normalisation": flux2_normalisation(stats),
        "latent_channels": len(stats["bn_mean"]),
        "text_max_length": TEXT_LENGTH,
        "text_layers": list(TEXT_LAYERS),
        **run_facts(model),
    }
