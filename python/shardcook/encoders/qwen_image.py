"""The Qwen-Image family (the model registry's `QWEN_IMAGE` entry), batched, computing what
diffusers' QwenImagePipeline does, which NeMo AutoModel's Qwen-Image preprocessing calls:

- latents of `AutoencoderKLQwenImage`, a video VAE that encodes an image as a clip of one
  frame, normalised per channel by the VAE config's `(z - latents_mean) / latents_std`;
- the last hidden state of Qwen2.5-VL's language model for each caption inside Qwen-Image's
  prompt template, without the template's system turn (its first 34 tokens), and the mask of
  each caption's tokens (`encode_prompt`'s `prompt_embeds` and `prompt_embeds_mask`).

`--model-path` names a diffusers-format Qwen-Image folder or hub repo holding vae/,
text_encoder/ and tokenizer/.
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
    vae_config,
)
from shardcook.encoders.models import LATENTS_MEAN_STD, QWEN_IMAGE, CacheSample, EncodedPixels
from shardcook.encoders.transfer import to_device
from shardcook.encoders.wan import normalisation

if TYPE_CHECKING:
    import numpy as np
    import torch
    from diffusers.models.autoencoders.autoencoder_kl_qwenimage import AutoencoderKLQwenImage
    from transformers import PreTrainedTokenizerBase, Qwen2_5_VLForConditionalGeneration

DEFAULT_MODEL = QWEN_IMAGE.default_model
#: QwenImagePipeline's `prompt_template_encode`: a caption is encoded as the user's turn.
PROMPT_TEMPLATE = (
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, "
    "quantity, text, spatial relationships of the objects and background:<|im_end|>\n"
    "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n")
#: Its `prompt_template_encode_start_idx`: the system turn's tokens, dropped from the output.
TEMPLATE_TOKENS = 34
#: Its `tokenizer_max_length`: the most tokens kept after the system turn.
TEXT_LENGTH = 1024
#: The names of `encode_text`'s tensors (the registry entry's `text.outputs`).
PROMPT_EMBEDS, PROMPT_EMBEDS_MASK = QWEN_IMAGE.text.outputs
#: encoder -> (model subfolder, tokenizer subfolder) inside a diffusers-format Qwen-Image folder
QWEN_IMAGE_LAYOUT = {"vae": ("vae", None), "qwen2.5-vl": ("text_encoder", "tokenizer")}


def resolve_sources(model_path: str | None, revision: str | None = None
                    ) -> dict[str, EncoderSource]:
    """The source of the VAE and of Qwen2.5-VL (with its tokenizer) inside `--model-path`."""
    return folder_sources(model_path or DEFAULT_MODEL, revision, QWEN_IMAGE_LAYOUT, "Qwen-Image")


def load_vae(src: EncoderSource, token: str | None, dtype: torch.dtype, device: str
             ) -> AutoencoderKLQwenImage:
    """The Qwen-Image VAE in eval mode on `device`."""
    # the full path: type checkers read diffusers' top-level name as a torch-less placeholder
    from diffusers.models.autoencoders.autoencoder_kl_qwenimage import AutoencoderKLQwenImage

    vae: AutoencoderKLQwenImage = diffusers_vae(AutoencoderKLQwenImage, src, token, dtype, device)
    return vae


def load_text_encoder(src: EncoderSource, token: str | None, dtype: torch.dtype, device: str
                      ) -> tuple[Qwen2_5_VLForConditionalGeneration, PreTrainedTokenizerBase]:
    """Qwen2.5-VL in eval mode on `device`, and its tokenizer."""
    from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

    return text_model(Qwen2_5_VLForConditionalGeneration, AutoTokenizer, src, token, dtype,
                      device)


class QwenImageEncoders(VaeAndText):
    """Qwen-Image's VAE and Qwen2.5-VL on one device (the registry's `Encoders` protocol).

    Args:
        latent_mode: `sample` draws z ~ N(mean, std) with a generator seeded per (seed, key)
            (AutoModel's processor samples); otherwise the posterior mean.
    """

    TEXT = "qwen2.5-vl"
    sources = staticmethod(resolve_sources)
    read_vae = staticmethod(load_vae)
    read_text = staticmethod(load_text_encoder)

    def __init__(self, vae: AutoencoderKLQwenImage, tokenizer: PreTrainedTokenizerBase,
                 text_encoder: Qwen2_5_VLForConditionalGeneration, *, device: str,
                 dtype: torch.dtype, latent_mode: str = "sample", seed: int = 0) -> None:
        self.vae, self.tokenizer, self.text_encoder = vae, tokenizer, text_encoder
        self.device, self.dtype, self.latent_mode, self.seed = device, dtype, latent_mode, seed
        self.norm = normalisation(dict(vae.config), "Qwen-Image")

    @property
    def latent_facts(self) -> dict[str, object]:
        """Nothing: the manifest records the normalisation (`qwen_image_manifest`)."""
        return {}

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """[B, H, W, 3] uint8 RGB images of one shape -> normalised latents [B, 16, H/8, W/8] on
        the device, in the model's dtype; with `posterior`, also the VAE's mean and logvar, not
        normalised."""
        import torch

        from shardcook.encoders.flux import sample_seed

        with torch.inference_mode():
            x = self._unit_values[to_device(torch.as_tensor(pixels), self.device).int()]
            # [B, 3, 1, H, W]: the VAE encodes an image as a clip of one frame
            dist = self.vae.encode(x.permute(0, 3, 1, 2).unsqueeze(2)).latent_dist
            z = dist.mean
            if self.latent_mode == "sample":
                # diffusers draws the noise in the VAE's dtype (`randn_tensor`), as here
                noise = torch.stack([
                    torch.randn(z.shape[1:], dtype=z.dtype, device=self.device,
                                generator=torch.Generator(device=self.device).manual_seed(
                                    sample_seed(self.seed, k)))
                    for k in keys])
                z = z + dist.std * noise
            # the processor's arithmetic: float32 statistics, then the latents' dtype
            view = (1, -1, 1, 1, 1)
            mean = torch.tensor(self.norm.latents_mean).view(view).to(self.device, z.dtype)
            std = torch.tensor(self.norm.latents_std).view(view).to(self.device, z.dtype)
            latents: torch.Tensor = ((z - mean) / std).squeeze(2)
            if posterior:
                return EncodedPixels(latents, dist.mean.squeeze(2), dist.logvar.squeeze(2))
            return EncodedPixels(latents)

    @cached_property
    def _unit_values(self) -> torch.Tensor:
        return unit_values(self.dtype).to(self.device)

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Captions -> {`prompt_embeds`: Qwen2.5-VL's last hidden state after the template's
        system turn [B, L, D] in the model's dtype, `prompt_embeds_mask`: 1 for each caption's
        tokens [B, L] (int64)}, on the device. L is the batch's longest caption; the rows past
        a caption's mask are zero padding, which a layout storing each caption at its own
        length (AutoModel's processor's `prompt_embeds` [1, L_i, D]) leaves out.

        Each caption is encoded alone, as the processor encodes it: padded in a batch, the
        attention's sums run over more positions and change the last bits of bf16 values, and
        a caption's embeddings would depend on which captions shared its batch."""
        import torch

        with torch.inference_mode():
            kept = [self._caption(c) for c in captions]
            length = max(k.shape[0] for k in kept)
            embeds = kept[0].new_zeros((len(kept), length, kept[0].shape[-1]))
            mask = torch.zeros((len(kept), length), dtype=torch.long, device=embeds.device)
            for i, k in enumerate(kept):
                embeds[i, :k.shape[0]] = k
                mask[i, :k.shape[0]] = 1
            return {PROMPT_EMBEDS: embeds, PROMPT_EMBEDS_MASK: mask}

    def _caption(self, caption: str) -> torch.Tensor:
        """One caption's hidden states past the system turn [L, D] (under inference_mode)."""
        tokens = self.tokenizer([PROMPT_TEMPLATE.format(caption)],
                                max_length=TEXT_LENGTH + TEMPLATE_TOKENS, truncation=True,
                                return_tensors="pt")
        # the language model's hidden states, without the LM head's logits it would add
        hidden: torch.Tensor = self.text_encoder.model(
            input_ids=to_device(tokens.input_ids, self.device),
            attention_mask=to_device(tokens.attention_mask, self.device),
            output_hidden_states=True, use_cache=False).hidden_states[-1]
        return hidden[0, TEMPLATE_TOKENS:TEMPLATE_TOKENS + TEXT_LENGTH].to(self.dtype)


def unit_values(dtype: torch.dtype) -> torch.Tensor:
    """Each uint8 value v as AutoModel's processors scale it, v / 255 then (x - 0.5) / 0.5 in
    float32 on the host, then `dtype`: a table of 256 on the CPU, so a device's own division
    (a multiplication by the reciprocal on CUDA) stays out."""
    import torch

    return ((torch.arange(256, dtype=torch.float32) / 255.0 - 0.5) / 0.5).to(dtype)


def qwen_image_cache(sample: CacheSample) -> dict[str, object]:
    """One file of NeMo AutoModel's diffusion cache, as its Qwen-Image processor's
    `get_cache_data` builds it: the latent [16, H/8, W/8] in float16, `prompt_embeds` [1, L, D]
    in bfloat16 at the caption's own length L, then the input's facts. `prompt_embeds_mask`
    [1, L] (int64, all ones at that length) follows `prompt_embeds`: the key later AutoModel
    processors store the mask under; this processor stores none, and its dataset ignores it."""
    import torch

    mask = sample.text[PROMPT_EMBEDS_MASK]
    length = int(mask.sum())
    # cloned: a slice saved would carry the whole padded row's storage into the file
    return {"latent": sample.latent.to(torch.float16),
            "prompt_embeds": sample.text[PROMPT_EMBEDS][:length].to(torch.bfloat16)
            .unsqueeze(0).clone(),
            "prompt_embeds_mask": mask[:length].unsqueeze(0).clone(),
            **sample.metadata()}


def qwen_image_normalisation(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a dataset records of the VAE's normalisation (the model registry's entry)."""
    return {"kind": LATENTS_MEAN_STD, **normalisation(config, "Qwen-Image").describe()}


def qwen_image_manifest(model: Any, token_file: str | None) -> dict[str, Any]:
    """The manifest's encoder facts for a Qwen-Image run (`model`: the run's `ModelConfig`);
    reads only the VAE config. No token is recorded."""
    from shardcook.hftoken import resolve_token

    sources = resolve_sources(model.model_path, model.revision)
    token, _ = resolve_token(token_file)
    config = vae_config(sources["vae"], token)
    del token
    return {
        "model": QWEN_IMAGE.name,
        "encoders": {name: src.describe() for name, src in sources.items()},
        "vae_class": str(config.get("_class_name", "AutoencoderKLQwenImage")),
        "normalisation": qwen_image_normalisation(config),
        "latent_channels": int(config.get("z_dim", 16)),
        "text_max_length": TEXT_LENGTH,
        "prompt_template_tokens_dropped": TEMPLATE_TOKENS,
        **run_facts(model),
    }


class QwenImageDecoder:
    """A stored `qwen_image` latent decoded by the Qwen-Image VAE of `model_path` (for
    `preview`): un-normalised with the manifest's recorded normalisation (else the VAE
    config's), then decoded as a clip of one frame."""

    def __init__(self, model_path: str, manifest: Mapping[str, Any],
                 token_file: str | None = None) -> None:
        import torch

        from shardcook.hftoken import resolve_token

        token, _ = resolve_token(token_file)
        self.vae = load_vae(resolve_sources(model_path)["vae"], token, torch.float32, "cpu")
        del token
        recorded = manifest.get("normalisation")
        norm = normalisation(recorded if isinstance(recorded, dict) and recorded.get(
            "kind") == LATENTS_MEAN_STD else dict(self.vae.config), "Qwen-Image")
        self.mean = torch.tensor(norm.latents_mean).view(-1, 1, 1, 1)
        self.std = torch.tensor(norm.latents_std).view(-1, 1, 1, 1)

    def __call__(self, latent: torch.Tensor) -> np.ndarray:
        """A latent [C, h, w] -> the RGB image [8h, 8w, 3] uint8."""
        import torch

        with torch.inference_mode():
            z = latent.float()[:, None] * self.std + self.mean
            x: torch.Tensor = self.vae.decode(z[None]).sample[0, :, 0]
        return ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).numpy()
