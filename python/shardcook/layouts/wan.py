"""Wan 2.1/2.2 pre-encoded clips as Megatron-Bridge's Wan recipe reads them (`encode --layout
wan`, read by Bridge's `WanTaskEncoder`): the normalised VAE latent `pth` [16, T', H/8, W/8],
the pickled UMT5 embedding `pickle` [226, D], and the metadata `json` that Bridge's
`prepare_dataset_wan.py` writes."""

from shardcook.layouts.base import EncodeSpec, Layout, Reading

#: `torch.save`d latent [16, 1 + (T-1)//4, H/8, W/8], `(z - latents_mean) / latents_std`.
LATENT_PART = "pth"
#: `pickle.dumps` of the UMT5 embedding [226, D], rows past the caption's length zero.
EMBEDDING_PART = "pickle"
#: JSON object: Bridge's fields (video_path, processed_frames, caption, ...) plus ours.
META_PART = "json"

WAN = Layout(
    name="wan",
    encoding="wan",
    parts=(LATENT_PART, EMBEDDING_PART, META_PART),
    required=(LATENT_PART, EMBEDDING_PART, META_PART),
    reading=Reading(checker="shardcook.dataset.check.samples:check_wan",
                    agreement="shardcook.dataset.check.samples:wan_agreement",
                    preview="shardcook.preview:wan_picture"),
    encode=EncodeSpec(
        part_builder="shardcook.jobs.encode.wan_parts:encoded_wan_parts",
        summary="Megatron-Bridge's Wan recipe: normalised video latent pth, pickled UMT5 "
                "embedding, json",
        defaults=(("precision", "fp32"), ("latent_mode", "mode")),  # as Bridge's script on CPU
        latent_modes=("mode", "sample"),  # Bridge's `--stochastic` off or on
        latents_scaled=True,  # normalised by the VAE config's latents_mean / latents_std
        refusal="--latent-mode {latent_mode} is not for --layout wan; it stores mode or sample.",
        model="wan",
    ),
)
