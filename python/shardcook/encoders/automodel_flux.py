"""FLUX.1 as NeMo AutoModel's `flux` processor (`tools/diffusion/processors/flux.py`) encodes it
for its diffusion cache (`encode --layout automodel --model-type flux`): every encoder in bf16,
the latent drawn from the VAE's posterior and stored scaled in fp16 [C, H/8, W/8]; CLIP's
penultimate hidden state and pooled output, T5's last hidden state over the T5 tokenizer's own
`model_max_length` without an attention mask, both token id rows, text tensors in bf16."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from shardcook.encoders.flux import FluxEncoders, drawn_latent
from shardcook.encoders.models import CacheSample, EncodedPixels
from shardcook.encoders.transfer import to_device
from shardcook.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import torch

#: Text tensor names beyond the FLUX family's two, as AutoModel's cache names them.
CLIP_HIDDEN, CLIP_TOKENS, T5_TOKENS = "clip_hidden", "clip_tokens", "t5_tokens"
#: A tokenizer's `model_max_length` above this is transformers' "no limit" placeholder.
NO_LIMIT = 1 << 20


class AutoModelFluxEncoders(FluxEncoders):
    """The FLUX encoders computing what AutoModel's `flux` processor stores.

    `latent_mode` `sample` (AutoModel's only way: `latent_dist.sample()` from the global
    generator, unseeded) draws each sample's noise as diffusers does, from a generator seeded
    by (seed, sample key); `mode` stores the posterior mean instead.
    """

    @classmethod
    def for_run(cls, model: Any, spec: Any, device: str, token_file: str | None
                ) -> AutoModelFluxEncoders:
        """bf16 encoders whatever `--precision` says, as AutoModel's processor loads them."""
        m = model
        enc = cls.load(model_path=m.model_path, vae_path=m.vae_path, clip_path=m.clip_path,
                       t5_path=m.t5_path, revision=m.revision, token_file=token_file,
                       precision="bf16", device=device, latent_mode=m.latent_mode, seed=m.seed)
        assert isinstance(enc, AutoModelFluxEncoders)
        limit = int(enc.t5_tokenizer.model_max_length)
        if limit > NO_LIMIT:
            raise ConfigError("The T5 tokenizer of --model-path declares no model_max_length "
                              "(AutoModel pads T5 prompts to it); set it in its "
                              "tokenizer_config.json.")
        enc.t5_max_length = limit
        # AutoModel runs T5 with autograd on (its parameters require grad, no no_grad), which
        # takes another attention kernel, rounding bf16 differently: so does this
        enc.t5.requires_grad_(True)
        return enc

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """[B, H, W, 3] uint8 -> scaled latents [B, C, H/8, W/8] in fp16 on the device: the
        pixels as AutoModel's `preprocess_image` scales them (float32 x / 255, then
        (x - 0.5) / 0.5), then bf16."""
        import torch

        with torch.inference_mode():
            x = to_device(torch.as_tensor(pixels), self.device).permute(0, 3, 1, 2)
            # contiguous, as AutoModel's single image's is in effect: CPU convolutions round
            # channels-last bf16 inputs differently
            x = ((x.to(torch.float32) / 255.0 - 0.5) / 0.5).to(self.dtype).contiguous()
            dist = self.vae.encode(x).latent_dist
            z = drawn_latent(dist, self.latent_mode, self.seed, keys, self.device)
            return EncodedPixels(((z - self.shift_factor) * self.scaling_factor)
                                 .to(torch.float16))

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Captions -> `prompt_embeds` [B, L, D_t5], `pooled_prompt_embeds` [B, D_clip],
        `clip_hidden` [B, 77, D_clip], `clip_tokens` [B, 77] and `t5_tokens` [B, L]."""
        import torch

        with torch.inference_mode():
            clip_ids = self.clip_tokenizer(
                list(captions), padding="max_length",
                max_length=self.clip_tokenizer.model_max_length, truncation=True,
                return_tensors="pt").input_ids
            clip = self.clip(to_device(clip_ids, self.device), output_hidden_states=True)
        # made outside inference mode: autograd takes no inference tensor
        t5_ids = self.t5_tokenizer(list(captions), padding="max_length",
                                   max_length=self.t5_max_length, truncation=True,
                                   return_tensors="pt").input_ids
        with torch.enable_grad():
            t5 = self.t5(to_device(t5_ids, self.device),
                         output_hidden_states=False).last_hidden_state.detach()
        return {"prompt_embeds": t5.to(torch.bfloat16),
                "pooled_prompt_embeds": clip.pooler_output.to(torch.bfloat16),
                CLIP_HIDDEN: clip.hidden_states[-2].to(torch.bfloat16),
                CLIP_TOKENS: clip_ids, T5_TOKENS: t5_ids}


def flux_cache(sample: CacheSample) -> dict[str, object]:
    """One cache file's dict, key for key and in the order of AutoModel's `FluxProcessor.
    get_cache_data`; the text tensors keep AutoModel's batch dimension of 1."""
    text = {name: t.unsqueeze(0) for name, t in sample.text.items()}
    return {
        "latent": sample.latent,
        "clip_tokens": text[CLIP_TOKENS],
        "clip_hidden": text[CLIP_HIDDEN],
        "pooled_prompt_embeds": text["pooled_prompt_embeds"],
        "t5_tokens": text[T5_TOKENS],
        "prompt_embeds": text["prompt_embeds"],
        **sample.metadata(),
    }
