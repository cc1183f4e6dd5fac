"""FLUX.1's and Wan 2.1's encoders at their real size with random weights, built from the public
configs' shapes: the real models' arithmetic without a download. The GPU bench saves them and
times them; built under `with torch.device("meta")` they cost no memory, which is how the FLOP
counts (`encoders/flops.py`) are checked against the real models'.

Each function builds on torch's current device and keys the models as the encoders classes do
(`loading.FLUX_LAYOUT`, `wan.WAN_LAYOUT`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def flux_encoders() -> dict[str, torch.nn.Module]:
    """FLUX.1's VAE (16 latent channels, blocks 128/256/512/512), CLIP-L's text encoder (768, 12
    layers) and T5-XXL's encoder (d_model 4096, 24 layers)."""
    # the full path: type checkers read diffusers' top-level name as a torch-less placeholder
    from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKL
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    return {
        "vae": AutoencoderKL(
            in_channels=3, out_channels=3, latent_channels=16,
            down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512),
            layers_per_block=2, scaling_factor=0.3611, shift_factor=0.1159,
            use_quant_conv=False, use_post_quant_conv=False, sample_size=1024),
        "clip": CLIPTextModel(CLIPTextConfig(
            vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
            num_attention_heads=12, max_position_embeddings=77, projection_dim=768,
            hidden_act="quick_gelu")),
        "t5": T5EncoderModel(T5Config(
            vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
            feed_forward_proj="gated-gelu", is_encoder_decoder=False, use_cache=False)),
    }


def wan_encoders() -> dict[str, torch.nn.Module]:
    """Wan 2.1's VAE (`AutoencoderKLWan`'s default config: base dim 96, 16 latent channels) and
    UMT5-XXL's encoder (d_model 4096, 24 layers)."""
    from diffusers.models.autoencoders.autoencoder_kl_wan import AutoencoderKLWan
    from transformers import UMT5Config, UMT5EncoderModel

    return {
        "vae": AutoencoderKLWan(),
        "umt5": UMT5EncoderModel(UMT5Config(
            vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
            feed_forward_proj="gated-gelu", relative_attention_num_buckets=32,
            is_encoder_decoder=False, use_cache=False)),
    }
