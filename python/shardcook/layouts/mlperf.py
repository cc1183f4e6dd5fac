"""MLPerf Training Flux.1's pre-encoded samples (`encoding: preencoded_numpy`), as MLCommons
publishes CC12M/COCO and as Primus's `data diffusion-ingest` writes them: each tensor a bfloat16
array stored as the `.npy` bytes of uint16, and a json sidecar with the `key` and, on the
validation split, the `timestep` (an integer in [0, 8): the sample is evaluated at t/8)."""

from shardcook.layouts.base import EncodeSpec, Layout, Reading

T5_PART = "t5.bytes"
CLIP_PART = "clip.bytes"
MEAN_PART = "mean.bytes"
LOGVAR_PART = "logvar.bytes"
JSON_PART = "json"
#: The tensor parts, in writing order.
TENSOR_PARTS = (T5_PART, CLIP_PART, MEAN_PART, LOGVAR_PART)
#: The rank of each tensor part: T5 `[L, D]`, CLIP pooled `[D]`, posterior `[C, H, W]`.
TENSOR_RANKS = {T5_PART: 2, CLIP_PART: 1, MEAN_PART: 3, LOGVAR_PART: 3}
#: The MLCommons Arrow column each part comes from (Primus's `ARROW_COLUMNS` order).
ARROW_COLUMNS = {T5_PART: "t5_encodings", CLIP_PART: "clip_encodings", MEAN_PART: "mean",
                 LOGVAR_PART: "logvar"}
KEY_COLUMN = "__key__"
TIMESTEP_COLUMN = "timestep"
#: Validation timesteps are 0..7 (sigma = t / 8).
TIMESTEPS = 8
#: FLUX.1's VAE factors, which MLPerf's training applies to latents drawn from mean/logvar.
FLUX_SCALING_FACTOR = 0.3611
FLUX_SHIFT_FACTOR = 0.1159

MLPERF = Layout(
    name="mlperf",
    encoding="preencoded_numpy",
    parts=(*TENSOR_PARTS, JSON_PART),
    required=(*TENSOR_PARTS, JSON_PART),
    split_folders=True,
    reading=Reading(
        cooker="shardcook.energon.mlperf:cook_preencoded_numpy_diffusion",
        task_encoder="shardcook.energon:EncodedDiffusionTaskEncoder",
        task_encoder_options=("resample_latents",),
        checker="shardcook.dataset.check.npyparts:check_mlperf",
        split_checker="shardcook.dataset.check.npyparts:check_mlperf_split",
        timesteps="shardcook.dataset.check.npyparts:timestep_histogram",
        preview="shardcook.preview:mlperf_picture",
    ),
    encode=EncodeSpec(
        part_builder="shardcook.jobs.encode.mlperf_parts:encoded_mlperf_parts",
        summary="MLPerf Flux.1's preencoded_numpy: bf16 as uint16 .npy, the VAE posterior, json",
        defaults=(("precision", "bf16"), ("latent_mode", "resample")),  # as MLCommons's data
        latent_modes=("resample",),
        latents_scaled=False,  # the posterior mean is stored unscaled
        stored_dtypes=("bf16",),
        refusal=("--layout mlperf stores the posterior in bfloat16, as MLCommons's data: use "
                 "--latent-mode resample and bf16 (--precision or --stored-dtype)."),
    ),
)
