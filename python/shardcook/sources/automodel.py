"""A local folder as NeMo AutoModel's preprocessing tool reads one (`encode --layout automodel`):
every media file under it, walked recursively, in sorted path order; each captioned, as the tool
does, by its `<prefix>_internvl.json` JSONL (`prefix`: the file name before `_sample`, else its
stem; the line whose `file_name` is the file's name, field `--caption-field`), else by our usual
same-stem `.txt` sidecar, else by its file name (stem, `_` as spaces). Videos are captioned as
the tool's `video` command does, by `--caption-format`: `sidecar` (the same-stem `.json`
object's field), `meta_json` (the `meta.json` beside it: a list of objects, or one holding them
under `items` or `data`, matched by `file_name` or `filename`) or `jsonl` (as images), else by
the file name."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from shardcook.errors import ConfigError
from shardcook.files import read_regular_file
from shardcook.sources.base import Item, decode_caption

#: The extensions AutoModel's tool takes, without the dot, compared in lower case.
IMAGE_EXTENSIONS = frozenset({"jpg", "jpeg", "png", "webp", "bmp"})
VIDEO_EXTENSIONS = frozenset({"mp4", "avi", "mov", "mkv", "webm"})
JSONL_SUFFIX = "_internvl.json"


def media_files(root: Path, extensions: frozenset[str]) -> list[Path]:
    """Every file under `root` with one of `extensions`, sorted (the tool's `_get_media_files`)."""
    found = []
    for folder, _, files in os.walk(root):
        for name in files:
            if "." in name and name.lower().rsplit(".", 1)[-1] in extensions:
                found.append(Path(folder) / name)
    return sorted(found)


def jsonl_captions(files: list[Path], field: str) -> dict[str, str]:
    """{file name: caption} from the `<prefix>_internvl.json` files beside `files` (a line that
    is not JSON, or a file that cannot be read, gives no caption, as in the tool)."""
    wanted: dict[Path, set[str]] = {}
    for path in files:
        prefix = path.name.rsplit("_sample", 1)[0] if "_sample" in path.name else path.stem
        wanted.setdefault(path.parent / f"{prefix}{JSONL_SUFFIX}", set()).add(path.name)
    captions: dict[str, str] = {}
    for jsonl, names in wanted.items():
        try:
            lines = read_regular_file(str(jsonl)).decode("utf-8").splitlines()
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        for line in lines:
            try:
                entry = json.loads(line) if line.strip() else None
            except ValueError:
                continue
            if not isinstance(entry, dict):
                continue
            name, caption = entry.get("file_name"), entry.get(field)
            if name and caption and name in names:
                captions[name] = caption
    return captions


def _json(path: Path) -> Any:
    """The JSON document at `path`, None when it cannot be read (the tool skips it)."""
    try:
        return json.loads(read_regular_file(str(path)).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def json_sidecar_captions(files: list[Path], field: str) -> dict[str, str]:
    """{file name: caption} from each file's same-stem `.json` object."""
    captions = {}
    for path in files:
        data = _json(path.with_suffix(".json"))
        caption = data.get(field) if isinstance(data, dict) else None
        if isinstance(caption, str) and caption:
            captions[path.name] = caption
    return captions


def meta_json_captions(files: list[Path], field: str) -> dict[str, str]:
    """{file name: caption} from the `meta.json` of each folder holding some of `files`."""
    captions = {}
    for folder in sorted({path.parent for path in files}):
        data = _json(folder / "meta.json")
        items = data.get("items", data.get("data", [])) if isinstance(data, dict) else data
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                name = item.get("file_name") or item.get("filename")
                caption = item.get(field)
                if isinstance(name, str) and isinstance(caption, str) and name and caption:
                    captions[name] = caption
    return captions


#: `--caption-format`'s loaders of video captions.
VIDEO_CAPTIONS = {"sidecar": json_sidecar_captions, "meta_json": meta_json_captions,
                  "jsonl": jsonl_captions}


def sidecar_caption(path: Path) -> str | None:
    """The same-stem `.txt` beside `path`, when there is one and it is UTF-8 text."""
    txt = path.with_suffix(".txt")
    try:
        caption, _ = decode_caption(read_regular_file(str(txt)))
    except (OSError, ValueError):
        return None
    return caption.strip() if caption and caption.strip() else None


class AutoModelFolderSource:
    """Inputs = the media files under a local folder, in AutoModel's order, each with the
    caption AutoModel's tool gives it (or, for an image, our sidecar's). `caption_format`:
    how videos are captioned (None for images)."""

    def __init__(self, input_dir: str, max_samples: int | None, *, caption_field: str,
                 caption_format: str | None = None) -> None:
        root = Path(input_dir)
        if not root.is_dir():
            raise ConfigError(f"--input-dir {input_dir} is not a local folder; "
                              "--layout automodel reads a local folder of media files.")
        self.root = root.absolute()
        videos = caption_format is not None
        extensions = VIDEO_EXTENSIONS if videos else IMAGE_EXTENSIONS
        self.files = media_files(self.root, extensions)[:max_samples]
        if not self.files:
            raise ConfigError(f"--input-dir {input_dir} holds no "
                              f"{'video' if videos else 'image'} files "
                              f"({', '.join(sorted(extensions))}); check --input-dir.")
        load = jsonl_captions if caption_format is None else VIDEO_CAPTIONS[caption_format]
        self.captions = load(self.files, caption_field)
        self.caption_field, self.caption_format = caption_field, caption_format

    def __len__(self) -> int:
        return len(self.files)

    def describe(self) -> dict[str, Any]:
        videos = {} if self.caption_format is None else {"caption_format": self.caption_format}
        return {"type": "automodel-folder", "path": str(self.root),
                "caption_field": self.caption_field, **videos, "inputs": len(self.files)}

    def items(self, start: int, stop: int) -> Iterator[Item]:
        for index in range(start, min(stop, len(self.files))):
            path = self.files[index]
            caption = (self.captions.get(path.name)
                       or (sidecar_caption(path) if self.caption_format is None else None)
                       or path.stem.replace("_", " "))
            yield Item(index, str(path), image_path=str(path), caption=caption)
