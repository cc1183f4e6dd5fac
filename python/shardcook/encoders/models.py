"""The model families `encode` runs, as a registry: each entry says what its encoders read
(image or video), where they load from, and what the manifest records about them (which VAE,
and the normalisation read from the VAE's own config). A layout `encode` writes names its family
(`layouts.base.EncodeSpec.model`); adding a model is one module of encoders plus one entry
here. Every `module:name` is a string, so nothing heavy is imported until it is used."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class ModelFamily:
    """One model family's encoders.

    Attributes:
        name: The registry name (what `EncodeSpec.model` says).
        input_kind: What its VAE encodes: `image` (one picture) or `video` (a clip of frames).
        encoders: `module:Class` of its encoders, which `encode` loads with
            `Class.for_run(model, spec, device, token_file)` (`model`: the run's
            `config.ModelConfig`; `spec`: its layout's `EncodeSpec`).
        manifest: `module:function(model, token_file)` giving the manifest's encoder facts
            (sources, normalisation read from the VAE config, precision, latent mode); `model`
            is the run's `config.ModelConfig`. The normalisation recorded there is what
            `validate` and `report`'s latent check read: FLUX's `scaling_factor` and
            `shift_factor`, Wan's `normalisation` (this entry's `normalisation` record).
        normalisation: `module:function(vae_config)` giving the normalisation a dataset
            records, which `validate` compares with the layout's model.
        empty_encodings: Whether `encode` writes `empty_encodings/`: the text encoders' outputs
            for the empty caption (FLUX trainers' caption dropout), from its encoders'
            `encode_text([""])` pair (T5, pooled CLIP).
        decoder: `module:Class` made as `Class(model_path, manifest, token_file)`, turning what
            a layout's `preview` gives into RGB pixels for `preview --model-path`; None: the
            FLUX VAE decoder `preview` has.
    """

    name: str
    input_kind: Literal["image", "video"]
    encoders: str
    manifest: str
    normalisation: str
    empty_encodings: bool = False
    decoder: str | None = None

    def function(self, what: str) -> Any:
        """The object one of this entry's `module:name` fields names."""
        module, _, name = str(getattr(self, what)).partition(":")
        return getattr(importlib.import_module(module), name)


FLUX = ModelFamily("flux", "image", "shardcook.encoders.flux:FluxEncoders",
                   "shardcook.encoders.flux:flux_manifest",
                   "shardcook.encoders.flux:flux_normalisation", empty_encodings=True)
WAN = ModelFamily("wan", "video", "shardcook.encoders.wan:WanEncoders",
                  "shardcook.encoders.wan:wan_manifest",
                  "shardcook.encoders.wan:wan_normalisation",
                  decoder="shardcook.encoders.wan:WanDecoder")

#: Every model family, by registry name.
MODELS: dict[str, ModelFamily] = {model.name: model for model in (FLUX, WAN)}
