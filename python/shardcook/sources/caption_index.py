"""An input folder (local or in object storage) listed by a caption index: Megatron-Bridge's
`meta.json` (a JSON array, or JSON Lines, of `{"file_name", "caption"}`) or the Hugging Face
imagefolder convention
(`metadata.jsonl` / `metadata.csv` with `file_name` and a caption column). File names are
relative to the folder, nested folders allowed; a row whose image is missing is skipped with its
reason. Inputs are the rows in file order. A video folder may also hold Primus's Wan convention,
`meta.jsonl`, whose rows may carry `start_frame` / `end_frame` (inclusive)."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from shardcook.errors import ConfigError, SkipReason
from shardcook.sources.base import Item, clean_caption
from shardcook.sources.directory import input_folder
from shardcook.sources.folder import Folder, read_ahead

#: Index files looked for in an input folder, first found wins.
INDEX_FILES = ("meta.json", "metadata.jsonl", "metadata.csv")
#: The same for a folder of videos.
VIDEO_INDEX_FILES = ("meta.json", "meta.jsonl", "metadata.jsonl", "metadata.csv")
FILE_NAME = "file_name"
#: Caption columns looked for when --caption-column is not given (Bridge's, then Hugging Face's).
CAPTION_COLUMNS = ("caption", "text")


@dataclass(frozen=True)
class IndexRow:
    """One row: the image's name relative to the folder (None when the row has none), its
    caption (None when absent), or why the row cannot be used."""

    file_name: str | None
    caption: str | None
    problem: SkipReason | None = None
    span: tuple[int, int] | None = None


def find_index(folder: Folder, names: tuple[str, ...] = INDEX_FILES) -> str | None:
    """The name of the caption index inside `folder` (the first of `names` there), or None."""
    return next((n for n in names if folder.is_file(n)), None)


def _json_rows(text: str, path: str) -> list[Any]:
    """A JSON array, else JSON Lines (an unparseable line is kept as None: a bad row)."""
    try:
        data = json.loads(text)
        if isinstance(data, list):
            return data
    except ValueError:
        pass
    rows: list[Any] = []
    for line in text.splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError:
                rows.append(None)
    if not rows or all(r is None for r in rows):
        raise ConfigError(f"{path!r} is neither a JSON array nor JSON Lines of "
                          f'{{"{FILE_NAME}": ..., "caption": ...}} objects.')
    return rows


def _caption_column(columns: set[str], wanted: str | None, path: str) -> str:
    if wanted:
        return wanted
    found = next((c for c in CAPTION_COLUMNS if c in columns), None)
    if found is None:
        raise ConfigError(f"{path!r} has no caption column ({' or '.join(CAPTION_COLUMNS)}); "
                          "name yours with --caption-column.")
    return found


def _row(obj: Any, caption_column: str) -> IndexRow:
    if not isinstance(obj, dict):
        return IndexRow(None, None, "bad_index_row")
    name, caption = obj.get(FILE_NAME), obj.get(caption_column)
    if not isinstance(name, str) or not name:
        return IndexRow(None, None, "bad_index_row")
    start, end = obj.get("start_frame"), obj.get("end_frame")
    span = None
    if start is not None or end is not None:
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end):
            return IndexRow(None, None, "bad_index_row")
        span = (start, end)
    return IndexRow(name, None if caption is None else clean_caption(str(caption)), span=span)


def read_index(folder: Folder, name: str, caption_column: str | None = None) -> list[IndexRow]:
    """The rows of caption index `name`; ConfigError in one sentence when it is unusable."""
    path = folder.where(name)
    try:
        text = folder.read(path).decode("utf-8-sig")
    except OSError as e:
        raise ConfigError(f"Caption index {path!r} is unreadable ({e.strerror or e}).") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"Caption index {path!r} is unreadable ({e}).") from None
    if name.endswith(".csv"):
        reader = csv.DictReader(text.splitlines())
        columns = set(reader.fieldnames or ())
        if FILE_NAME not in columns:
            raise ConfigError(f"{path!r} has no {FILE_NAME} column; the Hugging Face "
                              f"imagefolder convention names each image in {FILE_NAME}.")
        column = _caption_column(columns, caption_column, path)
        if column not in columns:
            raise ConfigError(f"{path!r} has no column {column!r} (--caption-column).")
        return [_row(r, column) for r in reader]
    objs = _json_rows(text, path)
    if not objs:
        raise ConfigError(f"Caption index {path!r} lists no files: add a "
                          f'{{"{FILE_NAME}": ..., "caption": ...}} object for each input.')
    columns = {k for o in objs if isinstance(o, dict) for k in o}
    column = _caption_column(columns, caption_column, path)
    return [_row(o, column) for o in objs]


class CaptionIndexSource:
    """The rows of the folder's caption index, in file order."""

    def __init__(self, input_dir: str | os.PathLike[str] | Folder, index: str,
                 max_samples: int | None = None, caption_column: str | None = None):
        self.folder = input_folder(input_dir)
        self.index = index
        rows = read_index(self.folder, index, caption_column)
        if not rows:
            raise ConfigError(f"Caption index {self.folder.where(index)!r} lists no images.")
        self.num_found = len(rows)
        self._rows = rows[:max_samples] if max_samples is not None else rows

    def __len__(self) -> int:
        return len(self._rows)

    def describe(self) -> dict[str, str]:
        return {"type": "directory", "path": self.folder.root, "layout": self.index}

    def items(self, start: int, stop: int) -> Iterator[Item]:
        indices = range(max(start, 0), min(stop, len(self._rows)))
        yield from read_ahead(self._item, indices, self.folder.threads)

    def _item(self, index: int) -> Item:
        row = self._rows[index]
        if row.file_name is None:
            return Item(index, f"{self.folder.where(self.index)}:{index + 1}",
                        skip=row.problem or "bad_index_row")
        source = self.folder.where(row.file_name)
        if not self.folder.inside(row.file_name):
            return Item(index, source, skip="image_outside_folder")
        try:
            is_file = self.folder.is_file(row.file_name)
        except OSError as e:  # a name too long for the file system, a folder it may not read
            return Item(index, source, skip="missing_image", skip_detail=e.strerror)
        if not is_file:
            return Item(index, source, skip="missing_image")
        skip: SkipReason | None = "missing_caption" if row.caption is None else None
        image = None if skip else self.folder.preload(source)
        return Item(index, source, image=image, image_path=source, caption=row.caption,
                    skip=skip, reader=self.folder.read, span=row.span)
