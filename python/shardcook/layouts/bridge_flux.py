"""FLUX pre-encoded samples as Megatron-Bridge's FLUX recipe reads them (`encode --layout
megatron-bridge`): the unscaled VAE latent `pth`, a pickled dict of the two text embeddings
`pickle`, and the metadata `json` that Bridge's `prepare_energon_dataset_flux.py` writes."""

from shardcook.layouts.base import EncodeSpec, Layout, Reading

#: `torch.save`d VAE latent [C, H/8, W/8], unscaled (no shift/scaling factor applied).
LATENT_PART = "pth"
#: `pickle.dumps({PROMPT_EMBEDS: [L, D_t5], POOLED_PROMPT_EMBEDS: [D_clip]})`.
EMBEDDINGS_PART = "pickle"
#: JSON object: Bridge's fields (processed_height, processed_width, caption, ...) plus ours.
META_PART = "json"
PROMPT_EMBEDS = "prompt_embeds"
POOLED_PROMPT_EMBEDS = "pooled_prompt_embeds"

BRIDGE_FLUX = Layout(
    name="megatron-bridge",
    encoding="bridge-flux",
    parts=(LATENT_PART, EMBEDDINGS_PART, META_PART),
    required=(LATENT_PART, EMBEDDINGS_PART, META_PART),
    reading=Reading(
        cooker="shardcook.energon.cookers:cook_bridge_flux",
        reads_unmarked=True,
        task_encoder="shardcook.energon:BridgeFluxTaskEncoder",
        checker="shardcook.dataset.check.samples:check_bridge_flux",
        agreement="shardcook.dataset.check.samples:bridge_flux_agreement",
        preview="shardcook.preview:bridge_flux_picture",
    ),
    encode=EncodeSpec(
        part_builder="shardcook.jobs.encode.bridge_parts:encoded_bridge_parts",
        summary="Megatron-Bridge's FLUX recipe: unscaled latent pth, pickled embeddings, json",
        defaults=(("precision", "fp32"), ("latent_mode", "mode")),  # as Bridge's script
        latent_modes=("mode", "sample"),  # Bridge's `--stochastic` off or on
        latents_scaled=False,
        refusal=("--latent-mode {latent_mode} is for --layout primus; megatron-bridge stores "
                 "one latent: mode or sample."),
        encoder_facts=(("latents_scaled", False), ("t5_attention_mask", True)),
    ),
)
