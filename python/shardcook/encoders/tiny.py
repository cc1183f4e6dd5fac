"""Tiny FLUX-layout encoders with random weights, for tests and `shardcook demo`.

These are DEMO WEIGHTS, not a real model: the architectures are the real diffusers/transformers
classes (AutoencoderKL, CLIPTextModel, T5EncoderModel) made tiny from configs, with seeded random
weights, and tokenizers built from a small local vocabulary. Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Written into the folder so nobody mistakes it for a real model.
LABEL = "DEMO WEIGHTS: tiny random-weight encoders built by shardcook; not a real FLUX model."

#: The tiny VAE's factors (deliberately not FLUX's, so tests see they are read from the config).
TINY_SCALING, TINY_SHIFT = 0.5, 0.25
TINY_LATENT_CHANNELS = 4
TINY_T5_DIM, TINY_CLIP_DIM = 32, 24


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2/CLIP's byte to printable-character table."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


def _clip_tokenizer(folder: Path) -> None:
    """A CLIP BPE tokenizer over single byte-characters (no merges)."""
    from transformers import CLIPTokenizer

    chars = list(_bytes_to_unicode().values())
    vocab: dict[str, int] = {}
    for c in chars:
        vocab[c] = len(vocab)
    for c in chars:
        vocab[c + "</w>"] = len(vocab)
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    tok = CLIPTokenizer(vocab=vocab, merges=[])
    tok.model_max_length = 77
    tok.save_pretrained(folder)


def _t5_tokenizer(folder: Path) -> None:
    """A T5-style unigram tokenizer (metaspace, </s> appended) trained on a few words."""
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    # transformers 5 keeps T5TokenizerFast as a lazy alias its type information does not declare
    from transformers import T5TokenizerFast  # type: ignore[attr-defined]

    words = ["a", "an", "the", "of", "on", "with", "and", "in", "red", "green", "blue", "yellow",
             "orange", "purple", "white", "black", "grey", "circle", "square", "triangle", "star",
             "stripe", "dot", "small", "large", "big", "photo", "picture", "image", "of",
             "background", "cat", "dog", "astronaut", "coffee", "rocket", "camera"]
    corpus = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(corpus, trainers.UnigramTrainer(
        vocab_size=200, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>"))
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    fast = T5TokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>",
                           unk_token="<unk>", extra_ids=0)
    fast.model_max_length = 512  # FLUX.1's tokenizer_2 declares it (AutoModel pads to it)
    fast.save_pretrained(folder)


def build_tiny_flux(root: str | Path, *, seed: int = 0) -> Path:
    """Writes tiny FLUX-layout encoders with random weights (seeded) under `root`; returns it.

    Layout: vae/ (AutoencoderKL, 4 latent channels, downsampling 8, scaling 0.5, shift 0.25),
    text_encoder/ + tokenizer/ (CLIPTextModel, hidden 24), text_encoder_2/ + tokenizer_2/
    (T5EncoderModel, d_model 32).
    """
    import torch

    # the full path: type checkers read diffusers' top-level name as a torch-less placeholder
    from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKL
    from transformers import CLIPTextConfig, CLIPTextModel, T5Config, T5EncoderModel

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=TINY_LATENT_CHANNELS,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(8, 8, 16, 16), layers_per_block=1, norm_num_groups=4,
        sample_size=64, scaling_factor=TINY_SCALING, shift_factor=TINY_SHIFT,
        use_quant_conv=False, use_post_quant_conv=False)
    vae.save_pretrained(root / "vae")
    _clip_tokenizer(root / "tokenizer")
    from transformers import AutoTokenizer

    clip_tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    clip = CLIPTextModel(CLIPTextConfig(
        vocab_size=len(clip_tok), hidden_size=TINY_CLIP_DIM, intermediate_size=48,
        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=77,
        projection_dim=TINY_CLIP_DIM, bos_token_id=clip_tok.bos_token_id,
        eos_token_id=clip_tok.eos_token_id, pad_token_id=clip_tok.pad_token_id))
    clip.save_pretrained(root / "text_encoder")
    _t5_tokenizer(root / "tokenizer_2")
    t5_tok = AutoTokenizer.from_pretrained(root / "tokenizer_2")
    t5 = T5EncoderModel(T5Config(
        vocab_size=len(t5_tok), d_model=TINY_T5_DIM, d_kv=8, d_ff=64, num_layers=2,
        num_heads=4, relative_attention_num_buckets=8, is_encoder_decoder=False,
        use_cache=False, pad_token_id=t5_tok.pad_token_id, eos_token_id=t5_tok.eos_token_id))
    t5.save_pretrained(root / "text_encoder_2")
    (root / "DEMO_WEIGHTS.txt").write_text(LABEL + "\n", encoding="utf-8")
    (root / "model_index.json").write_text(json.dumps(
        {"_class_name": "FluxPipeline", "_shardcook_note": LABEL}, indent=2), encoding="utf-8")
    return root


WAN_LABEL = "DEMO WEIGHTS: tiny random-weight encoders built by shardcook; not a real Wan model."
TINY_UMT5_DIM = 32


def build_tiny_wan(root: str | Path, *, seed: int = 0) -> Path:
    """Writes tiny Wan-layout encoders with random weights (seeded) under `root`; returns it.

    Layout: vae/ (AutoencoderKLWan, base dim 8, 16 latent channels, downsampling 8 in space and
    4 in time, latents_mean/std of its own, measured on seeded noise clips: not Wan's, so tests
    see they are read from the config), text_encoder/ (UMT5EncoderModel, d_model 32) +
    tokenizer/.
    """
    import torch
    from diffusers.models.autoencoders.autoencoder_kl_wan import AutoencoderKLWan
    from transformers import AutoTokenizer, UMT5Config, UMT5EncoderModel

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    channels = 16
    vae = AutoencoderKLWan(
        base_dim=8, z_dim=channels, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
        temperal_downsample=[False, True, True])
    # A real Wan VAE's latents_mean/std are its latents' statistics, which a latent check (the
    # report's) relies on; these random weights' are measured on seeded noise clips.
    clips = torch.rand(2, 3, 9, 64, 96, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    with torch.inference_mode():
        z = vae.encode(clips).latent_dist.mean.transpose(0, 1).reshape(channels, -1)
    vae.register_to_config(latents_mean=[round(float(v), 4) for v in z.mean(dim=1)],
                           latents_std=[round(float(v), 4) for v in z.std(dim=1)])
    vae.save_pretrained(root / "vae")
    _t5_tokenizer(root / "tokenizer")
    tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    umt5 = UMT5EncoderModel(UMT5Config(
        vocab_size=len(tok), d_model=TINY_UMT5_DIM, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, is_encoder_decoder=False, use_cache=False,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id))
    umt5.save_pretrained(root / "text_encoder")
    (root / "DEMO_WEIGHTS.txt").write_text(WAN_LABEL + "\n", encoding="utf-8")
    (root / "model_index.json").write_text(json.dumps(
        {"_class_name": "WanPipeline", "_shardcook_note": WAN_LABEL}, indent=2), encoding="utf-8")
    return root


QWEN_IMAGE_LABEL = ("DEMO WEIGHTS: tiny random-weight encoders built by shardcook; not a real "
                    "Qwen-Image model.")
TINY_QWEN_DIM = 32
#: The special tokens of Qwen2.5-VL's tokenizer that its prompt template and config name.
QWEN_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                       "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
#: Words whose last merge the tiny tokenizer leaves out, so the prompt template's system turn
#: is 34 tokens, as Qwen2.5-VL's own tokenizer makes it (the first tokens Qwen-Image drops).
_SPLIT_WORDS = ("Ġdetailing", "Ġrelationships", "Ġquantity")


def _qwen_tokenizer(folder: Path, template: str | None = None,
                    split_words: tuple[str, ...] = _SPLIT_WORDS) -> None:
    """A byte-level BPE tokenizer of Qwen2's class, trained on a prompt template (Qwen-Image's
    when None) around a few words, without the last merge of each of `split_words`."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    from shardcook.encoders.qwen_image import PROMPT_TEMPLATE

    words = ["a", "an", "the", "of", "on", "with", "and", "in", "red", "green", "blue", "yellow",
             "circle", "square", "triangle", "star", "photo", "picture", "cat", "dog",
             "astronaut", "coffee", "rocket", "camera", "white", "background"]
    template = template or PROMPT_TEMPLATE
    corpus = [template.format(" ".join(words[i:] + words[:i])) for i in range(len(words))]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=600, special_tokens=list(QWEN_SPECIAL_TOKENS), show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    trained = json.loads(tok.to_str())["model"]
    # pairs, which the tokenizer's BPE model takes (its annotation says strings)
    merges: list[Any] = [tuple(m) for m in trained["merges"] if "".join(m) not in split_words]
    qwen = Qwen2Tokenizer(vocab=trained["vocab"], merges=merges,
                          extra_special_tokens=list(QWEN_SPECIAL_TOKENS[1:]))
    qwen.save_pretrained(folder)


