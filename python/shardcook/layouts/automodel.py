"""NeMo AutoModel's diffusion cache (`encode --layout automodel --model-type NAME`), as its
`tools/diffusion/preprocessing_multiprocess.py` writes it and its text-to-image and
text-to-video datasets read it: `<out>/<WxH>/<md5>.pt` (images; `.meta` for video), each a
`torch.save`d dict of the family's keys, `metadata_shard_NNNN.json` and `metadata.json`.

The run's shards hold the same files on their way there: each sample's `pt` part is the cache
file's bytes and its `json` part its metadata entry; finalize writes the cache from them, checks
it, records it in `.shardcook/automodel_cache.json` and then rewrites each shard with the
metadata entries alone, so the cache is on disk once while the run's records and shards stay
true for `status` and a rerun."""

from dataclasses import replace

from shardcook.layouts.base import NOT_COOKED, EncodeSpec, Layout
from shardcook.layouts.names import OURS_DIR

#: The `torch.save` bytes of one cache file (the family's `AutoModelCache.cache` dict).
CACHE_PART = "pt"
#: JSON object: `cache_name` (`WxH/<md5>.pt`, inside the cache) and `entry`, the cache file's
#: entry in AutoModel's metadata shards but for its `cache_file`.
ENTRY_PART = "json"
IMAGE_SUFFIX = ".pt"
VIDEO_SUFFIX = ".meta"
METADATA_FILE = "metadata.json"
#: What finalize records once the cache is written and checked, before it slims the shards.
CACHE_RECORD = f"{OURS_DIR}/automodel_cache.json"
#: Entries per metadata shard (the tool's `--shard_size` default).
METADATA_SHARD_SIZE = 10000


#: AutoModel's `--resolution_preset` names and their pixel budgets.
RESOLUTION_PRESETS = {"256p": 256 * 256, "512p": 512 * 512, "768p": 768 * 768,
                      "1024p": 1024 * 1024, "1536p": 1536 * 1536}


def metadata_shard_name(number: int) -> str:
    return f"metadata_shard_{number:04d}.json"


def for_family(spec: EncodeSpec, model: str, latent_mode: str) -> EncodeSpec:
    """The layout's encode spec for the family `--model-type` named (`model`): its encoders,
    and `latent_mode`, what its processor stores when `--latent-mode` is not given."""
    defaults = tuple((name, latent_mode if name == "latent_mode" else value)
                     for name, value in spec.defaults)
    return replace(spec, model=model, defaults=defaults)


AUTOMODEL = Layout(
    name="automodel",
    encoding="automodel",
    parts=(CACHE_PART, ENTRY_PART),
    required=(CACHE_PART, ENTRY_PART),
    finalized=(CACHE_RECORD, METADATA_FILE),
    # trainers read the cache through AutoModel's dataloaders, not the run's shards
    reading=NOT_COOKED,
    encode=EncodeSpec(
        # its job's processor builds each sample's parts, from the family's cache dict
        part_builder="shardcook.jobs.encode.automodel:AutoModelImageProcessor",
        summary="NeMo AutoModel's diffusion cache: WxH/<md5>.pt files and metadata.json, for "
                "the family --model-type names",
        # AutoModel's processors run in bf16; the latent mode is the family's (`for_family`)
        defaults=(("precision", "bf16"), ("latent_mode", "sample")),
        latent_modes=("sample", "mode"),
        latents_scaled=True,
        refusal="--latent-mode {latent_mode} is not for --layout automodel; it stores sample "
                "(AutoModel's draw, seeded per sample) or mode.",
        job="shardcook.jobs.encode.automodel:AutoModelJob",
        model_by_type=True,
    ),
)
