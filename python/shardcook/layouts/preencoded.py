"""FLUX pre-encoded samples as Primus writes and reads them (the default `encode` layout)."""

from shardcook.layouts.base import Layout

PREENCODED = Layout(
    name="primus",
    encoding="preencoded",
    parts=("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth", "caption.txt",
           "meta.json"),
    required=("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth", "caption.txt",
              "meta.json"),
    cooker="shardcook.energon.cookers:cook_preencoded_diffusion",
    checker="shardcook.dataset.samplecheck:check_preencoded",
)
