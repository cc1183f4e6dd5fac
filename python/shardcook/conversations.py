"""Chat turns in any common shape normalized to typed parts (docs/FORMAT.md, chatml):
`[{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "…"}]}, …]`;
media parts are `image`, `video` and `audio`. Also builds the two turns of a question/answer row."""

from __future__ import annotations

import re
from typing import Any

#: The placeholder that marks an image inside text content.
IMAGE_PLACEHOLDER = "<image>"
#: Placeholders inside text content and the media part each stands for.
PLACEHOLDERS = {IMAGE_PLACEHOLDER: "image", "<video>": "video", "<audio>": "audio"}
#: The media kinds a conversation can hold, in the order their parts are built.
MEDIA_KINDS = ("image", "video", "audio")
#: Keys of an input record that may hold the conversation, in the order they are looked up.
CONVERSATION_KEYS = ("conversation", "messages", "conversations")
#: `from` values of ShareGPT/LLaVA-style turns and the role each becomes.
ROLES = {
    "user": "user", "human": "user",
    "assistant": "assistant", "gpt": "assistant", "model": "assistant", "bot": "assistant",
    "system": "system",
}
#: Typed-part `type`s that stand for one image.
IMAGE_TYPES = ("image", "image_url", "input_image")
#: Typed-part `type`s and the media part each becomes.
MEDIA_TYPES = {**{t: "image" for t in IMAGE_TYPES},
               "video": "video", "video_url": "video", "input_video": "video",
               "audio": "audio", "input_audio": "audio"}

_split = re.compile("(" + "|".join(re.escape(p) for p in PLACEHOLDERS) + ")")


class ConversationError(ValueError):
    """A conversation that cannot be normalized; the message says why, in one sentence."""


def _text_parts(text: str) -> list[dict[str, str]]:
    """Text with `<image>`/`<video>`/`<audio>` placeholders -> media and text parts; text pieces
    are stripped and empty ones dropped (`"<image>\\nWhat is this?"` -> image, text "What is
    this?")."""
    parts: list[dict[str, str]] = []
    for i, piece in enumerate(_split.split(text)):
        if i % 2:  # a captured placeholder
            parts.append({"type": PLACEHOLDERS[piece]})
            continue
        piece = piece.strip()
        if piece:
            parts.append({"type": "text", "text": piece})
    return parts


def _content(content: Any, where: str) -> list[dict[str, str]]:
    if isinstance(content, str):
        return _text_parts(content)
    if not isinstance(content, list):
        raise ConversationError(f"{where} has content of type {type(content).__name__}, "
                                "not text or a list of parts")
    parts: list[dict[str, str]] = []
    for j, part in enumerate(content):
        if isinstance(part, str):
            parts += _text_parts(part)
            continue
        if not isinstance(part, dict):
            raise ConversationError(f"{where} part {j} is a {type(part).__name__}, not an object")
        kind = part.get("type")
        if kind in MEDIA_TYPES:
            parts.append({"type": MEDIA_TYPES[kind]})
        elif kind == "text" or (kind is None and isinstance(part.get("text"), str)):
            text = part.get("text")
            if not isinstance(text, str):
                raise ConversationError(f"{where} part {j} is a text part without text")
            parts += _text_parts(text)
        else:
            raise ConversationError(f"{where} part {j} has unknown type {kind!r}")
    return parts


def normalize(turns: Any) -> list[dict[str, Any]]:
    """Turns (`{"role", "content"}` or `{"from", "value"}`; content text with `<image>`
    placeholders or typed parts) -> turns with a known role and a list of typed parts.

    Raises:
        ConversationError: not a non-empty list of turns, an unknown role, unusable content.
    """
    if not isinstance(turns, list) or not turns:
        raise ConversationError("the conversation is not a non-empty list of turns")
    out = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise ConversationError(f"turn {i} is a {type(turn).__name__}, not an object")
        role = turn.get("role") if turn.get("role") is not None else turn.get("from")
        content = turn.get("content") if turn.get("content") is not None else turn.get("value")
        if not isinstance(role, str) or role.strip().lower() not in ROLES:
            raise ConversationError(f"turn {i} has unknown role {role!r}")
        if content is None:
            raise ConversationError(f"turn {i} has no content")
        out.append({"role": ROLES[role.strip().lower()],
                    "content": _content(content, f"turn {i}")})
    return out


def count_images(turns: list[dict[str, Any]]) -> int:
    """The number of image parts of normalized turns."""
    return count_media(turns)["image"]


def count_media(turns: list[dict[str, Any]]) -> dict[str, int]:
    """{kind: number of parts} of normalized turns, for every kind of `MEDIA_KINDS`."""
    counts = dict.fromkeys(MEDIA_KINDS, 0)
    for turn in turns:
        for part in turn["content"]:
            if part["type"] in counts:
                counts[part["type"]] += 1
    return counts


def question_answer(question: Any, answer: Any, media: dict[str, int],
                    system_prompt: str | None = None) -> list[dict[str, Any]]:
    """The normalized turns of a question/answer row: [system,] user (one part per medium in
    `MEDIA_KINDS` order, then the question), assistant (the answer).

    Raises:
        ConversationError: the question or answer is not text.
    """
    for name, value in (("question", question), ("answer", answer)):
        if not isinstance(value, str) or not value.strip():
            raise ConversationError(f"the {name} is not a non-empty text")
    user = [{"type": kind} for kind in MEDIA_KINDS for _ in range(media.get(kind, 0))]
    user.append({"type": "text", "text": question.strip()})
    turns: list[dict[str, Any]] = []
    if system_prompt:
        turns.append({"role": "system", "content": [{"type": "text", "text": system_prompt}]})
    turns.append({"role": "user", "content": user})
    turns.append({"role": "assistant", "content": [{"type": "text", "text": answer.strip()}]})
    return turns


def find_conversation(record: dict[str, Any], column: str | None = None) -> Any:
    """The conversation of an input record: `column`, else the first of CONVERSATION_KEYS present.

    Raises:
        ConversationError: no such key.
    """
    keys = (column,) if column else CONVERSATION_KEYS
    for key in keys:
        if key in record and record[key] is not None:
            return record[key]
    raise ConversationError(f"the record has no {' / '.join(keys)} field")
