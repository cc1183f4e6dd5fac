"""What every source yields: `Item`s in a fixed order, and the `Source` interface."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from shardcook.errors import SkipReason
from shardcook.files import read_regular_file


@dataclass(frozen=True)
class Extra:
    """An input file that was found but not used (e.g. a second image for one stem); `used`
    names the file used in its place, if any."""

    source: str
    reason: SkipReason
    used: str | None = None


@dataclass
class Item:
    """One input: its position, where it came from, its image and caption.

    Attributes:
        index: position in the source's deterministic order; the sample key is f"{index:010d}".
        source: where the input came from (a path, `dataset[split][row]`, `tar:key`).
        image: the encoded image bytes, or None when `image_path` names a file to read.
        image_path: a file holding the image, when `image` is None.
        caption: the caption, or None when it is missing or unreadable (then `skip` says why).
        skip: a reason this input cannot be used, when the source already knows it.
        skip_detail: what exactly is wrong, for report.json, when the source knows it.
        extras: files belonging to this input's stem that were not used, reported as skipped.
        reader: reads `image_path` (and a chat record's media paths): a local file by default,
            the folder's `read` for a source in object storage.
        span: a video input's first and last frame (inclusive), when its caption index
            gives them (`start_frame`, `end_frame`); None: the whole video.
    """

    index: int
    source: str
    image: bytes | None = None
    image_path: str | None = None
    caption: str | None = None
    skip: SkipReason | None = None
    extras: tuple[Extra, ...] = field(default_factory=tuple)
    skip_detail: str | None = None
    reader: Callable[[str], bytes] = field(default=read_regular_file, repr=False, compare=False)
    span: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        return f"{self.index:010d}"

    def image_bytes(self) -> bytes:
        """The image's bytes, read from `image_path` when needed."""
        if self.image is not None:
            return self.image
        assert self.image_path is not None
        return self.reader(self.image_path)


class Source(Protocol):
    """A deterministic, lazily read sequence of inputs."""

    def __len__(self) -> int:
        """Number of inputs (after --max-samples)."""

    def items(self, start: int, stop: int) -> Iterator[Item]:
        """Yields the items with start <= index < stop, in order, reading only those."""

    def describe(self) -> dict[str, Any]:
        """A JSON-safe description for manifest.json."""


def decode_caption(raw: bytes) -> tuple[str | None, SkipReason | None]:
    """UTF-8 caption bytes -> (caption, None), or (None, skip reason) if they are not UTF-8."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "caption_not_utf8"
    return clean_caption(text), None


def clean_caption(text: str) -> str:
    """Strips a BOM and surrounding whitespace (trailing newlines of caption files)."""
    return text.lstrip("\ufeff").strip()


def dotted_get(obj: object, path: str) -> object:
    """obj["a"]["b"] for path "a.b" (list indices as numbers); raises KeyError if absent."""
    for part in path.split("."):
        if isinstance(obj, dict):
            obj = obj[part]
        elif isinstance(obj, (list, tuple)) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            raise KeyError(path)
    return obj
