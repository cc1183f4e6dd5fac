"""FLUX pre-encoded samples as Primus writes and reads them (the default `encode` layout).

Only the three tensors are required: Primus's own writer emits no `meta.json`, a sample without
`caption.txt` reads as caption "", and resample datasets add the posterior (`mean.pth`,
`logvar.pth`).
"""

from shardcook.layouts.base import EncodeSpec, Layout, Reading

#: The unscaled VAE posterior, stored per sample by `--latent-mode resample`.
POSTERIOR_PARTS = ("mean.pth", "logvar.pth")

PREENCODED = Layout(
    name="primus",
    encoding="preencoded",
    parts=("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth", "caption.txt",
           "meta.json"),
    required=("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth"),
    reading=Reading(
        cooker="shardcook.energon.cookers:cook_preencoded_diffusion",
        reads_unmarked=True,
        task_encoder="shardcook.energon:EncodedDiffusionTaskEncoder",
        task_encoder_options=("resample_latents",),
        posterior_parts=POSTERIOR_PARTS,
        checker="shardcook.dataset.check.samples:check_preencoded",
        agreement="shardcook.dataset.check.samples:preencoded_agreement",
        preview="shardcook.preview:preencoded_picture",
    ),
    encode=EncodeSpec(
        part_builder="shardcook.jobs.encode.primus_parts:primus_parts",
        summary="scaled latents, one .pth per tensor",
        defaults=(("precision", "bf16"), ("latent_mode", "sample")),
        latent_modes=("sample", "mode", "resample"),
        latents_scaled=True,
    ),
)
