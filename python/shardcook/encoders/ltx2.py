"""LTX-2.3 as NeMo AutoModel's `ltx2` processor (`tools/diffusion/processors/ltx2.py`) encodes it
for its diffusion cache (`encode --layout automodel --model-type ltx2`): video, audio and text of
each clip, every model in bf16 on any device.

- Video: `AutoencoderKLLTX2Video`'s posterior mode of the clip's frames (8n+1 of them, taken at
  24 fps from t=0), normalised per channel by the statistics its weights hold,
  `(z - latents_mean) * scaling_factor / latents_std`: [1, C, T', H/32, W/32].
- Audio: the clip's audio track, resampled to 16 kHz stereo, its first `frames / 24` seconds
  (zero-padded), as a log-mel spectrogram (`ltx2_mel`) through `AutoencoderKLLTX2Audio`'s
  posterior mode, normalised per (channel, mel bin) by its weights' statistics: [1, C, L, M],
  25 latent frames a second. A clip without an audio track gets silence, as AutoModel gives it.
- Text: Gemma-3's hidden states of every layer for the caption left-padded to 1024 tokens,
  through the frozen `LTX2TextConnectors`: the video and audio streams' embeddings and the
  connectors' mask.

`--model-path` names a diffusers-format LTX-2 folder or hub repo holding vae/, audio_vae/,
text_encoder/, tokenizer/ and connectors/.
"""

from __future__ import annotations

import inspect
import io
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from shardcook.encoders.loading import (
    EncoderSource,
    diffusers_vae,
    folder_sources,
    run_facts,
    text_model,
)
from shardcook.encoders.models import LATENTS_MEAN_STD, LTX2, CacheSample, EncodedPixels
from shardcook.errors import ConfigError
from shardcook.media import MediaError

if TYPE_CHECKING:
    import numpy as np
    import torch

DEFAULT_MODEL = LTX2.default_model
#: The rates LTX-2 is trained at: video frames, audio samples and audio latent frames a second.
VIDEO_FPS = 24.0
SAMPLE_RATE = 16000
AUDIO_LATENT_FPS = 25.0
#: Every caption is left-padded (or cut) to this many tokens, as AutoModel's processor does.
TEXT_LENGTH = 1024
#: encoder -> (model subfolder, tokenizer subfolder) inside a diffusers-format LTX-2 folder
LTX2_LAYOUT = {"vae": ("vae", None), "audio_vae": ("audio_vae", None),
               "gemma": ("text_encoder", "tokenizer"), "connectors": ("connectors", None)}
VIDEO_EMBEDS, AUDIO_EMBEDS, TEXT_MASK = LTX2.text.outputs


def decode_audio(data: bytes, num_frames: int) -> np.ndarray:
    """The first audio track of the video in `data` as AutoModel's `LTX2Processor.load_audio`
    takes it: resampled to 16 kHz stereo float, cut (or zero-padded) to the `num_frames / 24`
    seconds the clip's frames span: [2, samples]. A video without an audio track, or whose
    track decodes to nothing, gives silence (AutoModel's warning is not repeated).

    Raises:
        MediaError: the audio track cannot be decoded (`audio_decode_error`).
    """
    import av
    import numpy as np

    samples = round(num_frames / VIDEO_FPS * SAMPLE_RATE)
    chunks: list[np.ndarray] = []
    try:
        with av.open(io.BytesIO(data)) as container:
            if container.streams.audio:
                resampler = av.AudioResampler(format="fltp", layout="stereo", rate=SAMPLE_RATE)
                for frame in container.decode(container.streams.audio[0]):
                    chunks += [r.to_ndarray() for r in resampler.resample(frame)]
                chunks += [r.to_ndarray() for r in resampler.resample(None)]
    except (av.error.FFmpegError, ValueError) as e:
        raise MediaError("audio_decode_error",
                         f"its audio track cannot be decoded ({e})") from None
    audio = np.concatenate(chunks, axis=1) if chunks else np.zeros((2, 0), np.float32)
    if audio.shape[1] >= samples:
        return np.ascontiguousarray(audio[:, :samples], dtype=np.float32)
    return np.pad(audio.astype(np.float32), ((0, 0), (0, samples - audio.shape[1])))


