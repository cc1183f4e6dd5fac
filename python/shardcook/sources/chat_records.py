"""One chat input as found in a JSONL line or a Hugging Face row: its id, media references
(paths or bytes) and conversation turns, or the reason it cannot be used.

A record names its media like this: `images`/`image`, `videos`/`video` and `audio` (a reference
or a list of them; a reference is a path, bytes, `{"bytes", "path"}` or a decoded PIL image). Its
conversation is `--conversation-column` (default: conversation, messages or conversations), or
is built from `--question-column` and `--answer-column`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardcook.config import ChatmlConfig
from shardcook.conversations import (
    MEDIA_KINDS,
    ConversationError,
    count_media,
    find_conversation,
    normalize,
    question_answer,
)
from shardcook.errors import SkipReason
from shardcook.sources.folder import OutsideFolder

if TYPE_CHECKING:
    from shardcook.sources.folder import Folder

#: A medium: bytes, or a path to read them from.
MediaRef = bytes | str
#: Record keys naming each kind of medium, in the order they are looked up.
MEDIA_KEYS = {"image": ("images", "image"), "video": ("videos", "video"), "audio": ("audio",)}


@dataclass
class ChatRecord:
    """One input: its id, its media references by kind, its normalized turns, or a skip."""

    id: str
    source: str
    media: dict[str, list[MediaRef]] = field(default_factory=dict)
    turns: list[dict[str, Any]] | None = None
    skip: SkipReason | None = None
    detail: str | None = None


def media_ref(entry: Any, base: Folder | None) -> MediaRef:
    """A media reference -> bytes or a path or URL (a name resolves in folder `base`: see
    `Folder.locate`).

    Raises:
        OutsideFolder: a name leads out of a folder in object storage.
        ValueError: neither a path nor bytes.
    """
    if isinstance(entry, dict):
        entry = entry.get("bytes") or entry.get("path")
    if isinstance(entry, (bytes, bytearray)):
        return bytes(entry)
    if hasattr(entry, "save"):  # a decoded PIL image
        buf = io.BytesIO()
        entry.save(buf, format="PNG")
        return buf.getvalue()
    if isinstance(entry, str) and entry:
        return str(Path(entry)) if base is None else base.locate(entry)
    raise ValueError(f"media entry {entry!r} is neither a path nor bytes")


def media_field(obj: Mapping[str, Any], kind: str, column: str | None = None) -> Any:
    """The value naming a record's media of `kind` (`column` for images when given), or None."""
    keys = (column,) if kind == "image" and column else MEDIA_KEYS[kind]
    return next((obj[k] for k in keys if obj.get(k) is not None), None)


def build(rid: str, source: str, obj: Mapping[str, Any], media: Mapping[str, Any],
          opts: ChatmlConfig, base: Folder | None) -> ChatRecord:
    """A ChatRecord from a record's fields and its media values by kind (see `media_field`);
    a skip says why it cannot be used."""
    rec = ChatRecord(rid, source)
    for kind in MEDIA_KINDS:
        value = media.get(kind)
        entries = [] if value is None else value if isinstance(value, (list, tuple)) else [value]
        try:
            rec.media[kind] = [media_ref(e, base) for e in entries]
        except OutsideFolder as e:
            rec.skip, rec.detail = "media_outside_folder", str(e)
            return rec
        except ValueError as e:
            rec.skip, rec.detail = "missing_image", str(e)
            return rec
    counts = {kind: len(refs) for kind, refs in rec.media.items()}
    try:
        if opts.question_column is not None:
            rec.turns = question_answer(obj.get(opts.question_column),
                                        obj.get(opts.answer_column or ""), counts,
                                        opts.system_prompt)
        else:
            rec.turns = normalize(find_conversation(dict(obj), opts.conversation_column))
    except ConversationError as e:
        rec.skip, rec.detail = "bad_conversation", str(e)
        return rec
    mismatch = media_mismatch(rec.turns, counts)
    if mismatch is not None:
        rec.skip, rec.detail = mismatch
    return rec


def media_mismatch(
    turns: list[dict[str, Any]], counts: dict[str, int]
) -> tuple[SkipReason, str] | None:
    """(skip reason, detail) when the conversation's media parts do not match the media given:
    images and videos must match one to one; audio parts, when a model's conversations have
    them, too."""
    parts = count_media(turns)
    for kind in MEDIA_KINDS:
        if kind == "audio" and parts[kind] == 0:
            continue
        if parts[kind] != counts[kind]:
            reason: SkipReason = ("image_count_mismatch" if kind == "image"
                                  else "media_count_mismatch")
            return reason, (f"{parts[kind]} {kind} part(s) in the conversation, "
                            f"{counts[kind]} {kind}(s)")
    return None


def parse_jsonl_line(index: int, line: bytes, source: str, base: Folder, opts: ChatmlConfig,
                     image_column: str | None) -> ChatRecord:
    """One JSONL line -> a ChatRecord (a skip when it is not a JSON object or unusable)."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        return ChatRecord(str(index), source, skip="bad_json", detail=str(e))
    if not isinstance(obj, dict):
        return ChatRecord(str(index), source, skip="bad_json",
                          detail="the line is not a JSON object")
    rid = str(obj["id"]) if obj.get("id") is not None else str(index)
    media = {kind: media_field(obj, kind, image_column) for kind in MEDIA_KINDS}
    return build(rid, source, obj, media, opts, base)
