"""Image + conversation samples in Megatron-Bridge's ChatML layout (`shardcook chatml`)."""

from shardcook.layouts.base import Layout

CONVERSATION_PART = "conversation.json"
#: A pickled list of image bytes (several images per sample).
MULTI_IMAGE_PART = "jpgs"

CHATML = Layout(
    name="chatml",
    encoding="chatml",
    parts=("image.jpg", CONVERSATION_PART),
    required=(("image.jpg", "image.png", MULTI_IMAGE_PART), CONVERSATION_PART),
    sample_type="megatron.bridge.data.energon.task_encoder_utils:ChatMLWebdataset",
    subflavored=False,
)
