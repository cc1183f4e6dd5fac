"""Image + conversation samples in Megatron-Bridge's ChatML layout (`shardcook chatml`)."""

from __future__ import annotations

import io
import pickle

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
    checker="shardcook.dataset.samplecheck:check_chatml",
)


class _BytesListUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:  # a list of bytes needs no class
        raise pickle.UnpicklingError(f"the jpgs part may only hold bytes, not {module}.{name}")


def load_jpgs(data: bytes) -> list[bytes]:
    """A `jpgs` part -> its list of image bytes, refusing anything else (no class is loaded).

    Raises:
        ValueError: not a pickled list of bytes.
    """
    try:
        value = _BytesListUnpickler(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 (arbitrary bytes can fail anywhere in the unpickler)
        raise ValueError(f"the jpgs part is not a pickled list of bytes ({e})") from None
    if not isinstance(value, list) or not all(isinstance(b, bytes) for b in value):
        raise ValueError("the jpgs part is not a list of bytes")
    return value
