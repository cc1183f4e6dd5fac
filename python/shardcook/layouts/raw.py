"""Decoded, oriented, resized images with captions (`shardcook raw`); `meta.json` optional."""

from shardcook.layouts.base import Layout, Reading

#: Image part names a raw sample may carry, in the order they are looked for.
IMAGE_PARTS = ("jpg", "jpeg", "png", "webp")

RAW = Layout(
    name="raw",
    encoding="raw",
    parts=("jpg", "txt", "meta.json"),
    required=(IMAGE_PARTS, "txt"),
    reading=Reading(
        cooker="shardcook.energon.cookers:cook_raw_images",
        cooker_options=("image_format",),
        reads_unmarked=True,
        task_encoder="shardcook.energon:RawDiffusionTaskEncoder",
        task_encoder_options=("image_format",),
        preview="shardcook.preview:raw_picture",
    ),
)
