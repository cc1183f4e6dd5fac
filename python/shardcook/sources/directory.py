"""A local folder: `images/` + `captions/` paired by stem, or a flat folder of images with
same-stem `.txt` captions next to them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shardcook.errors import ConfigError, SkipReason
from shardcook.files import read_regular_file
from shardcook.sources.base import Extra, Item, decode_caption

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
CAPTION_EXTENSIONS = frozenset({".txt"})


def _listing(folder: Path) -> list[str]:
    """Visible regular file names in `folder`, sorted."""
    with os.scandir(folder) as it:
        return sorted(e.name for e in it if not e.name.startswith(".") and e.is_file())


def _group(names: list[str], extensions: frozenset[str]) -> dict[str, list[str]]:
    """{stem: [names with one of `extensions` (any case)]}, names in sorted order."""
    groups: dict[str, list[str]] = {}
    for name in names:
        stem, ext = os.path.splitext(name)
        if ext.lower() in extensions and stem:
            groups.setdefault(stem, []).append(name)
    return groups


class DirectorySource:
    """Inputs = image stems in sorted order; each stem's first image and first caption are used."""

    def __init__(self, input_dir: str | os.PathLike[str], max_samples: int | None = None):
        root = Path(os.path.abspath(input_dir))
        if root.exists() and not root.is_dir():
            raise ConfigError(f"--input-dir {str(root)!r} is a file, not a folder; name the folder "
                              "holding the images.")
        if not root.is_dir():
            raise ConfigError(f"Input folder {str(root)!r} does not exist; check --input-dir.")
        self.root = root
        images_dir = root / "images"
        if images_dir.is_dir():
            self.layout = "images+captions"
            self.image_dir = images_dir
            caption_dirs = [root / "captions", images_dir]
        else:
            self.layout = "flat"
            self.image_dir = root
            caption_dirs = [root]
        self._images = _group(_listing(self.image_dir), IMAGE_EXTENSIONS)
        self._captions: list[tuple[Path, dict[str, list[str]]]] = [
            (d, _group(_listing(d), CAPTION_EXTENSIONS)) for d in caption_dirs if d.is_dir()
        ]
        stems = sorted(self._images)
        if not stems:
            raise ConfigError(
                f"No images found in {str(self.image_dir)!r} (looked for "
                f"{', '.join(sorted(IMAGE_EXTENSIONS))}); check --input-dir."
            )
        self.num_found = len(stems)
        self._stems = stems[:max_samples] if max_samples is not None else stems

    def __len__(self) -> int:
        return len(self._stems)

    def describe(self) -> dict[str, Any]:
        return {"type": "directory", "path": str(self.root.resolve()), "layout": self.layout}

    def items(self, start: int, stop: int) -> Iterator[Item]:
        for index in range(max(start, 0), min(stop, len(self._stems))):
            yield self._item(index)

    def _item(self, index: int) -> Item:
        stem = self._stems[index]
        first, *more = self._images[stem]
        image_path = str(self.image_dir / first)
        extras = [Extra(str(self.image_dir / n), "duplicate_image", image_path) for n in more]
        captions = [str(d / n) for d, groups in self._captions for n in groups.get(stem, [])]
        caption: str | None = None
        skip: SkipReason | None = "missing_caption"
        if captions:
            extras += [Extra(c, "duplicate_caption", captions[0]) for c in captions[1:]]
            caption, skip = decode_caption(read_regular_file(captions[0]))
        return Item(index, image_path, image_path=image_path, caption=caption, skip=skip,
                    extras=tuple(extras))
