"""A Hugging Face dataset (hub, `save_to_disk` folder, or parquet/json/csv files), in row order."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardcook.errors import ConfigError
from shardcook.hftoken import redact
from shardcook.sources.base import (
    Item,
    clean_caption,
    decode_caption,
    dotted_get,
)
from shardcook.storage.location import Location, locate
from shardcook.storage.urls import is_url

if TYPE_CHECKING:
    from datasets import Dataset

    from shardcook.sources.hfstream import ParquetRows

CAPTION_NAMES = ("caption", "text", "prompt", "captions", "txt", "description", "alt_text",
                 "sentence", "title")
IMAGE_NAMES = ("image", "img", "jpg", "jpeg", "png", "webp", "picture", "photo")
FILE_BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv",
                 ".arrow": "arrow"}
#: `datasets`' packaged builders: with one as --hf-dataset, --hf-data-files are local paths.
LOCAL_BUILDERS = ("parquet", "json", "csv", "arrow", "text", "imagefolder", "audiofolder",
                  "webdataset")
CHUNK = 64


def load(name: str, split: str, data_files: Sequence[str | Location] | None = None, *,
         token: str | None = None) -> Dataset:
    """Opens one split as a memory-mapped `datasets.Dataset` (nothing is read into memory).

    `token` (from `--hf-token-file`, HF_TOKEN or the saved login) reads gated or private hub
    datasets; it is handed to `datasets` only and never appears in an error message.
    """
    import sys

    import datasets

    if not sys.stderr.isatty():  # no bars in logs
        datasets.disable_progress_bars()
    path = Path(name)
    files = _check_local(name, data_files)
    try:
        if path.is_dir() and any((path / f).exists() for f in ("state.json", "dataset_dict.json")):
            ds = datasets.load_from_disk(str(path))
            if isinstance(ds, datasets.DatasetDict):
                if split not in ds:
                    raise ConfigError(
                        f"Dataset {name!r} has no split {split!r} (it has {', '.join(ds)}); "
                        "check --hf-split."
                    )
                ds = ds[split]
            return ds
        if path.is_file() and path.suffix.lower() in FILE_BUILDERS:
            return datasets.load_dataset(FILE_BUILDERS[path.suffix.lower()],
                                         data_files=[str(path)], split=split)
        if path.suffix.lower() in FILE_BUILDERS and not path.exists():
            raise ConfigError(f"Hugging Face data file {name!r} does not exist; "
                              "check --hf-dataset.")
        return datasets.load_dataset(name, data_files=files, split=split, token=token)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds, all mean "cannot load"
        first = redact((str(e).splitlines() or [type(e).__name__])[0], token)
        raise ConfigError(
            f"Hugging Face dataset {name!r} (split {split!r}) could not be loaded: {first}"
        ) from None


def stream(name: str, split: str, data_files: Sequence[str | Location] | None = None, *,
           token: str | None = None) -> ParquetRows:
    """The split read from its parquet files a row group at a time (`--hf-streaming`), for the
    same names `load` takes."""
    from shardcook.sources.hfstream import stream as stream_parquet

    files = _check_local(name, data_files)
    suffix = Path(name).suffix.lower()
    if suffix in FILE_BUILDERS:
        return stream_parquet(name, split, FILE_BUILDERS[suffix], [name], token=token)
    return stream_parquet(name, split, name, files, token=token)


def _check_local(name: str, data_files: Sequence[str | Location] | None) -> list[str] | None:
    """`data_files` as `datasets` takes them, once a local --hf-dataset or --hf-data-files is
    known to exist (instead of the hub's repo-id error, or no word at all), and no data files
    come with a data file as the dataset."""
    import glob

    path = Path(name)
    local = name.startswith((".", "/", "~")) or name.count("/") > 1  # a hub id is ORG/NAME
    if local and not path.exists():
        raise ConfigError(f"--hf-dataset {name!r} does not exist; give an existing folder or "
                          "data file, or a hub dataset as ORG/NAME.")
    if not data_files:
        return None
    files = [locate(file, "--hf-data-files") for file in data_files]
    if path.is_file():
        builder = FILE_BUILDERS.get(path.suffix.lower(), "parquet")
        raise ConfigError(f"--hf-dataset {name!r} is a data file itself, so --hf-data-files has "
                          f"nothing to add to; to read several files give --hf-dataset {builder} "
                          "and every file as --hf-data-files.")
    base = path if path.is_dir() else Path() if name in LOCAL_BUILDERS else None
    if base is not None:  # else a hub dataset: the files are the repository's
        for file in files:
            # in a store, a pattern matching nothing is datasets' error
            if not glob.has_magic(file.text) and not _exists(_as_read(file, base)):
                where = f" in {name!r}" if path.is_dir() and not is_url(file.text) else ""
                raise ConfigError(f"--hf-data-files {file.text!r} does not exist{where}; check "
                                  "the name.")
    return [str(file) for file in files]


def _as_read(file: Location, base: Path) -> Location:
    """Data file `file` where `datasets` reads it: a URL as it is, a local path from the
    dataset folder `base` (asked of the text, as `datasets` asks it)."""
    return file if is_url(file.text) else Location(str(base / file.text))


def _exists(file: Location) -> bool:
    """Data file `file` is a file (`datasets` takes no folder as one) in its folder's store."""
    folder, name = file.split()
    return folder.store.exists(name)


def _root(path: str) -> str:
    return path.split(".", 1)[0]


def _first_value(row: dict[str, Any], paths: list[str]) -> Any:
    """The value at the first of `paths` that `row` holds (not None, not ""), else None."""
    for path in paths:
        try:
            value = dotted_get(row, path)
        except KeyError:
            continue
        if value is not None and value != "":
            return value
    return None


def detect_columns(features: dict[str, Any], image_column: str | None,
                   caption_column: str | None) -> tuple[str, str]:
    """(image column, caption column): the named ones, checked, or detected from the features."""
    import datasets

    names = list(features)
    if image_column is None:
        kinds = [getattr(datasets, k) for k in ("Image", "Video") if hasattr(datasets, k)]
        typed = [n for kind in kinds for n in names if isinstance(features[n], kind)]
        named = [n for n in IMAGE_NAMES if n in features]
        image_column = next(iter(typed or named), None)
        if image_column is None:
            raise ConfigError(
                f"No image column found among {', '.join(names)}; name it with --image-column."
            )
    elif _root(image_column) not in features:
        raise ConfigError(
            f"--image-column {image_column!r} is not a column (columns: {', '.join(names)})."
        )
    if caption_column is None:
        lowered = {n.lower(): n for n in names}
        caption_column = next((lowered[c] for c in CAPTION_NAMES if c in lowered), None)
        if caption_column is None:
            raise ConfigError(
                f"No caption column found among {', '.join(names)}; name it with --caption-column."
            )
    elif _root(caption_column) not in features:
        raise ConfigError(
            f"--caption-column {caption_column!r} is not a column (columns: {', '.join(names)})."
        )
    return image_column, caption_column


def candidate_columns(features: dict[str, Any], option: str, columns: list[str]) -> list[str]:
    """The candidate fields (dotted paths, tried in order per row) whose column exists."""
    kept = [c for c in columns if _root(c) in features]
    if not kept:
        raise ConfigError(
            f"None of the {option} {', '.join(columns)} is a column "
            f"(columns: {', '.join(features)})."
        )
    return kept


class HuggingFaceSource:
    """Inputs = the rows of one split, in row order; images and videos stay encoded (an `Image`
    or `Video` feature cast to decode=False: the `{"bytes", "path"}` it stores).
    `streaming` reads the split's parquet files a row group at a time (`sources/hfstream.py`)
    instead of loading the dataset; the items are the same.

    `image_columns`/`caption_columns` (Primus's `image_keys`/`caption_keys`) are candidate
    dotted paths tried in order for each row; the first that holds a value is used.
    """

    def __init__(self, name: str, split: str = "train",
                 data_files: Sequence[str | Location] | None = None,
                 max_samples: int | None = None, image_column: str | None = None,
                 caption_column: str | None = None, *, image_columns: list[str] | None = None,
                 caption_columns: list[str] | None = None, token: str | None = None,
                 streaming: bool = False):
        ds: Any = (stream if streaming else load)(name, split, data_files, token=token)
        self.image_column, self.caption_column = detect_columns(
            ds.features, None if image_columns else image_column,
            None if caption_columns else caption_column)
        self.image_paths = [self.image_column]
        self.caption_paths = [self.caption_column]
        if image_columns:
            self.image_paths = candidate_columns(
                ds.features, "image columns", [*([image_column] if image_column else []),
                                               *image_columns])
        if caption_columns:
            self.caption_paths = candidate_columns(
                ds.features, "caption columns", [*([caption_column] if caption_column else []),
                                                 *caption_columns])
        roots = list(dict.fromkeys(_root(c) for c in (*self.image_paths, *self.caption_paths)))
        ds = ds.select_columns(roots)
        for img_root in dict.fromkeys(_root(c) for c in self.image_paths):
            ds = undecoded(ds, img_root)  # a Video column too: decoding needs torchcodec
        if len(ds) == 0:
            raise ConfigError(f"Hugging Face dataset {name!r} split {split!r} has no rows.")
        self.ds = ds
        self.name, self.split = name, split
        self.num_found = len(ds)
        self._len = min(len(ds), max_samples) if max_samples is not None else len(ds)

    def __len__(self) -> int:
        return self._len

    def describe(self) -> dict[str, Any]:
        return {"type": "huggingface", "dataset": self.name, "split": self.split,
                "image_column": self.image_column, "caption_column": self.caption_column}

    def items(self, start: int, stop: int) -> Iterator[Item]:
        start, stop = max(start, 0), min(stop, self._len)
        for a in range(start, stop, CHUNK):
            rows = self.ds[a:min(a + CHUNK, stop)]
            n = len(next(iter(rows.values())))
            for j in range(n):
                row = {k: v[j] for k, v in rows.items()}
                yield self._item(a + j, row)

    def _item(self, index: int, row: dict[str, Any]) -> Item:
        source = f"{self.name}[{self.split}][{index}]"
        image = _first_value(row, self.image_paths)
        image_bytes, image_path = None, None
        if isinstance(image, dict):
            image_bytes, image_path = image.get("bytes"), image.get("path")
        elif isinstance(image, (bytes, bytearray)):
            image_bytes = bytes(image)
        elif isinstance(image, str) and image:
            image_path = image
        elif hasattr(image, "save"):  # a PIL image (an Image feature nested in a struct)
            import io

            buf = io.BytesIO()
            image.save(buf, format="PNG")
            image_bytes = buf.getvalue()
        if image_bytes is None and (not image_path or not os.path.isfile(image_path)):
            return Item(index, source, skip="missing_image")
        caption = _first_value(row, self.caption_paths)
        skip = None
        if isinstance(caption, (list, tuple)) and caption and isinstance(caption[0], str):
            caption = caption[0]
        if isinstance(caption, bytes):
            caption, skip = decode_caption(caption)
        elif isinstance(caption, str):
            caption = clean_caption(caption)
        else:
            caption, skip = None, "missing_caption"
        return Item(index, source, image=image_bytes, image_path=image_path, caption=caption,
                    skip=skip)


def undecoded(ds: Any, column: str) -> Any:
    """`ds` with an Image, Audio or Video `column` (or a list of them) cast to undecoded
    `{"bytes", "path"}` values, so the original file bytes are read, never decoded pixels."""
    import datasets

    kinds = tuple(getattr(datasets, k) for k in ("Image", "Audio", "Video") if hasattr(datasets, k))
    feat = ds.features[column]
    if isinstance(feat, kinds):
        return ds.cast_column(column, type(feat)(decode=False))
    inner = getattr(feat, "feature", None)
    if isinstance(inner, kinds):
        return ds.cast_column(column, type(feat)(type(inner)(decode=False)))
    return ds
