"""Tiny FLUX.2-layout models with random weights: the real diffusers/transformers classes
(AutoencoderKLFlux2, Mistral3ForConditionalGeneration, a Mistral tokenizer) made tiny from configs,
in the folder layout `Flux2Pipeline.from_pretrained` reads (model_index.json, scheduler/, vae/,
text_encoder/, tokenizer/). Nothing is downloaded.

The VAE's batch norm holds running statistics far from the identity (means around +-1, variances
from 0.05 to 3), so a latent normalised the wrong way, or not at all, differs from the
reference's."""

from __future__ import annotations

import json
from pathlib import Path

LABEL = "DEMO WEIGHTS: tiny random-weight FLUX.2 models built by shardcook's tests."
#: The tiny VAE's latent channels (FLUX.2's has 32): the stored latents have 4 times as many.
TINY_LATENT_CHANNELS = 8
#: Mistral's hidden size here; the stored text has 3 times as many (layers 10, 20 and 30).
TINY_HIDDEN = 16
#: More than 30 layers, so all three layers read are intermediate ones, as in Mistral Small.
TINY_LAYERS = 32
#: Mistral's padding side in this folder: not the tokenizer default, so an encoder that pads on
#: its own side rather than the folder's does not match the reference.
TINY_PADDING_SIDE = "left"

SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]",
           "[/SYSTEM_PROMPT]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]

#: Mistral Small's chat template in short: the system prompt and each user turn in their tags.
CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['content'] is string %}{%- set text = message['content'] %}"
    "{%- else %}{%- set text = message['content'] | selectattr('type', 'equalto', 'text') "
    "| map(attribute='text') | join('') %}{%- endif %}"
    "{%- if message['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + text + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'user' %}{{- '[INST]' + text + '[/INST]' }}"
    "{%- else %}{{- text + eos_token }}{%- endif %}"
    "{%- endfor %}")


def _tokenizer(folder: Path) -> int:
    """A byte-level tokenizer (one token a byte, as Tekken falls back to) with the chat
    template; returns the [IMG] token's id. FLUX.2's folder holds a PixtralProcessor, which needs
    torchvision for its image half; `AutoProcessor` loads this tokenizer alone, and text-only
    conversations never reach the image half."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_chars = pre_tokenizers.ByteLevel.alphabet()
    vocab = {token: i for i, token in enumerate(SPECIAL + sorted(byte_chars))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
        pad_token="<pad>", padding_side=TINY_PADDING_SIDE, model_max_length=131072)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(folder)
    return int(vocab["[IMG]"])


def build_tiny_flux2(root: str | Path, *, seed: int = 0) -> Path:
    """Writes the tiny FLUX.2 models (seeded) under `root`; returns it."""
    import torch
    from diffusers import AutoencoderKLFlux2, FlowMatchEulerDiscreteScheduler
    from transformers import (
        Mistral3Config,
        Mistral3ForConditionalGeneration,
        MistralConfig,
        PixtralVisionConfig,
    )

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    vae = AutoencoderKLFlux2(
        block_out_channels=(8, 8, 16, 16), layers_per_block=1, norm_num_groups=4,
        latent_channels=TINY_LATENT_CHANNELS, sample_size=64)
    stats = torch.Generator().manual_seed(seed + 1)
    channels = vae.bn.num_features
    with torch.no_grad():
        vae.bn.running_mean.copy_(torch.rand(channels, generator=stats) * 2 - 1)
        vae.bn.running_var.copy_(0.05 + torch.rand(channels, generator=stats) * 2.95)
    vae.save_pretrained(root / "vae")
    image_token = _tokenizer(root / "tokenizer")
    vocab = len(json.loads((root / "tokenizer" / "tokenizer.json").read_text("utf-8"))[
        "model"]["vocab"]) + 8
    text = MistralConfig(
        vocab_size=vocab, hidden_size=TINY_HIDDEN, intermediate_size=32,
        num_hidden_layers=TINY_LAYERS, num_attention_heads=2, num_key_value_heads=1, head_dim=8,
        max_position_embeddings=1024, pad_token_id=3, bos_token_id=1, eos_token_id=2)
    vision = PixtralVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, image_size=64, patch_size=8)
    mistral = Mistral3ForConditionalGeneration(Mistral3Config(
        text_config=text, vision_config=vision, image_token_index=image_token,
        spatial_merge_size=1))
    mistral.save_pretrained(root / "text_encoder")
    FlowMatchEulerDiscreteScheduler(shift=3.0).save_pretrained(root / "scheduler")
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "Flux2Pipeline", "_shardcook_note": LABEL,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Mistral3ForConditionalGeneration"],
        "tokenizer": ["transformers", "PreTrainedTokenizerFast"],
        "transformer": ["diffusers", "Flux2Transformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLFlux2"]}, indent=2), encoding="utf-8")
    (root / "DEMO_WEIGHTS.txt").write_text(LABEL + "\n", encoding="utf-8")
    return root
