"""Conversations with images, videos and audio in Megatron-Bridge's ChatML layout
(`shardcook chatml`): the part names, the field_map of each media layout, and the sample check.

Bridge's `ChatMLWebdataset` reads `conversation` as a JSON string and decodes `imgs` (an image
part or a pickled list of JPEG bytes) and `videos` (a pickled list of videos, each a list of JPEG
frames) with its video handler; the `video.mp4` and `audio.<ext>` parts reach the trainer as
bytes. Its conversation reader accepts `{"conversations": [...]}`, so the per-sample media
record (counts, sizes, frame timestamps, audio duration) rides beside the turns in that object.
"""

from __future__ import annotations

import io
import json
import pickle
from collections.abc import Collection
from typing import Any

from shardcook.layouts.base import Layout, Reading

CONVERSATION_PART = "conversation.json"
#: A pickled list of image bytes (several images per sample).
MULTI_IMAGE_PART = "jpgs"
#: A pickled list of videos, each a list of JPEG frame bytes (`--video-layout frames`).
VIDEO_FRAMES_PART = "videos"
#: The names Bridge's video handler reads such a part under (`--video-frames-part`): `videos`,
#: or `mp4s` as Bridge's VALOR32K recipe names it (`field_map: {videos: mp4s}`).
VIDEO_FRAMES_PARTS = (VIDEO_FRAMES_PART, "mp4s")
#: One video file's bytes, unchanged (`--video-layout mp4`).
VIDEO_FILE_PART = "video.mp4"
#: Audio files are stored unchanged as `audio.<ext>`.
AUDIO_EXTENSIONS = ("wav", "flac", "mp3")
#: The key of the conversation.json object that holds the turns (Bridge's reader looks it up).
TURNS_KEY = "conversations"
#: The key of the conversation.json object that holds the sample's media record.
MEDIA_KEY = "media"
PICKLE_PROTOCOL = 4
SAMPLE_TYPE = "megatron.bridge.data.energon.task_encoder_utils:ChatMLWebdataset"


def audio_part(extension: str) -> str:
    """The part name of an audio file with `extension` (one of AUDIO_EXTENSIONS)."""
    return f"audio.{extension}"


def field_map(images: str | None, image_format: str, video_layout: str | None,
              audio_extension: str | None,
              frames_part: str = VIDEO_FRAMES_PART) -> dict[str, str]:
    """dataset.yaml's field_map.

    Args:
        images: `single` (one image part per sample), `multi` (a pickled list) or None (none).
        image_format: the single image part's format (`jpg` or `png`).
        video_layout: `frames`, `mp4` or None when the dataset has no video.
        audio_extension: the audio files' extension, or None when the dataset has no audio.
        frames_part: the frames part's name (one of VIDEO_FRAMES_PARTS).
    """
    fields: dict[str, str] = {}
    if images is not None:
        fields["imgs"] = f"image.{image_format}" if images == "single" else MULTI_IMAGE_PART
    if video_layout is not None:
        fields["videos"] = frames_part if video_layout == "frames" else VIDEO_FILE_PART
    if audio_extension is not None:
        fields["audio"] = audio_part(audio_extension)
    fields["conversation"] = CONVERSATION_PART
    return fields


def _one_of(found: list[str], what: str) -> str | None:
    if len(found) > 1:
        raise ValueError(f"its samples hold {' and '.join(found)}, and Megatron-Bridge's "
                         f"ChatMLWebdataset reads {what} from one part only")
    return found[0] if found else None


