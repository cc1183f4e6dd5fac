"""Model FLOPs per sample of each encoder `encode` runs, for MFU (the FLOP/s achieved over a
device's peak).

torch's FlopCounterMode counts one forward at the run's shapes on the meta device, where tensors
have shapes but no data: no memory, no weights read, no GPU, a second or two on a CPU. It counts
matrix products, convolutions and attention, 2 FLOPs per multiply-add, and not normalisations or
activations (the usual "model FLOPs"). For a VAE only `encode` is counted (its encoder and quant
conv), which is all `encode` runs of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def on_meta(model: torch.nn.Module) -> torch.nn.Module:
    """`model` when its weights are on the meta device, else the same architecture built there
    from its config (the model itself is left as it is)."""
    import torch

    if all(p.is_meta for p in model.parameters()):
        return model
    cls: Any = type(model)
    with torch.device("meta"):
        if hasattr(cls, "from_config"):  # diffusers' models
            copy: torch.nn.Module = cls.from_config(model.config)
        else:  # transformers' take their config object
            copy = cls(model.config)
    return copy


def meta_encoders(folder: str | Path, model: str) -> dict[str, torch.nn.Module]:
    """Each encoder of a FLUX-layout (`model` "flux") or Wan-layout ("wan") folder built on the
    meta device from its config.json, keyed as `flux_flops` / `wan_flops` take them."""
    import torch
    from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKL
    from diffusers.models.autoencoders.autoencoder_kl_wan import AutoencoderKLWan
    from transformers import CLIPTextModel, T5EncoderModel, UMT5EncoderModel

    from shardcook.encoders.loading import FLUX_LAYOUT
    from shardcook.encoders.wan import WAN_LAYOUT

    families: dict[str, tuple[dict[str, Any], dict[str, tuple[str, str | None]]]] = {
        "flux": ({"vae": AutoencoderKL, "clip": CLIPTextModel, "t5": T5EncoderModel},
                 FLUX_LAYOUT),
        "wan": ({"vae": AutoencoderKLWan, "umt5": UMT5EncoderModel}, WAN_LAYOUT)}
    classes, layout = families[model]
    built: dict[str, torch.nn.Module] = {}
    with torch.device("meta"):
        for name, cls in classes.items():
            config = Path(folder) / layout[name][0]
            if hasattr(cls, "load_config"):  # diffusers' models
                built[name] = cls.from_config(cls.load_config(config))
            else:
                built[name] = cls(cls.config_class.from_pretrained(config))
    return built


def count_flops(call: Callable[[], object]) -> int:
    """The FLOPs FlopCounterMode counts while `call` runs."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        call()
    return int(counter.get_total_flops())


def vae_encode_flops(vae: torch.nn.Module, shape: tuple[int, ...], batch: int = 1) -> int:
    """FLOPs per sample of `vae.encode` on a batch of `batch` RGB inputs of `shape`: (height,
    width) for an image VAE (AutoencoderKL), (frames, height, width) for a video VAE
    (AutoencoderKLWan)."""
    import torch

    meta: Any = on_meta(vae)
    x = torch.zeros((batch, 3, *shape), dtype=next(meta.parameters()).dtype, device="meta")
    return count_flops(lambda: meta.encode(x)) // batch


def text_encoder_flops(encoder: torch.nn.Module, tokens: int, batch: int = 1) -> int:
    """FLOPs per sample of a text encoder's forward (T5, UMT5, CLIP) on a batch of `batch`
    captions padded to `tokens` tokens."""
    import torch

    meta = on_meta(encoder)
    ids = torch.zeros((batch, tokens), dtype=torch.long, device="meta")
    return count_flops(lambda: meta(ids)) // batch


def flux_flops(encoders: Mapping[str, torch.nn.Module], image_size: int, t5_tokens: int
               ) -> dict[str, int]:
    """FLOPs per sample of FLUX's encoders ("vae", "t5", "clip", as `meta_encoders` keys them)
    at `image_size` x `image_size` pixels and T5 padded to `t5_tokens` (CLIP's 77)."""
    from shardcook.encoders.flux import CLIP_MAX_LENGTH

    return {"vae": vae_encode_flops(encoders["vae"], (image_size, image_size)),
            "t5": text_encoder_flops(encoders["t5"], t5_tokens),
            "clip": text_encoder_flops(encoders["clip"], CLIP_MAX_LENGTH)}


def wan_flops(encoders: Mapping[str, torch.nn.Module], frames: int, height: int, width: int
              ) -> dict[str, int]:
    """FLOPs per sample of Wan's encoders ("vae", "umt5") on a clip of `frames` x `height` x
    `width` and its caption padded to 226 tokens."""
    from shardcook.encoders.wan import TEXT_LENGTH

    return {"vae": vae_encode_flops(encoders["vae"], (frames, height, width)),
            "umt5": text_encoder_flops(encoders["umt5"], TEXT_LENGTH)}
