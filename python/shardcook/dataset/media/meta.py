"""Energon 7.4's media metadata of one file: which files a filter strategy takes (EXTENSION,
GLOB, HEADER) and the `media_metadata` row it records for one (`metadata_type`, and
`metadata_json`: the compact JSON of the fields that are not None, in Energon's order).

Images are read as Energon reads them, with Pillow (the size, format and mode before any EXIF
orientation); JPEG, PNG and WebP from their header alone, where Energon decodes the whole image
to learn the same four values, and by the native core where the header settles them
(`rust/image/pillow.rs`). Video and audio: `avmeta`.

Pillow, PyAV and `filetype` are imported when a file is read, not with this module (which every
finalize imports, before `python -m shardcook` takes the working folder off `sys.path`).

Where Energon 7.4.1 breaks, this does what it means (docs/DATASETS.md lists the differences):
a file a GLOB pattern selects gets its type from its content, then its extension, as HEADER
does (Energon fails on it with an AssertionError).
"""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import PurePosixPath
from typing import IO, Any

from shardcook.dataset.media.avmeta import av_metadata
from shardcook.errors import ConfigError

__all__ = ["AV", "IMAGE", "MediaFilter", "media_row"]

#: Energon's `MediaMetadataType` values.
IMAGE, AV = "image", "av"

#: Energon's extensions of each type (lowercased suffixes).
_IMAGE_EXTENSIONS = frozenset(
    ("bmp", "gif", "ico", "j2k", "jp2", "jpx", "jpeg", "jpg", "png", "tif", "tiff", "webp"))
_AV_EXTENSIONS = frozenset(
    ("aac", "avi", "flac", "m4a", "m4v", "mkv", "mov", "mp3", "mp4", "ogg", "wav", "webm"))
#: How much of a file the HEADER strategy's sniffing reads (the `filetype` package's window).
SNIFF_BYTES = 8192
#: Formats whose size and mode Pillow's header parse gives exactly as a full decode does.
_HEADER_ENOUGH = frozenset(("JPEG", "PNG", "WEBP"))

#: The strategies' names, as `media_filters.strategy` stores them.
EXTENSION, GLOB, HEADER = "EXTENSION", "GLOB", "HEADER"


@dataclass(frozen=True)
class MediaFilter:
    """Which files get media metadata: Energon's `MediaFilterConfig`."""

    strategy: str
    patterns: tuple[str, ...] = ()

    @classmethod
    def from_flags(cls, glob: str | None, header: bool, extension: bool) -> MediaFilter | None:
        """The filter the `--media-metadata-by-*` options ask for; None when none is given.

        Raises:
            ConfigError: more than one strategy, or a pattern list that is empty or holds an
                empty pattern.
        """
        if sum((glob is not None, bool(header), bool(extension))) > 1:
            raise ConfigError("pass one of --media-metadata-by-extension, "
                              "--media-metadata-by-glob and --media-metadata-by-header, not "
                              "several (separate glob patterns by commas)")
        if glob is not None:
            # an empty piece (',', '*.jpg,') matches no file name: the filter would take nothing
            if not isinstance(glob, str) or not all(p.strip() for p in glob.split(",")):
                raise ConfigError(f"--media-metadata-by-glob takes comma-separated patterns "
                                  f"such as '*.jpg,*.png', each one not empty, not {glob!r}")
            return cls(GLOB, tuple(glob.split(",")))
        if header:
            return cls(HEADER)
        return cls(EXTENSION) if extension else None

    @property
    def patterns_text(self) -> str:
        """`media_filters.patterns`: the patterns as given, comma-joined ('' but for GLOB)."""
        return ",".join(self.patterns)

    def considers(self, name: str) -> bool:
        """Whether the file `name` may be media under this filter, before reading it."""
        lower = name.lower()
        if self.strategy == HEADER:
            return True
        if self.strategy == EXTENSION:
            return _by_extension(lower) is not None
        return any(fnmatch(lower, pattern) for pattern in self.patterns)

    def media_type(self, name: str, head: bytes) -> str | None:
        """The type of the file `name` (one `considers`) whose first bytes are `head`."""
        by_extension = _by_extension(name)
        if self.strategy == EXTENSION:
            return by_extension
        return _by_content(head) or by_extension


def _by_extension(name: str) -> str | None:
    suffix = PurePosixPath(name).suffix.lstrip(".").lower()
    if suffix in _IMAGE_EXTENSIONS:
        return IMAGE
    return AV if suffix in _AV_EXTENSIONS else None


def _by_content(head: bytes) -> str | None:
    import filetype

    kind = filetype.guess(head[:SNIFF_BYTES])
    mime = kind.mime if kind is not None else None
    if not mime:
        return None
    if mime.startswith("image/"):
        return IMAGE
    return AV if mime.startswith(("video/", "audio/")) else None


def _image_metadata(stream: IO[bytes]) -> dict[str, Any] | None:
    """Pillow's width, height, format and mode of the image; None when it is none. The native
    core answers from the header of the JPEG, PNG and WebP files whose header settles them;
    Pillow opens the rest."""
    from PIL import Image

    from shardcook import _native

    data = stream.read()
    found = _native.pillow_header(data)
    if found is not None:
        width, height, image_format, mode = found
        limit = Image.MAX_IMAGE_PIXELS
        if limit is not None and width * height > 2 * limit:
            return None  # Pillow's DecompressionBombError: no row
        return {"width": width, "height": height, "format": image_format, "mode": mode}
    stream = io.BytesIO(data)
    try:
        with warnings.catch_warnings():  # a decompression-bomb warning is Pillow's, not ours
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(stream) as image:
                if image.format not in _HEADER_ENOUGH:
                    image.load()  # others (ICO, GIF, TIFF) may settle size or mode on loading
                return {"width": image.width, "height": image.height,
                        "format": image.format or "UNKNOWN", "mode": image.mode or "UNKNOWN"}
    except Exception:  # noqa: BLE001 - not an image Pillow reads: no row (Energon's
        return None    # UnidentifiedImageError; a damaged image's other errors stop Energon)


def _av_metadata(stream: IO[bytes]) -> dict[str, Any] | None:
    try:
        return av_metadata(stream)
    except Exception:  # noqa: BLE001 - Energon records no row for a file PyAV cannot read
        return None


def media_row(media_filter: MediaFilter, name: str, stream: IO[bytes]) -> tuple[str, str] | None:
    """The `(metadata_type, metadata_json)` Energon records for the file `name` (which the
    filter `considers`) with the content `stream`, a seekable binary file; None for no row."""
    head = stream.read(SNIFF_BYTES) if media_filter.strategy != EXTENSION else b""
    kind = media_filter.media_type(name, head)
    if kind is None:
        return None
    stream.seek(0)
    fields = _image_metadata(stream) if kind == IMAGE else _av_metadata(stream)
    if fields is None:
        return None
    return kind, json.dumps(fields, separators=(",", ":"))

