"""A folder (local or in object storage): `images/` + `captions/` paired by stem, or a flat
folder of images with same-stem `.txt` captions next to them. For a video model the inputs are
videos (`videos/` + `captions/`, or flat), each captioned by a same-stem `.json` holding
`caption` (Megatron-Bridge's convention) or `.txt`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shardcook.errors import ConfigError, SkipReason
from shardcook.sources.base import Extra, Item, clean_caption, decode_caption
from shardcook.sources.folder import Folder, open_folder, read_ahead
from shardcook.storage.location import Location

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
CAPTION_EXTENSIONS = frozenset({".txt"})
#: What PyAV (FFmpeg) decodes that people keep clips in.
VIDEO_EXTENSIONS = frozenset({".mp4", ".webm", ".mov", ".mkv", ".avi", ".m4v"})


@dataclass(frozen=True)
class Media:
    """What a folder's inputs are: their subfolder beside `captions/`, file and caption
    extensions."""

    kind: str
    folder: str
    extensions: frozenset[str]
    captions: frozenset[str]


IMAGES = Media("images", "images", IMAGE_EXTENSIONS, CAPTION_EXTENSIONS)
VIDEOS = Media("videos", "videos", VIDEO_EXTENSIONS, frozenset({".json", ".txt"}))


def read_caption(name: str, raw: bytes) -> tuple[str | None, SkipReason | None, str | None]:
    """(caption, skip reason, detail) of a caption file: text, or a `.json` holding `caption`."""
    if not name.lower().endswith(".json"):
        return (*decode_caption(raw), None)
    try:
        caption = json.loads(raw).get("caption")
    except (ValueError, AttributeError):
        return None, "missing_caption", f"{name} is not a JSON object"
    if not isinstance(caption, str):
        return None, "missing_caption", f"{name} has no string `caption`"
    return clean_caption(caption), None, None


def _group(names: list[str], extensions: frozenset[str]) -> dict[str, list[str]]:
    """{stem: [names with one of `extensions` (any case)]}, names in sorted order."""
    groups: dict[str, list[str]] = {}
    for name in names:
        stem, ext = os.path.splitext(name)
        if ext.lower() in extensions and stem:
            groups.setdefault(stem, []).append(name)
    return groups


def input_folder(input_dir: str | os.PathLike[str] | Location | Folder) -> Folder:
    """The --input-dir folder, checked to exist and to be a folder."""
    folder = open_folder(input_dir, "--input-dir")
    if folder.is_file_itself():
        raise ConfigError(f"--input-dir {folder.root!r} is a file, not a folder; name the folder "
                          "holding the images.")
    if not folder.exists():
        raise ConfigError(f"Input folder {folder.root!r} does not exist; check --input-dir.")
    return folder


class DirectorySource:
    """Inputs = image (or video) stems in sorted order; each stem's first image and first
    caption are used."""

    def __init__(self, input_dir: str | os.PathLike[str] | Folder, max_samples: int | None = None,
                 media: Media = IMAGES):
        folder = input_folder(input_dir)
        self.folder = folder
        if folder.is_dir(media.folder):
            self.layout = f"{media.folder}+captions"
            self.image_dir = f"{media.folder}/"
            caption_dirs = ["captions/", self.image_dir]
        else:
            self.layout = "flat"
            self.image_dir = ""
            caption_dirs = [""]
        self._images = _group(folder.files(self.image_dir), media.extensions)
        self._captions: list[tuple[str, dict[str, list[str]]]] = [
            (d, _group(folder.files(d), media.captions)) for d in caption_dirs
            if not d or folder.is_dir(d)
        ]
        stems = sorted(self._images)
        if not stems:
            raise ConfigError(
                f"No {media.kind} found in {folder.where(self.image_dir)!r} (looked for "
                f"{', '.join(sorted(media.extensions))}); check --input-dir."
            )
        self.num_found = len(stems)
        self._stems = stems[:max_samples] if max_samples is not None else stems
        #: Reported with the first input, so that the run's report names each one once.
        self._unsafe = tuple(Extra(url, "unsafe_name") for url in folder.unsafe())

    def __len__(self) -> int:
        return len(self._stems)

    def describe(self) -> dict[str, Any]:
        return {"type": "directory", "path": self.folder.root, "layout": self.layout}

    def items(self, start: int, stop: int) -> Iterator[Item]:
        indices = range(max(start, 0), min(stop, len(self._stems)))
        yield from read_ahead(self._item, indices, self.folder.threads)

    def _item(self, index: int) -> Item:
        where = self.folder.where
        stem = self._stems[index]
        first, *more = self._images[stem]
        image_path = where(self.image_dir + first)
        extras = [Extra(where(self.image_dir + n), "duplicate_image", image_path) for n in more]
        if index == 0:
            extras[:0] = self._unsafe
        captions = [where(d + n) for d, groups in self._captions for n in groups.get(stem, [])]
        caption: str | None = None
        skip: SkipReason | None = "missing_caption"
        detail = None
        if captions:
            extras += [Extra(c, "duplicate_caption", captions[0]) for c in captions[1:]]
            try:
                caption, skip, detail = read_caption(captions[0], self.folder.read(captions[0]))
            except OSError as e:  # gone since the folder was listed
                detail = f"{captions[0]}: {e.strerror or e}"
        image = None if skip else self.folder.preload(image_path)
        return Item(index, image_path, image=image, image_path=image_path, caption=caption,
                    skip=skip, extras=tuple(extras), skip_detail=detail, reader=self.folder.read)
