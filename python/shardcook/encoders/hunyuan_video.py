"""HunyuanVideo-1.5 (the model registry's `HUNYUAN_VIDEO_15` entry) as NeMo AutoModel's
`hunyuanvideo-1.5` processor (`tools/diffusion/processors/hunyuan.py`) encodes it for its
diffusion cache, computing what the diffusers `HunyuanVideo15ImageToVideoPipeline` calls it
makes do:

- latents of `AutoencoderKLHunyuanVideo15` (the posterior mean, or a draw), tiled as diffusers
  tiles it by default (256-pixel tiles; the processor asks for 64-pixel ones, which diffusers
  pairs with its 16-latent tile, so past 64 pixels its latents overlap and come out larger
  than H/16 x W/16: that one fault is not copied) and sliced, `(z - shift_factor) *
  scaling_factor` from the VAE's config (`z * scaling_factor` without a shift), in float16
  [C, T', H/16, W/16];
- Qwen2.5-VL's hidden state before its last two layers for each caption as the user's turn of
  the pipeline's chat, past the template's first 108 tokens, padded to 1000 tokens, with its
  mask (`text_embeddings`, `text_mask`);
- ByT5's last hidden state of the texts the caption quotes (`Text "...". `), padded to 256
  tokens, with its mask; zeros and a zero mask for a caption quoting none (`text_embeddings_2`,
  `text_mask_2`);
- SigLIP's last hidden state of a clip's first frame (`image_embeds`, the image-to-video
  conditioning; AutoModel's video mode stores it, its frames mode none).

Everything is in float16 on a GPU (the VAE under CUDA autocast) and float32 on the CPU, whatever
`--precision` says, as the processor's `load_models` picks; masks too. `--model-path` names a
diffusers-format HunyuanVideo-1.5 folder or hub repo (vae/, text_encoder/, tokenizer/,
text_encoder_2/, tokenizer_2/, image_encoder/, feature_extractor/).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from functools import cached_property
from typing import TYPE_CHECKING, Any

from shardcook.encoders.loading import (
    EncoderSource,
    diffusers_vae,
    folder_sources,
    run_facts,
    text_model,
    vae_config,
)
from shardcook.encoders.models import HUNYUAN_VIDEO_15, SCALING_SHIFT, CacheSample, EncodedPixels
from shardcook.encoders.transfer import to_device
from shardcook.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import torch

DEFAULT_MODEL = HUNYUAN_VIDEO_15.default_model
#: The pipeline's `system_message`: a caption is the user's turn after it.
SYSTEM_MESSAGE = (
    "You are a helpful assistant. Describe the video by detailing the following aspects: "
    "        1. The main content and theme of the video. "
    "        2. The color, shape, size, texture, quantity, text, and spatial relationships of "
    "the objects. "
    "        3. Actions, events, behaviors temporal relationships, physical movement changes of "
    "the objects. "
    "        4. background environment, light, style and atmosphere. "
    "        5. camera angles, movements, and transitions used in the video.")
#: Its `prompt_template_encode_start_idx`: the template's tokens before the caption, dropped.
TEMPLATE_TOKENS = 108
#: Its `tokenizer_max_length` and `tokenizer_2_max_length`: Qwen2.5-VL's and ByT5's lengths.
TEXT_LENGTH, GLYPH_LENGTH = 1000, 256
#: The hidden states Qwen2.5-VL's output skips (the pipeline's `num_hidden_layers_to_skip`).
SKIPPED_LAYERS = 2
#: The names of `encode_text`'s tensors (the registry entry's `text.outputs`).
TEXT_EMBEDDINGS, TEXT_MASK, GLYPH_EMBEDDINGS, GLYPH_MASK = HUNYUAN_VIDEO_15.text.outputs
#: encoder -> (model subfolder, tokenizer or image processor subfolder) inside the folder
HUNYUAN_VIDEO_LAYOUT = {"vae": ("vae", None), "qwen2.5-vl": ("text_encoder", "tokenizer"),
                        "byt5": ("text_encoder_2", "tokenizer_2"),
                        "siglip": ("image_encoder", "feature_extractor")}


def resolve_sources(model_path: str | None, revision: str | None = None
                    ) -> dict[str, EncoderSource]:
    """The source of each model (and its tokenizer or image processor) in `--model-path`."""
    return folder_sources(model_path or DEFAULT_MODEL, revision, HUNYUAN_VIDEO_LAYOUT,
                          "HunyuanVideo-1.5")


def _classes() -> Any:
    """The diffusers module holding the VAE class and the prompt's glyph rule; a diffusers
    without them is one sentence."""
    try:
        from diffusers.pipelines.hunyuan_video1_5 import pipeline_hunyuan_video1_5
    except ImportError:
        raise ConfigError("HunyuanVideo-1.5 needs a diffusers that has it (0.36 or later); "
                          "upgrade it with pip install -U diffusers.") from None
    return pipeline_hunyuan_video1_5


class HunyuanVideoEncoders:
    """HunyuanVideo-1.5's VAE, Qwen2.5-VL, ByT5 and SigLIP on one device (the registry's
    `Encoders` protocol, and `FirstFrameEncoders`).

    `latent_mode` `mode` is AutoModel's default (the posterior mean); `sample` draws from a
    generator seeded by (seed, sample key) where AutoModel's global generator is unseeded.
    """

    #: AutoModel's frames mode casts each frame's [-1, 1] values to fp16 before the VAE's own
    #: dtype (`_frame_to_video_tensor`); its video mode goes from fp32 straight to it.
    frames_in_half = False

    def __init__(self, parts: Mapping[str, Any], *, device: str, dtype: torch.dtype,
                 latent_mode: str = "mode", seed: int = 0) -> None:
        self.vae, self.tokenizer, self.qwen = parts["vae"], parts["tokenizer"], parts["qwen"]
        self.byt5_tokenizer, self.byt5 = parts["byt5_tokenizer"], parts["byt5"]
        self.image_processor, self.siglip = parts["image_processor"], parts["siglip"]
        self.device, self.dtype, self.latent_mode, self.seed = device, dtype, latent_mode, seed
        self.glyph_texts = _classes().extract_glyph_texts

    @classmethod
    def for_run(cls, model: Any, spec: Any, device: str, token_file: str | None
                ) -> HunyuanVideoEncoders:
        """The dtype AutoModel's `load_models` picks by device (fp16 on a GPU, fp32 on the
        CPU), whatever `--precision` says; the VAE tiled (diffusers' own tiles) and sliced."""
        import torch
        from transformers import (
            ByT5Tokenizer,
            Qwen2_5_VLTextModel,
            Qwen2Tokenizer,
            SiglipImageProcessor,
            SiglipVisionModel,
            T5EncoderModel,
        )

        from shardcook.hftoken import resolve_token

        dtype = torch.float16 if device.startswith("cuda") else torch.float32
        vae_class = _classes().AutoencoderKLHunyuanVideo15
        sources = resolve_sources(model.model_path, model.revision)
        token, _ = resolve_token(token_file)
        vae = diffusers_vae(vae_class, sources["vae"], token, dtype, device)
        qwen, tokenizer = text_model(Qwen2_5_VLTextModel, Qwen2Tokenizer, sources["qwen2.5-vl"],
                                     token, dtype, device)
        byt5, byt5_tokenizer = text_model(T5EncoderModel, ByT5Tokenizer, sources["byt5"], token,
                                          dtype, device)
        siglip, image_processor = text_model(SiglipVisionModel, SiglipImageProcessor,
                                             sources["siglip"], token, dtype, device)
        del token
        # diffusers' tiles, whose latent tile matches the sample tile (the processor's 64-pixel
        # ones do not, and make every latent over 64 pixels a side too large)
        vae.enable_tiling()
        vae.enable_slicing()
        return cls({"vae": vae, "tokenizer": tokenizer, "qwen": qwen,
                    "byt5_tokenizer": byt5_tokenizer, "byt5": byt5,
                    "image_processor": image_processor, "siglip": siglip},
                   device=device, dtype=dtype, latent_mode=model.latent_mode, seed=model.seed)

    @property
    def latent_facts(self) -> dict[str, object]:
        """The VAE's scaling and shift factors, which undo the latents' normalisation (the
        manifest records them too)."""
        norm = hunyuan_video_normalisation(dict(self.vae.config))
        return {"scaling_factor": norm["scaling_factor"], "shift_factor": norm["shift_factor"]}

    @cached_property
    def _input_values(self) -> torch.Tensor:
        """Each uint8 value as AutoModel feeds it to the VAE: v / 255 and (x - 0.5) / 0.5 in
        fp32 on the host, then (frames mode) fp16, then the VAE's dtype."""
        import torch

        from shardcook.encoders.qwen_image import unit_values

        values = unit_values(torch.float32)
        if self.frames_in_half:
            values = values.to(torch.float16)
        return values.to(self.dtype).to(self.device)

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """B [T, H, W, 3] uint8 clips of one shape -> latents [B, C, T', H/16, W/16] in fp16; with
        `posterior`, the VAE's mean and logvar too."""
        import torch

        from shardcook.encoders.flux import drawn_latent
        from shardcook.encoders.wan import scaled_clips

        gpu = self.device.startswith("cuda")
        # the processor encodes under CUDA autocast, which runs some of the VAE's ops in fp32
        autocast = torch.autocast("cuda", dtype=self.dtype) if gpu else nullcontext()
        with torch.inference_mode(), autocast:
            x = scaled_clips(pixels, self._input_values, self.device)
            dist = self.vae.encode(x.permute(0, 4, 1, 2, 3).contiguous()).latent_dist
            z = drawn_latent(dist, self.latent_mode, self.seed, keys, self.device)
            config = self.vae.config
            shift = config.get("shift_factor")
            z = (z - shift) * config.scaling_factor if shift else z * config.scaling_factor
            latents = z.to(torch.float16)
            if posterior:
                return EncodedPixels(latents, dist.mean, dist.logvar)
            return EncodedPixels(latents)

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Each caption encoded alone, as the processor encodes it, then stacked, in the run's
        dtype: `text_embeddings` [B, 1000, D], `text_mask` [B, 1000], `text_embeddings_2`
        [B, 256, D2], `text_mask_2` [B, 256]."""
        import torch

        with torch.inference_mode():
            rows = [{**self._qwen_caption(c), **self._glyphs(c)} for c in captions]
        return {name: torch.cat([row[name] for row in rows]).to(self.dtype)
                for name in rows[0]}

    def _qwen_caption(self, caption: str) -> dict[str, torch.Tensor]:
        chat = [[{"role": "system", "content": SYSTEM_MESSAGE},
                 {"role": "user", "content": caption or " "}]]
        tokens = self.tokenizer.apply_chat_template(
            chat, add_generation_prompt=True, tokenize=True, return_dict=True,
            padding="max_length", max_length=TEXT_LENGTH + TEMPLATE_TOKENS, truncation=True,
            return_tensors="pt")
        mask = to_device(tokens.attention_mask, self.device)
        hidden = self.qwen(input_ids=to_device(tokens.input_ids, self.device),
                           attention_mask=mask, output_hidden_states=True
                           ).hidden_states[-(SKIPPED_LAYERS + 1)]
        return {TEXT_EMBEDDINGS: hidden[:, TEMPLATE_TOKENS:],
                TEXT_MASK: mask[:, TEMPLATE_TOKENS:]}

    def _glyphs(self, caption: str) -> dict[str, torch.Tensor]:
        import torch

        glyphs = self.glyph_texts(caption)
        if glyphs is None:
            return {GLYPH_EMBEDDINGS: torch.zeros((1, GLYPH_LENGTH, self.byt5.config.d_model),
                                                  device=self.device, dtype=self.byt5.dtype),
                    GLYPH_MASK: torch.zeros((1, GLYPH_LENGTH), device=self.device,
                                            dtype=torch.int64)}
        tokens = self.byt5_tokenizer(glyphs, padding="max_length", max_length=GLYPH_LENGTH,
                                     truncation=True, add_special_tokens=True,
                                     return_tensors="pt")
        mask = to_device(tokens.attention_mask, self.device)
        embeds = self.byt5(input_ids=to_device(tokens.input_ids, self.device),
                           attention_mask=mask.float())[0]
        return {GLYPH_EMBEDDINGS: embeds, GLYPH_MASK: mask}

    def encode_first_frames(self, frames: Sequence[np.ndarray]) -> torch.Tensor:
        """[H, W, 3] uint8 RGB first frames -> SigLIP's last hidden state [B, N, D] in the
        run's dtype, each frame alone, as the processor's `encode_first_frame`."""
        import torch
        from PIL import Image

        dtype = next(self.siglip.parameters()).dtype
        rows = []
        with torch.inference_mode():
            for frame in frames:
                pixels = self.image_processor.preprocess(
                    images=Image.fromarray(frame), do_resize=True, return_tensors="pt",
                    do_convert_rgb=True)
                pixels = pixels.to(device=self.device, dtype=dtype)
                rows.append(self.siglip(**pixels).last_hidden_state.to(self.dtype))
        return torch.cat(rows)


def hunyuan_video_cache(sample: CacheSample) -> dict[str, object]:
    """One cache file's dict, key for key and in the order of AutoModel's
    `HunyuanVideoProcessor.get_cache_data`; the tensors keep its batch dimension of 1. `extra`
    holds the video's `image_embeds` ([N, D], None in frames mode), `num_frames`,
    `deterministic`, `mode` and `model_version`."""
    e, text = sample.extra, sample.text
    first = e.get("image_embeds")
    return {
        "video_latents": sample.latent.unsqueeze(0),
        **{name: text[name].unsqueeze(0)
           for name in (TEXT_EMBEDDINGS, TEXT_MASK, GLYPH_EMBEDDINGS, GLYPH_MASK)},
        "image_embeds": None if first is None else first.unsqueeze(0),
        **sample.video_metadata(),
    }


def hunyuan_video_normalisation(config: Mapping[str, Any]) -> dict[str, Any]:
    """What a dataset records of the VAE's normalisation (the model registry's entry): its
    config's scaling factor, and its shift (0 when it has none)."""
    scaling = config.get("scaling_factor")
    if not isinstance(scaling, (int, float)) or isinstance(scaling, bool):
        raise ConfigError("The HunyuanVideo-1.5 VAE's config.json must hold a numeric "
                          "scaling_factor; this VAE cannot normalise its latents.")
    return {"kind": SCALING_SHIFT, "scaling_factor": float(scaling),
            "shift_factor": float(config.get("shift_factor") or 0.0)}


def hunyuan_video_manifest(model: Any, token_file: str | None) -> dict[str, Any]:
    """The manifest's encoder facts for a HunyuanVideo-1.5 run (`model`: the run's
    `ModelConfig`); reads only the VAE config. No token is recorded."""
    from shardcook.hftoken import resolve_token

    sources = resolve_sources(model.model_path, model.revision)
    token, _ = resolve_token(token_file)
    config = vae_config(sources["vae"], token)
    del token
    return {
        "model": HUNYUAN_VIDEO_15.name,
        "encoders": {name: src.describe() for name, src in sources.items()},
        "vae_class": str(config.get("_class_name", "AutoencoderKLHunyuanVideo15")),
        "normalisation": hunyuan_video_normalisation(config),
        "latent_channels": int(config.get("latent_channels", 32)),
        "text_max_length": TEXT_LENGTH,
        "glyph_max_length": GLYPH_LENGTH,
        **run_facts(model),
    }