def build_tiny_qwen_image(root: str | Path, *, seed: int = 0) -> Path:
    """Writes a tiny Qwen-Image pipeline folder with random weights (seeded) under `root`, as
    diffusers' QwenImagePipeline loads it without its transformer; returns it.

    Layout: vae/ (AutoencoderKLQwenImage, base dim 8, 16 latent channels, downsampling 8,
    latents_mean/std of its own, measured on seeded noise images: not Qwen-Image's, so tests see
    they are read from the config), text_encoder/ (Qwen2_5_VLForConditionalGeneration, hidden 32,
    a one-block vision tower) + tokenizer/ (Qwen2Tokenizer), scheduler/, model_index.json.
    """
    import torch
    from diffusers.models.autoencoders.autoencoder_kl_qwenimage import AutoencoderKLQwenImage
    from diffusers.schedulers.scheduling_flow_match_euler_discrete import (
        FlowMatchEulerDiscreteScheduler,
    )
    from transformers import (
        AutoTokenizer,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
    )

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    channels = 16
    vae = AutoencoderKLQwenImage(base_dim=8, z_dim=channels, dim_mult=[1, 1, 1, 1],
                                 num_res_blocks=1, temperal_downsample=[False, True, True])
    images = torch.rand(4, 3, 1, 64, 96, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    with torch.inference_mode():
        z = vae.encode(images).latent_dist.mean.transpose(0, 1).reshape(channels, -1)
    vae.register_to_config(latents_mean=[round(float(v), 4) for v in z.mean(dim=1)],
                           latents_std=[round(float(v), 4) for v in z.std(dim=1)])
    vae.save_pretrained(root / "vae")
    _qwen_tokenizer(root / "tokenizer")
    tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    vocab = tok.get_vocab()
    ids = {t: vocab[t] for t in QWEN_SPECIAL_TOKENS}
    text = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tok), "hidden_size": TINY_QWEN_DIM, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
            "max_position_embeddings": 2048, "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
            # Qwen2.5-VL's rotary sections (time, height, width) fill half a head of 16
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6,
                                "mrope_section": [2, 3, 3]}},
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
                       "out_hidden_size": TINY_QWEN_DIM, "fullatt_block_indexes": [0]},
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"]))
    text.save_pretrained(root / "text_encoder")
    FlowMatchEulerDiscreteScheduler().save_pretrained(root / "scheduler")
    (root / "DEMO_WEIGHTS.txt").write_text(QWEN_IMAGE_LABEL + "\n", encoding="utf-8")
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "QwenImagePipeline", "_shardcook_note": QWEN_IMAGE_LABEL,
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "QwenImageTransformer2DModel"],
        "vae": ["diffusers", "AutoencoderKLQwenImage"]}, indent=2), encoding="utf-8")
    return root