class LTX2Encoders:
    """LTX-2's encoders computing what AutoModel's `ltx2` processor stores.

    `latent_mode` `mode` is AutoModel's default (`--deterministic`: the posterior's mode);
    `sample` (its `--stochastic`) draws from a generator seeded by (seed, sample key) where
    AutoModel's global generator is unseeded. Its audio is always the posterior's mode, as
    AutoModel's.
    """

    def __init__(self, vae: Any, audio_vae: Any, tokenizer: Any, gemma: Any, connectors: Any, *,
                 device: str, latent_mode: str, seed: int) -> None:
        import torch

        from shardcook.encoders.ltx2_mel import MelSpectrogram

        self.vae, self.audio_vae, self.tokenizer = vae, audio_vae, tokenizer
        self.gemma, self.connectors = gemma, connectors
        self.device, self.latent_mode, self.seed = device, latent_mode, seed
        self.dtype = torch.bfloat16
        self.mel = MelSpectrogram(device)

    @classmethod
    def for_run(cls, model: Any, spec: Any, device: str, token_file: str | None
                ) -> LTX2Encoders:
        """Every model in bf16, AutoModel's, whatever `--precision` says; the token is read
        for the loads and dropped."""
        import torch

        # transformers 5 keeps GemmaTokenizerFast as a lazy alias its type information lacks
        from transformers import Gemma3ForConditionalGeneration, GemmaTokenizerFast  # type: ignore[attr-defined]

        from shardcook.hftoken import resolve_token

        video_vae, audio_vae, connectors = ltx2_classes()
        dtype = torch.bfloat16
        sources = ltx2_sources(model.model_path, model.revision)
        token, _ = resolve_token(token_file)
        vae = diffusers_vae(video_vae, sources["vae"], token, dtype, device)
        audio = diffusers_vae(audio_vae, sources["audio_vae"], token, dtype, device)
        gemma, tokenizer = text_model(Gemma3ForConditionalGeneration, GemmaTokenizerFast,
                                      sources["gemma"], token, dtype, device)
        links = diffusers_vae(connectors, sources["connectors"], token, dtype, device)
        del token
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        return cls(vae, audio, tokenizer, gemma, links, device=device,
                   latent_mode=model.latent_mode, seed=model.seed)

    @property
    def latent_facts(self) -> dict[str, object]:
        return {}

    @cached_property
    def _input_values(self) -> torch.Tensor:
        """Each uint8 value as AutoModel feeds it to the VAE: v / 255 and (x - 0.5) / 0.5 in
        fp32 on the host, then bf16."""
        import torch

        values = (torch.arange(256, dtype=torch.float32) / 255.0 - 0.5) / 0.5
        return values.to(self.dtype).to(self.device)

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """B [T, H, W, 3] uint8 clips of one shape -> normalised latents [B, C, T', H/32, W/32]
        in bf16; with `posterior`, the VAE's mean and logvar too."""
        import torch

        from shardcook.encoders.flux import drawn_latent
        from shardcook.encoders.wan import scaled_clips

        with torch.inference_mode():
            x = scaled_clips(pixels, self._input_values, self.device)
            dist = self.vae.encode(x.permute(0, 4, 1, 2, 3).contiguous()).latent_dist
            z = drawn_latent(dist, self.latent_mode, self.seed, keys, self.device)
            view = (1, -1, 1, 1, 1)
            mean = self.vae.latents_mean.view(view).to(z.device, z.dtype)
            std = self.vae.latents_std.view(view).to(z.device, z.dtype)
            latents = ((z - mean) * self.vae.config.scaling_factor / std).to(torch.bfloat16)
            if posterior:
                return EncodedPixels(latents, dist.mean, dist.logvar)
            return EncodedPixels(latents)

    def encode_audio(self, waveform: np.ndarray) -> dict[str, torch.Tensor]:
        """A clip's track from `decode_audio` -> {`audio_latents`: [1, C, L, M] bf16 on the
        CPU}, normalised per (channel, mel bin) on the flattened [1, L, C * M] layout.

        Raises:
            ConfigError: the audio VAE does not give 25 latent frames a second (not LTX-2's).
        """
        import torch

        x = torch.from_numpy(waveform).unsqueeze(0).to(self.device, torch.float32)
        with torch.inference_mode():
            mel = torch.log(torch.clamp(self.mel(x), min=1e-5))
            mel = mel.permute(0, 1, 3, 2).contiguous()  # [1, 2, mel frames, 64]
            z = self.audio_vae.encode(mel.to(self.audio_vae.dtype)).latent_dist.mode()
            b, c, t, m = z.shape
            mean = self.audio_vae.latents_mean.to(z.device, z.dtype)
            std = self.audio_vae.latents_std.to(z.device, z.dtype)
            flat = (z.permute(0, 2, 1, 3).reshape(b, t, c * m) - mean) / std
            latents = flat.view(b, t, c, m).permute(0, 2, 1, 3).contiguous()
        seconds = waveform.shape[1] / SAMPLE_RATE
        expected = round(seconds * AUDIO_LATENT_FPS)
        if abs(t - expected) > 1:
            raise ConfigError(f"The audio VAE gives {t} latent frames for {seconds:.3f} s of "
                              f"audio, not the {expected} of LTX-2's 25 a second; --model-path "
                              "holds another audio VAE.")
        return {"audio_latents": latents.cpu().to(torch.bfloat16)}

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Each caption encoded alone, as AutoModel does, then stacked: the video stream's
        embeddings [B, 1024, D_v] and the audio stream's [B, 1024, D_a] in bf16, and the
        connectors' mask [B, 1024] (int64). The connectors take Gemma's layers flattened,
        [1, T, H * (layers + 1)], and normalise them themselves."""
        import torch

        rows = [self._caption(c) for c in captions]
        return {name: torch.cat([row[name] for row in rows]) for name in rows[0]}

    def _caption(self, caption: str) -> dict[str, torch.Tensor]:
        import torch

        tokens = self.tokenizer([caption.strip()], padding="max_length", max_length=TEXT_LENGTH,
                                truncation=True, add_special_tokens=True, return_tensors="pt")
        ids = tokens.input_ids.to(self.device)
        mask = tokens.attention_mask.to(self.device)
        with torch.inference_mode():
            out = self.gemma(input_ids=ids, attention_mask=mask, output_hidden_states=True,
                             return_dict=True)
            hidden = torch.stack(out.hidden_states, dim=-1)  # [1, T, H, layers + 1]
            video, audio, links_mask = self.connectors(hidden.flatten(2, 3), mask)
        return {VIDEO_EMBEDS: video.cpu().to(torch.bfloat16),
                AUDIO_EMBEDS: audio.cpu().to(torch.bfloat16), TEXT_MASK: links_mask.cpu()}


#: What a diffusers too old for LTX-2.3 is told.
OLD_DIFFUSERS = ("LTX-2.3 needs a diffusers whose LTX2TextConnectors normalise Gemma's hidden "
                 "states themselves; upgrade it with pip install -U diffusers.")


def ltx2_classes() -> tuple[Any, Any, Any]:
    """diffusers' (AutoencoderKLLTX2Video, AutoencoderKLLTX2Audio, LTX2TextConnectors); a
    diffusers without them, or whose connectors take the stacked states normalised by the
    pipeline (before their `padding_side`, which AutoModel's processor also serves), is one
    sentence."""
    try:
        from diffusers.models.autoencoders.autoencoder_kl_ltx2 import AutoencoderKLLTX2Video
        from diffusers.models.autoencoders.autoencoder_kl_ltx2_audio import (
            AutoencoderKLLTX2Audio,
        )
        from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors
    except ImportError:
        raise ConfigError(OLD_DIFFUSERS) from None
    if "padding_side" not in inspect.signature(LTX2TextConnectors.forward).parameters:
        raise ConfigError(OLD_DIFFUSERS)
    return AutoencoderKLLTX2Video, AutoencoderKLLTX2Audio, LTX2TextConnectors


def ltx2_sources(model_path: str | None, revision: str | None) -> dict[str, EncoderSource]:
    """Each encoder's source inside a diffusers-format `--model-path`."""
    return folder_sources(model_path or DEFAULT_MODEL, revision, LTX2_LAYOUT, "LTX-2")


def ltx2_cache(sample: CacheSample) -> dict[str, object]:
    """One cache file's dict, key for key and in the order of AutoModel's `LTX2Processor.
    get_cache_data`; the latent and text keep AutoModel's batch dimension of 1. `extra` holds
    the clip's `audio_latents` ([1, C, L, M]), `num_frames`, `deterministic`, `mode` and
    `model_version`."""
    e, text = sample.extra, sample.text
    return {
        "video_latents": sample.latent.unsqueeze(0),
        "audio_latents": e["audio_latents"],
        "text_embeddings": text[VIDEO_EMBEDS].unsqueeze(0),
        "audio_text_embeddings": text[AUDIO_EMBEDS].unsqueeze(0),
        "text_mask": text[TEXT_MASK].unsqueeze(0),
        **sample.video_metadata(),
    }


def ltx2_normalisation(stats: Mapping[str, Any]) -> dict[str, Any]:
    """What a dataset records of the video VAE's normalisation (the model registry's entry),
    from its config with the statistics its weights hold (`video_statistics`): the scaling
    factor folded into the standard deviations, `(z - mean) * s / std = (z - mean) / (std /
    s)`."""
    mean, std = stats.get("latents_mean"), stats.get("latents_std")
    scale = float(stats.get("scaling_factor", 1.0))
    if not isinstance(mean, list) or not isinstance(std, list) or not mean or len(mean) != len(
            std):
        raise ConfigError("The LTX-2 video VAE holds no latent statistics, one per channel; "
                          "this VAE cannot normalise its latents.")
    return {"kind": LATENTS_MEAN_STD, "latents_mean": [float(v) for v in mean],
            "latents_std": [float(v) / scale for v in std]}


def video_statistics(vae: Any) -> dict[str, Any]:
    """The video VAE's config with its weights' `latents_mean` / `latents_std` as lists."""
    return {**dict(vae.config), "latents_mean": vae.latents_mean.float().tolist(),
            "latents_std": vae.latents_std.float().tolist()}


def ltx2_manifest(model: Any, token_file: str | None) -> dict[str, Any]:
    """The manifest's encoder facts for an LTX-2 run (`model`: the run's `ModelConfig`): the
    video VAE is loaded on the CPU in bf16, for the statistics its weights hold. No token is
    recorded."""
    import torch

    from shardcook.hftoken import resolve_token

    sources = ltx2_sources(model.model_path, model.revision)
    token, _ = resolve_token(token_file)
    vae = diffusers_vae(ltx2_classes()[0], sources["vae"], token, torch.bfloat16, "cpu")
    del token
    stats = video_statistics(vae)
    return {
        "model": LTX2.name,
        "encoders": {name: src.describe() for name, src in sources.items()},
        "vae_class": str(stats.get("_class_name", "AutoencoderKLLTX2Video")),
        "normalisation": ltx2_normalisation(stats),
        "latent_channels": len(stats["latents_mean"]),
        "text_max_length": TEXT_LENGTH,
        **run_facts(model),
    }