def field_map_of(part_names: Collection[str]) -> dict[str, str]:
    """The field_map of a dataset whose samples hold the parts `part_names`: what `field_map`
    gives for the image, video and audio layouts those parts are.

    Raises:
        ValueError: the parts hold one kind of media in two layouts (`image.jpg` and `jpgs`).
    """
    image = _one_of([p for p in ("image.jpg", "image.png", MULTI_IMAGE_PART)
                     if p in part_names], "images")
    video = _one_of([p for p in (*VIDEO_FRAMES_PARTS, VIDEO_FILE_PART) if p in part_names],
                    "videos")
    audio = _one_of([audio_part(ext) for ext in AUDIO_EXTENSIONS if audio_part(ext) in part_names],
                    "audio")
    return field_map(
        None if image is None else "multi" if image == MULTI_IMAGE_PART else "single",
        (image or "image.jpg").rpartition(".")[2],
        None if video is None else "mp4" if video == VIDEO_FILE_PART else "frames",
        None if audio is None else audio.partition(".")[2],
        video if video in VIDEO_FRAMES_PARTS else VIDEO_FRAMES_PART,
    )


def sample_json(turns: list[dict[str, Any]], media: dict[str, Any]) -> bytes:
    """conversation.json bytes: UTF-8, not ASCII-escaped, deterministic."""
    return json.dumps({TURNS_KEY: turns, MEDIA_KEY: media}, ensure_ascii=False).encode("utf-8")


def pickle_bytes_list(value: list[bytes] | list[list[bytes]]) -> bytes:
    """A `jpgs` or `videos` part: the list pickled with protocol 4 (no class inside)."""
    return pickle.dumps(value, protocol=PICKLE_PROTOCOL)


class _NoClasses(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:  # lists of bytes need no class
        raise pickle.UnpicklingError(f"a pickled media part may hold no {module}.{name}")


def _unpickle(data: bytes, part: str) -> Any:
    try:
        return _NoClasses(io.BytesIO(data)).load()
    except Exception as e:  # noqa: BLE001 (arbitrary bytes can fail anywhere in the unpickler)
        raise ValueError(f"the {part} part is not a pickled list of bytes ({e})") from None


def load_jpgs(data: bytes) -> list[bytes]:
    """A `jpgs` part -> its list of image bytes, refusing anything else (no class is loaded).

    Raises:
        ValueError: not a pickled list of bytes.
    """
    value = _unpickle(data, MULTI_IMAGE_PART)
    if not isinstance(value, list) or not all(isinstance(b, bytes) for b in value):
        raise ValueError("the jpgs part is not a list of bytes")
    return value


def load_videos(data: bytes, part: str = VIDEO_FRAMES_PART) -> list[list[bytes]]:
    """A `videos` (or `mp4s`) part -> its list of videos of JPEG frames, refusing anything else.

    Raises:
        ValueError: not a pickled list of lists of bytes.
    """
    value = _unpickle(data, part)
    if not isinstance(value, list) or not all(
            isinstance(v, list) and all(isinstance(f, bytes) for f in v) for v in value):
        raise ValueError(f"the {part} part is not a list of lists of bytes")
    return value


def turns_problem(data: bytes) -> str | None:
    """Why a conversation.json part holds no turns (it is a list of turns, or an object with
    them under `conversations`), or None."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as e:
        return f"is not UTF-8 JSON ({str(e).splitlines()[0]})"
    if isinstance(doc, list) or (isinstance(doc, dict) and isinstance(doc.get(TURNS_KEY), list)):
        return None
    return f"holds neither a list of turns nor {{{TURNS_KEY!r}: [...]}}"


#: The media parts a sample may carry; it has at least one of them.
MEDIA_PARTS = ("image.jpg", "image.png", MULTI_IMAGE_PART, *VIDEO_FRAMES_PARTS, VIDEO_FILE_PART,
               *(audio_part(ext) for ext in AUDIO_EXTENSIONS))

CHATML = Layout(
    name="chatml",
    encoding="chatml",
    parts=(*MEDIA_PARTS, CONVERSATION_PART),
    required=(MEDIA_PARTS, CONVERSATION_PART),
    sample_type=SAMPLE_TYPE,
    subflavored=False,
    reading=Reading(cooker=None, task_encoder=None,  # Bridge's ChatMLWebdataset reads it
                    checker="shardcook.dataset.check.samples:check_chatml"),
    field_map_from="shardcook.layouts.chatml:field_map_of",
)