LTX2_LABEL = "DEMO WEIGHTS: tiny random-weight encoders built by shardcook; not a real LTX-2 model."
TINY_GEMMA_DIM = 32
#: Gemma-3's special tokens, at its ids for pad, eos, bos, unk and mask; then its image tokens.
GEMMA_SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_image>",
                        "<end_of_image>", "<image_soft_token>")


def _gemma_tokenizer(folder: Path) -> None:
    """A BPE tokenizer of Gemma's class (spaces as "▁", bytes falling back to <0xNN>, <bos>
    first) trained on a few words."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    # transformers 5 keeps GemmaTokenizerFast as a lazy alias its type information lacks
    from transformers import GemmaTokenizerFast  # type: ignore[attr-defined]

    words = ["a", "an", "the", "of", "on", "with", "and", "in", "red", "green", "blue", "yellow",
             "square", "circle", "clip", "tall", "narrow", "wide", "sound", "tone", "cat", "dog",
             "video", "camera", "moving", "across", "background"]
    corpus = [" ".join(words[i:] + words[:i]) for i in range(len(words))]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, special_tokens=list(GEMMA_SPECIAL_TOKENS), show_progress=False))
    trained = json.loads(tok.to_str())["model"]
    vocab = dict(trained["vocab"])
    for b in range(256):  # byte fallback: a character outside the corpus is its UTF-8 bytes
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    # pairs, which the tokenizer's BPE model takes (its annotation says strings)
    merges: list[Any] = [tuple(m) for m in trained["merges"]]
    gemma = GemmaTokenizerFast(vocab=vocab, merges=merges, add_bos_token=True)
    gemma.model_max_length = 1024 * 1024
    gemma.save_pretrained(folder)


def build_tiny_ltx2(root: str | Path, *, seed: int = 0) -> Path:
    """Writes a tiny LTX-2 pipeline folder with random weights (seeded) under `root`, as
    diffusers' LTX2Pipeline keeps its encoders; returns it.

    Layout: vae/ (AutoencoderKLLTX2Video, 8 latent channels, downsampling 32 in space and 8 in
    time, scaling factor 0.75), audio_vae/ (AutoencoderKLLTX2Audio over 64 mel bins, 2 latent
    channels of 16 mel bins, 4x in time), each with per-channel latent statistics of its own in
    its weights, measured on seeded noise (not LTX-2's, so tests see they are applied);
    text_encoder/ (Gemma3ForConditionalGeneration, hidden 32, 2 layers, a one-layer vision
    tower) + tokenizer/ (GemmaTokenizerFast), connectors/ (LTX2TextConnectors as LTX-2.3 has
    them: one projection per stream, 128 learnable registers), model_index.json.
    """
    import torch
    from diffusers.models.autoencoders.autoencoder_kl_ltx2 import AutoencoderKLLTX2Video
    from diffusers.models.autoencoders.autoencoder_kl_ltx2_audio import AutoencoderKLLTX2Audio
    from diffusers.pipelines.ltx2.connectors import LTX2TextConnectors
    from transformers import AutoTokenizer, Gemma3Config, Gemma3ForConditionalGeneration

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    noise = torch.Generator().manual_seed(seed)
    vae = AutoencoderKLLTX2Video(
        latent_channels=8, block_out_channels=(8, 8, 8, 8), layers_per_block=(1, 1, 1, 1, 1),
        decoder_block_out_channels=(8, 8, 8), decoder_layers_per_block=(1, 1, 1, 1),
        scaling_factor=0.75)
    with torch.inference_mode():
        z = vae.encode(torch.rand(2, 3, 9, 64, 96, generator=noise) * 2 - 1).latent_dist.mode()
        z = z.transpose(0, 1).reshape(8, -1)
        vae.latents_mean.copy_(z.mean(dim=1))
        vae.latents_std.copy_(z.std(dim=1))
    vae.save_pretrained(root / "vae")
    audio = AutoencoderKLLTX2Audio(base_channels=32, latent_channels=2, ch_mult=(1, 1, 1),
                                   num_res_blocks=1)
    with torch.inference_mode():
        mel = torch.randn(2, 2, 41, 64, generator=noise) - 4  # about a quiet log-mel's values
        a = audio.encode(mel).latent_dist.mode()  # [B, C, L, M], stats per (C, M)
        a = a.permute(0, 2, 1, 3).reshape(-1, a.shape[1] * a.shape[3])
        audio.latents_mean.copy_(a.mean(dim=0))
        audio.latents_std.copy_(a.std(dim=0))
    audio.save_pretrained(root / "audio_vae")
    _gemma_tokenizer(root / "tokenizer")
    tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    vocab = tok.get_vocab()
    ids = {t: vocab[t] for t in GEMMA_SPECIAL_TOKENS}
    layers = 2
    gemma = Gemma3ForConditionalGeneration(Gemma3Config(
        text_config={"vocab_size": len(tok), "hidden_size": TINY_GEMMA_DIM,
                     "intermediate_size": 64, "num_hidden_layers": layers,
                     "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                     "max_position_embeddings": 2048, "sliding_window": 512,
                     "pad_token_id": ids["<pad>"], "bos_token_id": ids["<bos>"],
                     "eos_token_id": ids["<eos>"]},
        vision_config={"hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
                       "num_attention_heads": 2, "image_size": 28, "patch_size": 14},
        mm_tokens_per_image=4, image_token_index=ids["<image_soft_token>"],
        boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"]))
    gemma.save_pretrained(root / "text_encoder")
    LTX2TextConnectors(
        caption_channels=TINY_GEMMA_DIM, text_proj_in_factor=layers + 1,
        video_connector_num_attention_heads=2, video_connector_attention_head_dim=16,
        video_connector_num_layers=1, audio_connector_num_attention_heads=2,
        audio_connector_attention_head_dim=8, audio_connector_num_layers=1,
        per_modality_projections=True, video_hidden_dim=32, audio_hidden_dim=16,
    ).save_pretrained(root / "connectors")
    (root / "DEMO_WEIGHTS.txt").write_text(LTX2_LABEL + "\n", encoding="utf-8")
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "LTX2Pipeline", "_shardcook_note": LTX2_LABEL,
        "audio_vae": ["diffusers", "AutoencoderKLLTX2Audio"],
        "connectors": ["ltx2", "LTX2TextConnectors"],
        "text_encoder": ["transformers", "Gemma3ForConditionalGeneration"],
        "tokenizer": ["transformers", "GemmaTokenizerFast"],
        "vae": ["diffusers", "AutoencoderKLLTX2Video"]}, indent=2), encoding="utf-8")
    return root


HUNYUAN_VIDEO_LABEL = ("DEMO WEIGHTS: tiny random-weight encoders built by shardcook; not a real "
                       "HunyuanVideo-1.5 model.")
TINY_BYT5_DIM, TINY_SIGLIP_DIM, TINY_SIGLIP_SIZE = 24, 16, 32
#: Qwen2.5-VL's chat template, which HunyuanVideo-1.5's prompt encoding applies.
QWEN_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def build_tiny_hunyuan_video(root: str | Path, *, seed: int = 0) -> Path:
    """Writes a tiny HunyuanVideo-1.5 image-to-video pipeline folder with random weights
    (seeded) under `root`, as diffusers' HunyuanVideo15ImageToVideoPipeline loads it without
    its transformer; returns it.

    Layout: vae/ (AutoencoderKLHunyuanVideo15, 4 latent channels, downsampling 16 in space and
    4 in time, scaling 0.75: not the real one's, so tests see it is read from the config),
    text_encoder/ (Qwen2_5_VLTextModel, hidden 32) + tokenizer/ (Qwen2Tokenizer with Qwen2.5-VL's
    chat template; the pipeline's system turn is 108 tokens, as with the real tokenizer),
    text_encoder_2/ (T5EncoderModel, d_model 24) + tokenizer_2/ (ByT5Tokenizer), image_encoder/
    (SiglipVisionModel, 32-pixel images in 8-pixel patches: 16 tokens of 16) +
    feature_extractor/ (SiglipImageProcessor), scheduler/, guider/, model_index.json.
    """
    import torch
    from diffusers.guiders.classifier_free_guidance import ClassifierFreeGuidance
    from diffusers.models.autoencoders.autoencoder_kl_hunyuanvideo15 import (
        AutoencoderKLHunyuanVideo15,
    )
    from diffusers.schedulers.scheduling_flow_match_euler_discrete import (
        FlowMatchEulerDiscreteScheduler,
    )
    from transformers import (
        AutoTokenizer,
        ByT5Tokenizer,
        Qwen2_5_VLTextConfig,
        Qwen2_5_VLTextModel,
        SiglipVisionConfig,
        SiglipVisionModel,
        T5Config,
        T5EncoderModel,
    )
    from transformers.models.siglip.image_processing_pil_siglip import SiglipImageProcessorPil

    from shardcook.encoders.hunyuan_video import SYSTEM_MESSAGE

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    AutoencoderKLHunyuanVideo15(latent_channels=TINY_LATENT_CHANNELS,
                                block_out_channels=(8, 8, 8, 8, 8), layers_per_block=1,
                                scaling_factor=0.75).save_pretrained(root / "vae")
    _qwen_tokenizer(root / "tokenizer", "<|im_start|>system\n" + SYSTEM_MESSAGE +
                    "<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n", ())
    tok = AutoTokenizer.from_pretrained(root / "tokenizer")
    tok.chat_template = QWEN_CHAT_TEMPLATE
    tok.save_pretrained(root / "tokenizer")
    vocab = tok.get_vocab()
    Qwen2_5_VLTextModel(Qwen2_5_VLTextConfig(
        vocab_size=len(tok), hidden_size=TINY_QWEN_DIM, intermediate_size=64,
        num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=2048, bos_token_id=vocab["<|endoftext|>"],
        eos_token_id=vocab["<|im_end|>"], pad_token_id=vocab["<|endoftext|>"],
        rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                         "mrope_section": [2, 3, 3]})).save_pretrained(root / "text_encoder")
    byt5 = ByT5Tokenizer()
    byt5.save_pretrained(root / "tokenizer_2")
    T5EncoderModel(T5Config(
        vocab_size=len(byt5), d_model=TINY_BYT5_DIM, d_kv=8, d_ff=48, num_layers=2, num_heads=3,
        relative_attention_num_buckets=8, is_encoder_decoder=False, use_cache=False,
        feed_forward_proj="gated-gelu", pad_token_id=byt5.pad_token_id,
        eos_token_id=byt5.eos_token_id)).save_pretrained(root / "text_encoder_2")
    SiglipVisionModel(SiglipVisionConfig(
        hidden_size=TINY_SIGLIP_DIM, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, image_size=TINY_SIGLIP_SIZE, patch_size=8)
    ).save_pretrained(root / "image_encoder")
    SiglipImageProcessorPil(size={"height": TINY_SIGLIP_SIZE, "width": TINY_SIGLIP_SIZE}
                            ).save_pretrained(root / "feature_extractor")
    FlowMatchEulerDiscreteScheduler(shift=7.0).save_pretrained(root / "scheduler")
    ClassifierFreeGuidance(guidance_scale=6.0).save_pretrained(root / "guider")
    (root / "DEMO_WEIGHTS.txt").write_text(HUNYUAN_VIDEO_LABEL + "\n", encoding="utf-8")
    (root / "model_index.json").write_text(json.dumps({
        "_class_name": "HunyuanVideo15ImageToVideoPipeline",
        "_shardcook_note": HUNYUAN_VIDEO_LABEL,
        "feature_extractor": ["transformers", "SiglipImageProcessor"],
        "guider": ["diffusers", "ClassifierFreeGuidance"],
        "image_encoder": ["transformers", "SiglipVisionModel"],
        "scheduler": ["diffusers", "FlowMatchEulerDiscreteScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLTextModel"],
        "text_encoder_2": ["transformers", "T5EncoderModel"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "tokenizer_2": ["transformers", "ByT5Tokenizer"],
        "transformer": ["diffusers", "HunyuanVideo15Transformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLHunyuanVideo15"]}, indent=2), encoding="utf-8")
    return root
