"""`chatml`'s source: chat records from a JSONL file or a Hugging Face dataset, in planned order
(docs/FORMAT.md, chatml).

Inputs are put in their file/row order; each goes to `val` when a stable hash of its id is below
`--val-fraction`, to `test` when it is below `--val-fraction + --test-fraction`, else to `train`
(or: `--train-rows N --val-rows M --test-rows K` take the first N inputs for train, the next M
for val and the next K for test; `--hf-val-split` takes val from another split of the dataset,
test then follows the train rows). Inputs get keys `<split>-{n:06d}` (n = position among that
split's inputs, so a skipped input leaves a gap and keys never depend on what other ranks skip).
The job (`pipeline/chatml.py`) cuts each split's inputs into work units.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from shardcook.config import ChatmlConfig, RunConfig
from shardcook.conversations import MEDIA_KINDS
from shardcook.errors import ConfigError, DatasetError
from shardcook.files import read_regular_file
from shardcook.sources.base import Item
from shardcook.sources.chat_records import MEDIA_KEYS, ChatRecord, MediaRef, build, parse_jsonl_line
from shardcook.sources.folder import Folder, open_folder, read_ahead
from shardcook.storage.location import Location

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
#: Conversation columns looked for in a Hugging Face dataset, in order.
CONVERSATION_COLUMNS = ("conversation", "messages", "conversations")


def split_of(sample_id: str, val_fraction: float, test_fraction: float = 0.0) -> str:
    """`val` when the first 8 bytes of sha256(id), as a fraction of 2**64, are below
    `val_fraction`, `test` when below `val_fraction + test_fraction`, else `train`. Stable
    across runs, machines and Python versions (and a val sample stays val when test is added)."""
    h = int.from_bytes(hashlib.sha256(sample_id.encode("utf-8")).digest()[:8], "big") / 2.0**64
    if h < val_fraction:
        return "val"
    return "test" if h < val_fraction + test_fraction else "train"


def sample_key(split: str, n: int) -> str:
    return f"{split}-{n:06d}"


@dataclass
class ChatItem(Item):
    """An input conversation: its turns and its media (bytes or paths) by kind."""

    sample_key: str = ""
    split: str = "train"
    media: dict[str, list[MediaRef]] = field(default_factory=dict)
    turns: list[dict[str, Any]] | None = None

    @property
    def key(self) -> str:
        return self.sample_key

    def read_media(self) -> dict[str, list[bytes]]:
        return {kind: [r if isinstance(r, bytes) else self.reader(r) for r in refs]
                for kind, refs in self.media.items()}


@dataclass(frozen=True)
class Input:
    """Where one planned input is: a table (`main` or `val`) and its row there."""

    table: str
    row: int


class ChatmlSource:
    """The inputs in planned order: train inputs (input order), then val, then test inputs."""

    def __init__(self, cfg: RunConfig) -> None:
        self.cfg = cfg
        self.opts = cfg.chatml or ChatmlConfig()
        s = cfg.source
        self.tables: dict[str, Any] = {}
        self.sizes: dict[str, int] = {}
        #: How media paths are read: the JSONL's folder's `read` (local files for a dataset),
        #: and read ahead of the run (`Folder.preload`, `threads` at once) where that pays.
        self.reader: Callable[[str], bytes] = read_regular_file
        self.preload: Callable[[str], bytes | None] = lambda _: None
        self.threads = 1
        if s.source_type == "jsonl":
            self._open_jsonl(s.where("input_path"), s.max_samples)
        elif s.source_type == "huggingface":
            self._open_hf(s.max_samples)
        else:
            raise ConfigError("chatml reads --input (a JSONL file) or --hf-dataset; give one.")
        self.ids, self.counts = self._scan()
        self.planned = self._plan()
        sizes = {sp: sum(1 for _, s in self.planned if s == sp) for sp in SPLITS}
        # the manifest lists test only when there is one (as before test splits existed)
        self.split_sizes = {sp: n for sp, n in sizes.items() if sp != "test" or n}
        #: Where each split starts in the planned order.
        self.split_start = {"train": 0, "val": sizes["train"],
                            "test": sizes["train"] + sizes["val"]}
        self.shortfall = self._shortfall()
        if self.shortfall:
            log.warning(self.shortfall)
        self.images = self._image_layout()
        has = {k: any(c.get(k) for c in self.counts) for k in ("video", "audio")}
        self.video_layout = self.opts.video_layout if has["video"] else None
        self.audio_extension = self._audio_extension() if has["audio"] else None

    # ---- JSONL -------------------------------------------------------------------------
    def _open_jsonl(self, path: Location | None, max_samples: int | None) -> None:
        """The JSONL file, local or a URL: its folder is where relative media paths lead."""
        parent, name = path.split() if path else (None, "")
        if parent is None or not name:
            raise ConfigError("chatml needs --input FILE.jsonl or --hf-dataset.")
        folder: Folder = open_folder(parent, "--input")
        self.kind, self.folder, self.file_name = "jsonl", folder, name
        self.path, self.reader = folder.where(name), folder.read
        self.preload, self.threads = folder.preload, folder.threads
        offsets = []
        try:
            with folder.open(name) as f:
                pos = 0
                for line in f:
                    if line.strip():
                        offsets.append(pos)
                        if max_samples is not None and len(offsets) >= max_samples:
                            break
                    pos += len(line)
        except OSError:
            raise ConfigError(f"--input {path!r} is not a file; give a JSONL file.") from None
        if not offsets:
            raise ConfigError(f"--input {path!r} holds no lines.")
        self.tables["main"] = offsets
        self.sizes["main"] = len(offsets)

    # ---- Hugging Face ------------------------------------------------------------------
    def _open_hf(self, max_samples: int | None) -> None:
        s = self.cfg.source
        if not s.hf_dataset:
            raise ConfigError("chatml needs --input FILE.jsonl or --hf-dataset.")
        self.kind, self.name = "huggingface", s.hf_dataset
        self._hf_table("main", s.hf_split, max_samples)
        if self.opts.hf_val_split is not None:
            self._hf_table("val", self.opts.hf_val_split, None)

    def _hf_table(self, table: str, split: str, max_samples: int | None) -> None:
        """One split, its media columns left undecoded, checked to have what chatml needs."""
        from shardcook.hftoken import resolve_token
        from shardcook.sources.huggingface import load, undecoded

        s = self.cfg.source
        token, _ = resolve_token(self.cfg.auth.hf_token_file)
        ds = load(s.hf_dataset or "", split, s.data_files(), token=token)
        del token
        feats = ds.features
        self.columns = {kind: self._column(kind, feats) for kind in MEDIA_KINDS}
        if all(c is None for c in self.columns.values()):
            raise ConfigError(
                f"No image, video or audio column among {', '.join(feats)}; name the image "
                "column with --image-column.")
        o = self.opts
        if o.question_column is not None:
            missing = [c for c in (o.question_column, o.answer_column) if c not in feats]
            if missing:
                raise ConfigError(f"No column {missing[0]!r} among {', '.join(feats)}; check "
                                  "--question-column and --answer-column.")
            self.text_columns = [o.question_column, o.answer_column or ""]
        else:
            conv = o.conversation_column or next(
                (c for c in CONVERSATION_COLUMNS if c in feats), None)
            if conv is None or conv not in feats:
                raise ConfigError(
                    f"No conversation column {conv or '/'.join(CONVERSATION_COLUMNS)} among "
                    f"{', '.join(feats)}; name it with --conversation-column (or give "
                    "--question-column and --answer-column).")
            self.text_columns = [conv]
        for column in self.columns.values():
            if column is not None:
                ds = undecoded(ds, column)
        if len(ds) == 0:
            raise ConfigError(f"Hugging Face dataset {s.hf_dataset!r} split {split!r} has no rows.")
        self.id_column = "id" if "id" in feats else None
        self.tables[table] = ds
        self.sizes[table] = min(len(ds), max_samples) if max_samples is not None else len(ds)

    def _column(self, kind: str, feats: Any) -> str | None:
        named = self.cfg.data_format.image_column if kind == "image" else None
        if named is not None and named not in feats:
            raise ConfigError(f"No image column {named!r} among {', '.join(feats)}; check "
                              "--image-column.")
        return named or next((c for c in MEDIA_KEYS[kind] if c in feats), None)

    def _hf_records(self, table: str, rows: list[int]) -> Iterator[ChatRecord]:
        ds = self.tables[table]
        cols = [c for c in (*self.columns.values(), *self.text_columns, self.id_column) if c]
        view = ds.select_columns(list(dict.fromkeys(cols)))
        split = self.cfg.source.hf_split if table == "main" else self.opts.hf_val_split
        for i in rows:
            row = view[int(i)]
            media = {kind: row[c] if c else None for kind, c in self.columns.items()}
            rid = str(row[self.id_column]) if self.id_column else str(i)
            yield build(rid, f"{self.name}[{split}][{i}]", row, media, self.opts, None)

    # ---- shared ------------------------------------------------------------------------
    def _records(self, table: str, rows: list[int]) -> Iterator[ChatRecord]:
        if self.kind == "huggingface":
            return self._hf_records(table, rows)
        return self._jsonl_records(rows)

    def _jsonl_records(self, rows: list[int]) -> Iterator[ChatRecord]:
        offsets = self.tables["main"]
        try:
            with self.folder.open(self.file_name) as f:
                for i in rows:
                    f.seek(offsets[i])
                    yield parse_jsonl_line(i, f.readline(), f"{self.path}:{i + 1}",
                                           self.folder, self.opts,
                                           self.cfg.data_format.image_column)
        except OSError as e:  # deleted or unreachable since it was scanned
            raise DatasetError(f"--input {self.path!r} cannot be read any more "
                               f"({e.strerror or e}); restore it and run the same command again "
                               "to go on where this run stopped.") from None

    def _scan(self) -> tuple[dict[str, list[str]], list[dict[str, int]]]:
        """Every input's id per table, and the media counts of the main then val inputs
        (a Hugging Face table's from its Arrow columns, reading no media)."""
        ids: dict[str, list[str]] = {}
        counts: list[dict[str, int]] = []
        for table, n in self.sizes.items():
            if self.kind == "huggingface":
                table_ids, table_counts = self._hf_scan(table, n)
                ids[table] = table_ids
                counts += table_counts
                continue
            ids[table] = []
            for rec in self._records(table, list(range(n))):
                ids[table].append(rec.id)
                counts.append({} if rec.skip else {k: len(v) for k, v in rec.media.items()})
        return ids, counts

    def _hf_scan(self, table: str, n: int) -> tuple[list[str], list[dict[str, int]]]:
        import pyarrow.compute as pc

        arrow = self.tables[table].data.table
        ids = ([str(x) for x in arrow.column(self.id_column).slice(0, n).to_pylist()]
               if self.id_column else [str(i) for i in range(n)])
        counts: list[dict[str, int]] = [{} for _ in range(n)]
        for kind, name in self.columns.items():
            if name is None:
                continue
            column = arrow.column(name).slice(0, n)
            if hasattr(column.type, "value_type"):  # a list of media
                values = [c or 0 for c in pc.list_value_length(column).to_pylist()]
            else:
                values = [int(v) for v in column.is_valid().to_pylist()]
            for c, v in zip(counts, values, strict=True):
                c[kind] = v
        return ids, counts

    def _plan(self) -> list[tuple[Input, str]]:
        """(input, split) of every used input: train first, then val, then test."""
        main = self.ids["main"]
        o = self.opts

        def rows(table: str, start: int, n: int) -> list[Input]:
            return [Input(table, i) for i in range(start, min(len(self.ids[table]), start + n))]

        if "val" in self.tables:
            train = rows("main", 0, o.train_rows or len(main))
            val = rows("val", 0, len(self.ids["val"]) if o.val_rows is None else o.val_rows)
            test = rows("main", len(train), o.test_rows or 0)
        elif o.train_rows is not None:
            train = rows("main", 0, o.train_rows)
            val = rows("main", len(train), o.val_rows or 0)
            test = rows("main", len(train) + len(val), o.test_rows or 0)
        else:
            splits = [split_of(i, o.val_fraction, o.test_fraction) for i in main]
            train, val, test = ([Input("main", i) for i, s in enumerate(splits) if s == sp]
                                for sp in SPLITS)
        return [(x, "train") for x in train] + [(x, "val") for x in val] + [
            (x, "test") for x in test]

    def _shortfall(self) -> str | None:
        """A warning when --train-rows/--val-rows ask for more rows than the inputs hold (they
        cap the splits, so the run goes on with what there is), else None."""
        asked = {"train": self.opts.train_rows, "val": self.opts.val_rows,
                 "test": self.opts.test_rows}
        short = [f"--{split}-rows {n} but only {self.split_sizes.get(split, 0)} {split} rows"
                 for split, n in asked.items()
                 if n is not None and self.split_sizes.get(split, 0) < n]
        if not short:
            return None
        return (f"asked for {' and '.join(short)}: the inputs hold fewer, so every one is used; "
                "lower the option to silence this.")

    def _image_layout(self) -> str | None:
        known = [c["image"] for c in self.counts if "image" in c]
        if not any(known):
            return None
        return "single" if all(c == 1 for c in known) else "multi"

    def _audio_extension(self) -> str | None:
        """The extension of the first readable audio input: the dataset's one audio part (an
        input in another format is skipped)."""
        from shardcook.media import MediaError, audio

        for item in self.items(0, len(self.planned)):
            if item.skip is not None or not item.media.get("audio"):
                continue
            try:
                return audio.probe(item.read_media()["audio"][0]).extension
            except (MediaError, OSError):
                continue
        return None

    def __len__(self) -> int:
        return len(self.planned)

    def describe(self) -> dict[str, Any]:
        """For manifest.json: the input, the media layouts and field_map, the split sizes."""
        d: dict[str, Any]
        if self.kind == "jsonl":
            d = {"type": "jsonl", "path": str(self.path)}
        else:
            d = {"type": "huggingface", "dataset": self.name, "split": self.cfg.source.hf_split,
                 "media_columns": {k: c for k, c in self.columns.items() if c},
                 "text_columns": self.text_columns}
            if "val" in self.tables:
                d["val_split"] = self.opts.hf_val_split
        d.update(layout=self.images or "none", video_layout=self.video_layout,
                 audio=self.audio_extension, field_map=self.field_map(),
                 split_sizes=self.split_sizes)
        if self.opts.train_rows is not None:
            d["rows"] = {"train": self.opts.train_rows, "val": self.opts.val_rows}
            if self.opts.test_rows is not None:
                d["rows"]["test"] = self.opts.test_rows
        if self.shortfall:
            d["rows_shortfall"] = self.shortfall
        return d

    def field_map(self) -> dict[str, str]:
        from shardcook.layouts.chatml import field_map

        return field_map(self.images, self.cfg.image.image_format, self.video_layout,
                         self.audio_extension, self.opts.video_frames_part)

    def items(self, start: int, stop: int) -> Iterator[ChatItem]:
        """The items at planned positions start <= v < stop."""
        stop = min(stop, len(self.planned))
        v = start
        while v < stop:  # consecutive inputs of one table are read together
            table = self.planned[v][0].table
            end = v
            while end < stop and self.planned[end][0].table == table:
                end += 1
            rows = [x.row for x, _ in self.planned[v:end]]
            records = zip(range(v, end), self._records(table, rows), strict=True)
            yield from read_ahead(self._item, records, self.threads)
            v = end

    def _item(self, numbered: tuple[int, ChatRecord]) -> ChatItem:
        """The item at planned position w, its media read already where that pays (a bucket)."""
        w, rec = numbered
        split = self.planned[w][1]
        n = w - self.split_start[split]
        media = rec.media if rec.skip else {
            kind: [r if isinstance(r, bytes) else self.preload(r) or r for r in refs]
            for kind, refs in rec.media.items()}
        return ChatItem(w, rec.source, sample_key=sample_key(split, n), split=split,
                        media=media, turns=rec.turns, skip=rec.skip, skip_detail=rec.detail,
                        reader=self.reader)



__all__ = ["ChatItem", "ChatmlSource", "split_of"]
