"""The model families `encode` runs, as a registry: the one seam every model goes through.

A family is one module of encoders (`flux.py`, `wan.py`) plus one `ModelFamily` entry here,
which declares everything the rest of shardcook asks of it: what its VAE encodes, its encoders
class (the `Encoders` protocol), the default model, the size rules the config checks enforce,
its text options, the manifest's facts and normalisation, and how `validate` and `report` check
its latents. A layout `encode` writes names its family (`layouts.base.EncodeSpec.model`); the
engine's sample is family-neutral (`jobs.encode.sample`: named text tensors, latents, an
optional posterior). A model sharing a family's shape is one more entry, e.g.
`replace(WAN, name="wan2.2", version="wan2.2", default_model="Wan-AI/Wan2.2-T2V-A14B-Diffusers")`.
Every `module:name` is a string, so nothing heavy is imported until it is used."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

if TYPE_CHECKING:
    import numpy as np
    import torch

#: The normalisation conventions (a manifest's `normalisation.kind`): one scale and shift for
#: every channel, `(z - shift) * scale` (FLUX), a mean and standard deviation per channel
#: from the VAE's config, `(z - latents_mean) / latents_std` (Wan), or the latent patchified 2x2
#: and normalised per channel by the VAE's batch-norm running statistics from its weights,
#: `(patchify(z) - bn_mean) / bn_std` (FLUX.2).
SCALING_SHIFT: Final = "scaling_shift"
LATENTS_MEAN_STD: Final = "latents_mean_std"
PATCH_BATCH_NORM: Final = "patch_batch_norm"
#: The conventions that normalise each channel to mean 0 and standard deviation 1.
PER_CHANNEL: Final = (LATENTS_MEAN_STD, PATCH_BATCH_NORM)


@dataclass(frozen=True)
class Sizes:
    """The pixel sizes a family's VAE takes, which `encode`'s config checks enforce.

    Attributes:
        multiple: Every height and width `encode` is asked for is a multiple of this.
        why: The reason, in the sentence refusing another size.
        downsample: Pixels per latent cell in height and width (a latent is size / downsample).
        frame_step: For video, the VAE's temporal compression: it encodes the first frame
            alone and then `frame_step` frames per latent frame, so 4n+1 frames encode whole
            and a clip of T frames has 1 + (T - 1) // frame_step latent frames. None for images.
    """

    multiple: int
    why: str
    downsample: int = 8
    frame_step: int | None = None


@dataclass(frozen=True)
class Text:
    """A family's text encoders: what they give and which options set them.

    Attributes:
        outputs: The names of the tensors `encode_text` returns, in order (a layout's part
            builder picks them by name).
        options: (model option, what it is) for each `ModelConfig` option its text encoders
            read, e.g. FLUX's `t5_max_length`; another family's run refuses them.
        padding: How its captions are padded, for the sentence refusing another family's text
            option (empty when it takes every such option).
    """

    outputs: tuple[str, ...]
    options: tuple[tuple[str, str], ...] = ()
    padding: str = ""


@dataclass(frozen=True)
class Latents:
    """A family's stored latents, as `validate` and `report` check them.

    Attributes:
        convention: `SCALING_SHIFT`, `LATENTS_MEAN_STD` or `PATCH_BATCH_NORM`: how its latents
            are normalised, and the `kind` of the normalisation record its manifests hold.
        rank: The dimensions of one latent: 3 for [C, h, w], 4 for [C, T', h, w].
        usual_factors: (scaling, shift) that a `SCALING_SHIFT` dataset recording no factors
            is taken to use (FLUX.1's), marked approximate; None: nothing to assume.
    """

    convention: Literal["scaling_shift", "latents_mean_std", "patch_batch_norm"]
    rank: int
    usual_factors: tuple[float, float] | None = None


#: The facts every image processor's cache file ends with (`CacheSample.metadata`).
IMAGE_FACTS: Final = ("original_resolution", "bucket_resolution", "crop_offset", "prompt",
                      "image_path", "bucket_id", "aspect_ratio", "model_type")
#: ... and every video processor's.
VIDEO_FACTS: Final = ("original_resolution", "bucket_resolution", "bucket_id", "aspect_ratio",
                      "num_frames", "prompt", "video_path", "deterministic_latents",
                      "model_version", "processing_mode", "model_type")


@dataclass(frozen=True)
class CacheKeys:
    """The keys of one cache file, as `validate` checks them.

    Attributes:
        latent: The latent's key.
        latent_rank: Its dimensions (FLUX: 3, [C, h, w]; Wan: 5, [1, C, T', h, w]); its last two
            are the bucket's height and width / `Sizes.downsample`.
        channel_axis: Where its channels are (they differ between real and tiny models, so
            `validate` asks only that every file has the first file's).
        text: (key, rank) of each text tensor every file holds.
        other: (key, rank) of each other tensor every file holds (LTX-2's audio latents).
        optional: (key, rank) of tensors a file may hold (a key later processors store).
        facts: The other keys every file holds.
    """

    latent: str
    latent_rank: int
    text: tuple[tuple[str, int], ...]
    channel_axis: int = 0
    other: tuple[tuple[str, int], ...] = ()
    optional: tuple[tuple[str, int], ...] = ()
    facts: tuple[str, ...] = IMAGE_FACTS


@dataclass(frozen=True)
class AutoModelCache:
    """How a family writes NeMo AutoModel's diffusion cache (`encode --layout automodel`).

    Attributes:
        processors: AutoModel's processor names (`--model-type`) this family answers.
        model_type: The processor's `model_type`, which the cache and its metadata record.
        encoders: `module:Class` of the encoders that compute what AutoModel's processor does
            (the `Encoders` protocol; its `encode_text` gives every text tensor the cache
            stores, its `encode_pixels` the latent).
        cache: `module:function(sample)` building one cache file's dict, AutoModel's
            `get_cache_data`, from a `CacheSample`: its keys, shapes and dtypes.
        quantization: The bucket sides' multiple (AutoModel's image tool: 64; a video
            processor's `quantization`).
        keys: What each cache file holds (`CacheKeys`), what `cache` builds and AutoModel's
            processor writes.
        latent_mode: The `--latent-mode` a run takes when not given: the processor's own,
            `sample` (a posterior draw, which shardcook seeds per sample) or `mode`.
        video_modes: The `--video-mode`s its processor supports (`supported_modes`).
        frame_multiple: k when its VAE takes only kn+1 frames (the processor's
            `frame_constraint`), which `--num-frames` must then be; None: any count.
        frame_rate: The rate its processor takes `--num-frames` frames at from the first
            (LTX-2: 24 fps, so they span what its audio does); None: evenly spread over the
            video.
        audio: `module:function(data, num_frames)` decoding an input's audio track as its
            encoders' `encode_audio` takes it, for a clip of `num_frames` frames (in the reader
            threads, beside the frames); None: it encodes no audio.
        repeat_frames: Its video mode takes exactly `--num-frames` frames evenly spread over a
            video, repeating frames of a shorter one (HunyuanVideo's `adjust_frame_count`);
            False: at most that many (a shorter video whole).
        first_frame: Its video mode also encodes each clip's first frame alone (an
            image-to-video model's conditioning; its encoders' `encode_first_frames`, given to
            `cache` as `extra["image_embeds"]`).
    """

    processors: tuple[str, ...]
    model_type: str
    encoders: str
    cache: str
    quantization: int
    keys: CacheKeys
    latent_mode: Literal["sample", "mode"] = "sample"
    video_modes: tuple[str, ...] = ("video", "frames")
    frame_multiple: int | None = None
    frame_rate: float | None = None
    audio: str | None = None
    repeat_frames: bool = False
    first_frame: bool = False


@dataclass(frozen=True)
class CacheSample:
    """What a family's `AutoModelCache.cache` builds one cache file's dict from: one input
    after its `AutoModelCache.encoders`, tensors on the CPU as they compute them.

    Attributes:
        latent: The latent as the cache stores it (FLUX: [C, h, w] fp16).
        text: The encoders' text tensors by name, one row each (no batch dimension).
        path: The input's absolute path (AutoModel's `image_path` / `video_path`).
        prompt: Its caption.
        original_resolution: (width, height) of the input.
        bucket_resolution: (width, height) it was resized and cropped to.
        crop_offset: (left, top) of the crop in the resized input.
        bucket_id: The bucket's id (None for an explicit video size).
        aspect_ratio: The bucket's aspect ratio.
        model_type: The processor's `model_type`.
        extra: Family-specific facts of the input (a video's frame counts), by AutoModel's
            names.
    """

    latent: torch.Tensor
    text: dict[str, torch.Tensor]
    path: str
    prompt: str
    original_resolution: tuple[int, int]
    bucket_resolution: tuple[int, int]
    crop_offset: tuple[int, int]
    bucket_id: int | None
    aspect_ratio: float
    model_type: str
    extra: dict[str, Any]

    def metadata(self) -> dict[str, object]:
        """The input's facts every image processor's `get_cache_data` ends its dict with, in
        its order."""
        return {"original_resolution": self.original_resolution,
                "bucket_resolution": self.bucket_resolution, "crop_offset": self.crop_offset,
                "prompt": self.prompt, "image_path": self.path, "bucket_id": self.bucket_id,
                "aspect_ratio": self.aspect_ratio, "model_type": self.model_type}

    def video_metadata(self) -> dict[str, object]:
        """The clip's facts every video processor's `get_cache_data` ends its dict with, in its
        order; `extra` gives `num_frames`, `deterministic`, `model_version` and `mode`."""
        e = self.extra
        return {"original_resolution": self.original_resolution,
                "bucket_resolution": self.bucket_resolution, "bucket_id": self.bucket_id,
                "aspect_ratio": self.aspect_ratio, "num_frames": e["num_frames"],
                "prompt": self.prompt, "video_path": self.path,
                "deterministic_latents": e["deterministic"],
                "model_version": e["model_version"], "processing_mode": e["mode"],
                "model_type": self.model_type}


@dataclass(frozen=True)
class EncodedPixels:
    """What `Encoders.encode_pixels` gives for a batch, on the device.

    Attributes:
        latents: [B, C, ...] as the layout stores them (normalised unless the layout keeps them
            raw).
        mean: The unscaled posterior mean, when asked for (`--latent-mode resample`).
        logvar: The unscaled posterior log-variance, with `mean`.
    """

    latents: torch.Tensor
    mean: torch.Tensor | None = None
    logvar: torch.Tensor | None = None

    @property
    def posterior(self) -> tuple[torch.Tensor, ...]:
        """(mean, logvar), or () when not asked for."""
        return () if self.mean is None or self.logvar is None else (self.mean, self.logvar)


class Encoders(Protocol):
    """What `encode` asks of a family's encoders class (its entry's `encoders`)."""

    @classmethod
    def for_run(cls, model: Any, spec: Any, device: str, token_file: str | None
                ) -> Encoders:
        """The encoders of an `encode` run (`model`: its `config.ModelConfig`, resolved for
        encode; `spec`: its layout's `layouts.base.EncodeSpec`)."""
        ...

    @property
    def latent_facts(self) -> dict[str, object]:
        """What a sample records to undo the latents' normalisation (FLUX's scaling and shift
        factors; none for a family whose manifest records it)."""
        ...

    def encode_text(self, captions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Captions -> the family's named text tensors (`Text.outputs`), each [B, ...]."""
        ...

    def encode_pixels(self, pixels: np.ndarray | Sequence[np.ndarray], keys: Sequence[str],
                      *, posterior: bool = False) -> EncodedPixels:
        """Pixels of one shape (images [B, H, W, 3] or B clips [T, H, W, 3], uint8 RGB) and
        their sample keys (seeding a sampled latent) -> latents, with the posterior when
        `posterior`."""
        ...


@dataclass(frozen=True)
class ModelFamily:
    """One model family: its registry entry.

    Attributes:
        name: The registry name (what `EncodeSpec.model` says).
        input_kind: What its VAE encodes: `image` (one picture) or `video` (a clip of frames).
        encoders: `module:Class` of its encoders (the `Encoders` protocol), which `encode`
            loads with `Class.for_run(model, spec, device, token_file)`.
        manifest: `module:function(model, token_file)` giving the manifest's encoder facts
            (sources, normalisation read from the VAE config, precision, latent mode); `model`
            is the run's `config.ModelConfig`.
        normalisation: `module:function(vae_config)` giving the normalisation record of its
            `latents.convention` (`kind` and its values) read from a VAE config (FLUX.2's: with
            the batch-norm statistics its weights hold).
        default_model: What `--model-path` is when not given (a hub id).
        version: What trainers record as the model's version (Bridge's `model_version`).
        sizes: The size rules (`Sizes`).
        text: Its text encoders' outputs and options (`Text`).
        latents: How `validate` and `report` check its latents (`Latents`).
        empty_encodings: (text output, file name) of each `empty_encodings/` file `encode`
            writes from `encode_text([""])` (FLUX trainers' caption dropout); () for none.
        automodel: How it writes NeMo AutoModel's cache (`AutoModelCache`), or None.
        decoder: `module:Class` made as `Class(model_path, manifest, token_file)`, turning what
            a layout's `preview` gives into RGB pixels for `preview --model-path`; None: the
            FLUX VAE decoder `preview` has.
    """

    name: str
    input_kind: Literal["image", "video"]
    encoders: str
    manifest: str
    normalisation: str
    default_model: str
    version: str
    sizes: Sizes
    text: Text
    latents: Latents
    empty_encodings: tuple[tuple[str, str], ...] = ()
    decoder: str | None = None
    automodel: AutoModelCache | None = None

    def function(self, what: str) -> Any:
        """The object one of this entry's `module:name` fields names."""
        module, _, name = str(getattr(self, what)).partition(":")
        return getattr(importlib.import_module(module), name)


FLUX = ModelFamily(
    name="flux", input_kind="image",
    encoders="shardcook.encoders.flux:FluxEncoders",
    manifest="shardcook.encoders.flux:flux_manifest",
    normalisation="shardcook.encoders.flux:flux_normalisation",
    default_model="black-forest-labs/FLUX.1-dev", version="flux",
    sizes=Sizes(16, "the VAE downsamples by 8 and FLUX packs 2x2 latents"),
    text=Text(outputs=("prompt_embeds", "pooled_prompt_embeds"),
              options=(("t5_max_length", "FLUX's T5 padding length"),)),
    latents=Latents(SCALING_SHIFT, rank=3, usual_factors=(0.3611, 0.1159)),
    empty_encodings=(("prompt_embeds", "t5_empty.npy"),
                     ("pooled_prompt_embeds", "clip_empty.npy")),
    automodel=AutoModelCache(
        processors=("flux",), model_type="flux",
        encoders="shardcook.encoders.automodel_flux:AutoModelFluxEncoders",
        cache="shardcook.encoders.automodel_flux:flux_cache", quantization=64,
        keys=CacheKeys("latent", 3, text=(("clip_tokens", 2), ("clip_hidden", 3),
                                          ("pooled_prompt_embeds", 2), ("t5_tokens", 2),
                                          ("prompt_embeds", 3)))))
#: A Wan cache file: the latent and text keep AutoModel's batch dimension of 1; `first_frame`
#: (None in frames mode) and the video facts.
WAN_CACHE_KEYS = CacheKeys("video_latents", 5, text=(("text_embeddings", 3),), channel_axis=1,
                           facts=("first_frame", *VIDEO_FACTS))
WAN = ModelFamily(
    name="wan", input_kind="video",
    encoders="shardcook.encoders.wan:WanEncoders",
    manifest="shardcook.encoders.wan:wan_manifest",
    normalisation="shardcook.encoders.wan:wan_normalisation",
    default_model="Wan-AI/Wan2.1-T2V-1.3B-Diffusers", version="wan2.1",
    sizes=Sizes(8, "the VAE downsamples by 8", frame_step=4),
    text=Text(outputs=("prompt_embeds",),
              padding="Wan's UMT5 text encoder always pads captions to 226 tokens (as Bridge's "
                      "script does)"),
    latents=Latents(LATENTS_MEAN_STD, rank=4),
    decoder="shardcook.encoders.wan:WanDecoder",
    automodel=AutoModelCache(
        processors=("wan", "wan2.1"), model_type="wan",
        encoders="shardcook.encoders.automodel_wan:AutoModelWanEncoders",
        cache="shardcook.encoders.automodel_wan:wan_cache", quantization=16,
        keys=WAN_CACHE_KEYS, latent_mode="mode"))
#: Wan 2.2 A14B: Wan 2.1's VAE class and UMT5, its own weights, recorded as wan2.2.
WAN22 = replace(WAN, name="wan2.2", version="wan2.2",
                default_model="Wan-AI/Wan2.2-T2V-A14B-Diffusers",
                automodel=AutoModelCache(
                    processors=("wan2.2",), model_type="wan22",
                    encoders="shardcook.encoders.automodel_wan:AutoModelWanEncoders",
                    cache="shardcook.encoders.automodel_wan:wan_cache", quantization=16,
                    keys=WAN_CACHE_KEYS, latent_mode="mode"))
FLUX2 = ModelFamily(
    name="flux2", input_kind="image",
    encoders="shardcook.encoders.flux2:Flux2Encoders",
    manifest="shardcook.encoders.flux2:flux2_manifest",
    normalisation="shardcook.encoders.flux2:flux2_normalisation",
    default_model="black-forest-labs/FLUX.2-dev", version="flux2",
    sizes=Sizes(16, "the VAE downsamples by 8 and FLUX.2 patchifies 2x2 latents", downsample=16),
    text=Text(outputs=("prompt_embeds",),
              padding="FLUX.2's Mistral text encoder always pads captions to 512 tokens (as "
                      "AutoModel's processor does)"),
    latents=Latents(PATCH_BATCH_NORM, rank=3),
    automodel=AutoModelCache(
        processors=("flux2",), model_type="flux2",
        encoders="shardcook.encoders.flux2:Flux2Encoders",
        cache="shardcook.encoders.flux2:flux2_cache", quantization=64,
        keys=CacheKeys("latent", 3, text=(("prompt_embeds", 2),)), latent_mode="mode"))
QWEN_IMAGE = ModelFamily(
    name="qwen_image", input_kind="image",
    encoders="shardcook.encoders.qwen_image:QwenImageEncoders",
    manifest="shardcook.encoders.qwen_image:qwen_image_manifest",
    normalisation="shardcook.encoders.qwen_image:qwen_image_normalisation",
    default_model="Qwen/Qwen-Image", version="qwen_image",
    sizes=Sizes(16, "the VAE downsamples by 8 and Qwen-Image packs 2x2 latents"),
    text=Text(outputs=("prompt_embeds", "prompt_embeds_mask"),
              padding="Qwen-Image keeps each caption's own tokens, up to 1024"),
    latents=Latents(LATENTS_MEAN_STD, rank=3),
    decoder="shardcook.encoders.qwen_image:QwenImageDecoder",
    automodel=AutoModelCache(
        processors=("qwen_image",), model_type="qwen_image",
        encoders="shardcook.encoders.qwen_image:QwenImageEncoders",
        cache="shardcook.encoders.qwen_image:qwen_image_cache", quantization=64,
        keys=CacheKeys("latent", 3, text=(("prompt_embeds", 3),),
                       optional=(("prompt_embeds_mask", 2),))))
#: LTX-2.3: a video VAE, an audio VAE and Gemma-3 through its text connectors, in AutoModel's cache
#: alone (video mode, 8n+1 frames at 24 fps with the audio they span).
LTX2 = ModelFamily(
    name="ltx2", input_kind="video",
    encoders="shardcook.encoders.ltx2:LTX2Encoders",
    manifest="shardcook.encoders.ltx2:ltx2_manifest",
    normalisation="shardcook.encoders.ltx2:ltx2_normalisation",
    default_model="diffusers/LTX-2.3-Diffusers", version="ltx2.3",
    sizes=Sizes(32, "the video VAE downsamples by 32", downsample=32, frame_step=8),
    text=Text(outputs=("text_embeddings", "audio_text_embeddings", "text_mask"),
              padding="LTX-2's Gemma-3 text encoder always pads captions to 1024 tokens (as "
                      "AutoModel's processor does)"),
    latents=Latents(LATENTS_MEAN_STD, rank=4),
    automodel=AutoModelCache(
        processors=("ltx2",), model_type="ltx2",
        encoders="shardcook.encoders.ltx2:LTX2Encoders",
        cache="shardcook.encoders.ltx2:ltx2_cache", quantization=32,
        keys=CacheKeys("video_latents", 5, channel_axis=1,
                       text=(("text_embeddings", 3), ("audio_text_embeddings", 3),
                             ("text_mask", 2)),
                       other=(("audio_latents", 4),), facts=VIDEO_FACTS),
        latent_mode="mode", video_modes=("video",), frame_multiple=8, frame_rate=24.0,
        audio="shardcook.encoders.ltx2:decode_audio"))
#: HunyuanVideo-1.5 (image-to-video): its VAE, Qwen2.5-VL and ByT5 for the caption, SigLIP for
#: the first frame, in AutoModel's cache alone.
HUNYUAN_VIDEO_15 = ModelFamily(
    name="hunyuanvideo-1.5", input_kind="video",
    encoders="shardcook.encoders.hunyuan_video:HunyuanVideoEncoders",
    manifest="shardcook.encoders.hunyuan_video:hunyuan_video_manifest",
    normalisation="shardcook.encoders.hunyuan_video:hunyuan_video_normalisation",
    default_model="hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-720p_i2v",
    version="hunyuanvideo-1.5",
    sizes=Sizes(16, "the VAE downsamples by 16", downsample=16, frame_step=4),
    text=Text(outputs=("text_embeddings", "text_mask", "text_embeddings_2", "text_mask_2"),
              padding="HunyuanVideo-1.5 always pads captions to 1000 Qwen2.5-VL tokens and 256 "
                      "ByT5 tokens (as AutoModel's processor does)"),
    latents=Latents(SCALING_SHIFT, rank=4),
    automodel=AutoModelCache(
        processors=("hunyuanvideo-1.5", "hunyuanvideo", "hunyuan"), model_type="hunyuanvideo",
        encoders="shardcook.encoders.hunyuan_video:HunyuanVideoEncoders",
        cache="shardcook.encoders.hunyuan_video:hunyuan_video_cache", quantization=16,
        # the first frame's SigLIP embeddings (None in frames mode), then the video facts
        keys=CacheKeys("video_latents", 5, text=(("text_embeddings", 3), ("text_mask", 2),
                                                 ("text_embeddings_2", 3), ("text_mask_2", 2)),
                       channel_axis=1, facts=("image_embeds", *VIDEO_FACTS)),
        # both video modes: its processor declares video alone, but the tool runs frames too
        latent_mode="mode", frame_multiple=4, repeat_frames=True, first_frame=True))

#: Every model family, by registry name.
MODELS: dict[str, ModelFamily] = {model.name: model for model in (FLUX, FLUX2, WAN, WAN22,
                                                                  QWEN_IMAGE, LTX2,
                                                                  HUNYUAN_VIDEO_15)}


def by_model_type(name: str) -> ModelFamily | None:
    """The family whose `automodel` entry answers AutoModel's processor name `name`."""
    return next((m for m in MODELS.values()
                 if m.automodel is not None and name in m.automodel.processors), None)


def model_types() -> list[str]:
    """Every AutoModel processor name a family answers (what `--model-type` accepts)."""
    return [n for m in MODELS.values() if m.automodel is not None for n in m.automodel.processors]
