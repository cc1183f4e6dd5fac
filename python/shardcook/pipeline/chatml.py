"""`chatml`: images plus chat conversations into Megatron-Bridge's ChatML layout
(docs/FORMAT.md §3).

Inputs (a JSONL file or a Hugging Face dataset) are put in their file/row order; each goes to
`val` when a stable hash of its id is below `--val-fraction`, else to `train`. Each split's inputs
are cut into work units of `shard_size`; unit j of a split becomes `<split>-shard-{j:06d}.tar`
and its inputs get keys `<split>-{n:06d}` (n = position among that split's inputs, so a skipped
input leaves a gap and keys never depend on what other ranks skip). Units are numbered across
both splits (train first) for distribution (u % world_size) and resume markers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import pickle
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shardcook.config import RunConfig
from shardcook.conversations import ConversationError, count_images, find_conversation, normalize
from shardcook.errors import ConfigError, DatasetError
from shardcook.pipeline.plan import WorkUnit
from shardcook.pipeline.run import Loaded, Outcome
from shardcook.sources.base import MISSING_IMAGE, Item, read_regular_file

log = logging.getLogger(__name__)

ENCODING = "chatml"
SPLITS = ("train", "val")
SAMPLE_TYPE = "megatron.bridge.data.energon.task_encoder_utils:ChatMLWebdataset"
#: `--split-parts` of the finalized dataset: each split's shards by name.
SPLIT_PATTERNS = {"train": "train-shard-.*", "val": "val-shard-.*"}
CONVERSATION_PART = "conversation.json"
MULTI_PART = "jpgs"
PICKLE_PROTOCOL = 4

# Skip reasons of this pipeline (the image stage's are shared with raw).
BAD_JSON = "bad_json"
BAD_CONVERSATION = "bad_conversation"
IMAGE_COUNT_MISMATCH = "image_count_mismatch"
DECODE_ERROR = "decode_error"
ENCODE_ERROR = "encode_error"


@dataclass
class ChatmlOptions:
    """The chatml-only options (the shared ones live in RunConfig)."""

    conversation_column: str | None = None
    val_fraction: float = 0.01
    max_pixels: int | None = None

    def check(self) -> None:
        if not 0.0 <= self.val_fraction < 1.0:
            raise ConfigError(
                f"--val-fraction must be at least 0 and below 1, not {self.val_fraction}.")
        if self.max_pixels is not None and self.max_pixels < 1:
            raise ConfigError(f"--max-pixels must be at least 1, not {self.max_pixels}.")


def split_of(sample_id: str, val_fraction: float) -> str:
    """`val` when the first 8 bytes of sha256(id), as a fraction of 2**64, are below
    `val_fraction`; else `train`. Stable across runs, machines and Python versions."""
    h = int.from_bytes(hashlib.sha256(sample_id.encode("utf-8")).digest()[:8], "big")
    return "val" if h / 2.0**64 < val_fraction else "train"


def sample_key(split: str, n: int) -> str:
    return f"{split}-{n:06d}"


@dataclass(frozen=True)
class SplitUnit(WorkUnit):
    """A work unit of one split: planned inputs start <= v < stop, written to shard `number`."""

    split: str = "train"
    shard: int = 0

    @property
    def prefix(self) -> str:
        return f"{self.split}-shard-"

    @property
    def number(self) -> int:
        return self.shard


@dataclass
class ChatItem(Item):
    """An input conversation; `image_bytes()` gives the list of its images' bytes."""

    sample_key: str = ""
    split: str = "train"
    images: tuple = ()
    conversation: list | None = None
    skip_detail: str | None = None

    @property
    def key(self) -> str:  # type: ignore[override]
        return self.sample_key

    def image_bytes(self) -> list[bytes]:  # type: ignore[override]
        return [bytes(i) if isinstance(i, (bytes, bytearray)) else read_regular_file(i)
                for i in self.images]


@dataclass
class Record:
    """One input as found: its id, images (paths or bytes) and raw conversation, or a skip."""

    id: str
    source: str
    images: list = field(default_factory=list)
    conversation: Any = None
    skip: str | None = None
    detail: str | None = None


def _image_entry(entry: Any, base: Path | None) -> Any:
    """An image reference -> bytes or a path (relative paths resolve against `base`)."""
    if isinstance(entry, dict):
        entry = entry.get("bytes") or entry.get("path")
    if isinstance(entry, (bytes, bytearray)):
        return bytes(entry)
    if hasattr(entry, "save"):  # a decoded PIL image
        import io

        buf = io.BytesIO()
        entry.save(buf, format="PNG")
        return buf.getvalue()
    if isinstance(entry, str) and entry:
        p = Path(entry)
        return str(p if p.is_absolute() or base is None else base / p)
    raise ValueError(f"image entry {entry!r} is neither a path nor bytes")


def _record(index: int, source: str, obj: Any, images_field: Any, conversation: Any,
            base: Path | None, id_value: Any = None) -> Record:
    rid = str(id_value) if id_value is not None else str(index)
    rec = Record(rid, source)
    if images_field is None:
        rec.images = []
    else:
        raw = images_field if isinstance(images_field, (list, tuple)) else [images_field]
        try:
            rec.images = [_image_entry(e, base) for e in raw]
        except ValueError as e:
            rec.skip, rec.detail = MISSING_IMAGE, str(e)
    rec.conversation = conversation
    return rec


def parse_jsonl_line(index: int, line: bytes, source: str, base: Path,
                     conversation_column: str | None) -> Record:
    """One JSONL line -> a Record (a skip when it is not a JSON object or has no conversation)."""
    try:
        obj = json.loads(line)
    except ValueError as e:
        return Record(str(index), source, skip=BAD_JSON, detail=str(e))
    if not isinstance(obj, dict):
        return Record(str(index), source, skip=BAD_JSON, detail="the line is not a JSON object")
    images = obj.get("images") if obj.get("images") is not None else obj.get("image")
    try:
        conversation = find_conversation(obj, conversation_column)
    except ConversationError as e:
        rec = _record(index, source, obj, images, None, base, obj.get("id"))
        rec.skip, rec.detail = rec.skip or BAD_CONVERSATION, rec.detail or str(e)
        return rec
    return _record(index, source, obj, images, conversation, base, obj.get("id"))


class ChatmlSource:
    """The inputs in planned order: train inputs (input order), then val inputs."""

    def __init__(self, cfg: RunConfig, opts: ChatmlOptions):
        self.cfg, self.opts = cfg, opts
        s = cfg.source
        if s.source_type == "jsonl":
            self._open_jsonl(s.input_path, s.max_samples)
        elif s.source_type == "huggingface":
            self._open_hf(s.hf_dataset, s.hf_split, s.hf_data_files or None, s.max_samples)
        else:
            raise ConfigError("chatml reads --input (a JSONL file) or --hf-dataset; give one.")
        ids, counts = self._scan()
        splits = [split_of(i, opts.val_fraction) for i in ids]
        self.order = ([i for i, sp in enumerate(splits) if sp == "train"]
                      + [i for i, sp in enumerate(splits) if sp == "val"])
        self.num_train = splits.count("train")
        self.split_sizes = {"train": self.num_train, "val": len(splits) - self.num_train}
        known = [c for c in counts if c is not None]
        self.layout = "single" if known and all(c == 1 for c in known) else "multi"

    # ---- JSONL -------------------------------------------------------------------------
    def _open_jsonl(self, path: str | None, max_samples: int | None) -> None:
        if not path:
            raise ConfigError("chatml needs --input FILE.jsonl or --hf-dataset.")
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"--input {path!r} is not a file; give a JSONL file.")
        self.kind, self.path, self.base = "jsonl", p, p.resolve().parent
        offsets = []
        with open(p, "rb") as f:
            pos = 0
            for line in f:
                if line.strip():
                    offsets.append(pos)
                    if max_samples is not None and len(offsets) >= max_samples:
                        break
                pos += len(line)
        if not offsets:
            raise ConfigError(f"--input {path!r} holds no lines.")
        self.offsets = offsets

    def _jsonl_records(self, indices: list[int]) -> Iterator[Record]:
        with open(self.path, "rb") as f:
            for i in indices:
                f.seek(self.offsets[i])
                yield parse_jsonl_line(i, f.readline(), f"{self.path}:{i + 1}", self.base,
                                       self.opts.conversation_column)

    # ---- Hugging Face ------------------------------------------------------------------
    def _open_hf(self, name: str | None, split: str, data_files, max_samples) -> None:
        import datasets
        from shardcook.encoders.auth import resolve_token
        from shardcook.sources.huggingface import load

        if not name:
            raise ConfigError("chatml needs --input FILE.jsonl or --hf-dataset.")
        token, _ = resolve_token(self.cfg.auth.hf_token_file)
        ds = load(name, split, data_files, token=token)
        del token
        feats = ds.features
        image_col = self.cfg.data_format.image_column or next(
            (c for c in ("images", "image") if c in feats), None)
        if image_col is None or image_col not in feats:
            raise ConfigError(
                f"No image column {image_col or 'images/image'} among {', '.join(feats)}; "
                "name it with --image-column.")
        conv_col = self.opts.conversation_column or next(
            (c for c in ("conversation", "messages", "conversations") if c in feats), None)
        if conv_col is None or conv_col not in feats:
            raise ConfigError(
                f"No conversation column {conv_col or 'conversation/messages/conversations'} "
                f"among {', '.join(feats)}; name it with --conversation-column.")
        feat = feats[image_col]
        if isinstance(feat, datasets.Image):
            ds = ds.cast_column(image_col, datasets.Image(decode=False))
        elif isinstance(getattr(feat, "feature", None), datasets.Image):
            ds = ds.cast_column(image_col, type(feat)(datasets.Image(decode=False)))
        if len(ds) == 0:
            raise ConfigError(f"Hugging Face dataset {name!r} split {split!r} has no rows.")
        n = min(len(ds), max_samples) if max_samples is not None else len(ds)
        self.kind, self.ds, self.name, self.split = "huggingface", ds, name, split
        self.image_col, self.conv_col = image_col, conv_col
        self.id_col = "id" if "id" in feats else None
        self.offsets = range(n)

    def _hf_records(self, indices: list[int]) -> Iterator[Record]:
        cols = [self.image_col, self.conv_col] + ([self.id_col] if self.id_col else [])
        rows = self.ds.select_columns(cols)
        for i in indices:
            row = rows[int(i)]
            yield _record(i, f"{self.name}[{self.split}][{i}]", row, row[self.image_col],
                          row[self.conv_col], None, row[self.id_col] if self.id_col else None)

    # ---- shared ------------------------------------------------------------------------
    def _records(self, indices: list[int]) -> Iterator[Record]:
        return self._jsonl_records(indices) if self.kind == "jsonl" else self._hf_records(indices)

    def _scan(self) -> tuple[list[str], list[int | None]]:
        """(id, declared image count) of every input, in input order."""
        if self.kind == "huggingface":
            import pyarrow.compute as pc

            table = self.ds.data.table
            ids = ([str(x) for x in table.column(self.id_col).slice(0, len(self)).to_pylist()]
                   if self.id_col else [str(i) for i in range(len(self))])
            counts: list[int | None] = []
            column = table.column(self.image_col).slice(0, len(self))
            if hasattr(column.type, "value_type"):  # a list of images
                counts = [None if c is None else int(c)
                          for c in pc.list_value_length(column).to_pylist()]
            else:
                counts = [None if v is None else 1 for v in column.is_valid().to_pylist()]
            return ids, counts
        ids, counts = [], []
        for rec in self._jsonl_records(list(range(len(self)))):
            ids.append(rec.id)
            counts.append(None if rec.skip else len(rec.images))
        return ids, counts

    def __len__(self) -> int:
        return len(self.offsets)

    def describe(self) -> dict:
        """For manifest.json: the input, the layout and field_map, the split sizes."""
        if self.kind == "jsonl":
            d: dict = {"type": "jsonl", "path": str(self.path)}
        else:
            d = {"type": "huggingface", "dataset": self.name, "split": self.split,
                 "image_column": self.image_col, "conversation_column": self.conv_col}
        d.update(layout=self.layout,
                 field_map=field_map(self.layout, self.cfg.image.image_format),
                 split_sizes=self.split_sizes)
        return d

    def units(self, shard_size: int) -> list[SplitUnit]:
        """Each split's planned inputs in consecutive units; numbered train first, then val."""
        units: list[SplitUnit] = []
        start = 0
        for split in SPLITS:
            size = self.split_sizes[split]
            for j, a in enumerate(range(0, size, shard_size)):
                units.append(SplitUnit(len(units), start + a, start + min(a + shard_size, size),
                                       split=split, shard=j))
            start += size
        return units

    def items(self, start: int, stop: int) -> Iterator[ChatItem]:
        """The items at planned positions start <= v < stop."""
        stop = min(stop, len(self.order))
        for v, rec in zip(range(start, stop), self._records(self.order[start:stop])):
            split = "train" if v < self.num_train else "val"
            n = v if split == "train" else v - self.num_train
            yield self._item(v, sample_key(split, n), split, rec)

    def _item(self, v: int, key: str, split: str, rec: Record) -> ChatItem:
        item = ChatItem(v, rec.source, sample_key=key, split=split, images=tuple(rec.images),
                        skip=rec.skip, skip_detail=rec.detail)
        if item.skip is not None:
            return item
        try:
            turns = normalize(rec.conversation)
        except ConversationError as e:
            item.skip, item.skip_detail = BAD_CONVERSATION, str(e)
            return item
        placeholders = count_images(turns)
        if placeholders != len(rec.images):
            item.skip = IMAGE_COUNT_MISMATCH
            item.skip_detail = (f"{placeholders} image part(s) in the conversation, "
                                f"{len(rec.images)} image(s)")
            return item
        item.conversation = turns
        return item


def bounded_size(height: int, width: int, max_pixels: int | None) -> tuple[int, int]:
    """(h, w) scaled down, keeping the aspect ratio, so that h * w <= max_pixels (never up)."""
    if max_pixels is None or height * width <= max_pixels:
        return height, width
    s = math.sqrt(max_pixels / (height * width))
    h, w = max(1, math.floor(height * s)), max(1, math.floor(width * s))
    while h * w > max_pixels:  # floating point can overshoot by one row
        if h >= w:
            h -= 1
        else:
            w -= 1
    return h, w


def _probe(data: bytes) -> tuple[int, int]:
    """(h, w) of an image after EXIF orientation, from its header (Pillow reads no pixels)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        w, h = im.size
        orientation = im.getexif().get(0x0112, 1)
    return (w, h) if orientation in (5, 6, 7, 8) else (h, w)


def conversation_json(turns: list) -> bytes:
    """conversation.json bytes: UTF-8, not ASCII-escaped, deterministic."""
    return json.dumps(turns, ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class _Failed:
    """Why one image of a sample could not be used: a report.json skip reason and a sentence."""

    reason: str
    message: str


class ChatmlProcessor:
    """Loaded conversations -> (image part, conversation.json) parts."""

    def __init__(self, cfg: RunConfig, opts: ChatmlOptions, layout: str):
        from shardcook import imaging

        self.imaging = imaging
        self.image = cfg.image
        self.opts = opts
        self.layout = layout
        self.format = cfg.image.image_format if layout == "single" else "jpg"
        self.workers = cfg.image.workers or os.cpu_count() or 1
        self.stage_seconds = {"preprocess": 0.0}
        self._pool = ThreadPoolExecutor(self.workers)

    def _one(self, data: bytes) -> bytes | _Failed:
        """One image through the Rust core (bounded by --max-pixels) and re-encoded; or why not."""
        from shardcook.pipeline.raw import classify_error

        im = self.imaging
        try:
            h, w = bounded_size(*_probe(data), self.opts.max_pixels)
        except Exception as e:  # noqa: BLE001 - an unreadable header skips this sample
            return _Failed(DECODE_ERROR, f"unreadable image header ({e})")
        for _ in range(2):
            (r,) = im.preprocess([data], mode="bucket", buckets=[(w, h)],
                                 max_pixels=self.image.max_pixels, workers=1)
            if r.error is not None or r.pixels is None:
                return _Failed(classify_error(r.error_kind), r.error or "no pixels")
            want = bounded_size(*r.orig_size, self.opts.max_pixels)
            if r.pixels.shape[:2] == want:
                break
            h, w = want  # the header probe saw another orientation than the decoder: redo
        try:
            return im.encode_image(r.pixels, format=self.format, quality=self.image.image_quality)
        except Exception as e:  # noqa: BLE001 - any encode failure skips just this sample
            return _Failed(ENCODE_ERROR, f"encode: {e}")

    def process(self, batch: list[Loaded]) -> list[Outcome]:
        outcomes: list[Outcome | None] = [None] * len(batch)
        jobs: list[tuple[int, int]] = []
        flat: list[bytes] = []
        for n, loaded in enumerate(batch):
            item: ChatItem = loaded.item  # type: ignore[assignment]
            reason = item.skip or loaded.skip
            if reason is not None:
                outcomes[n] = Outcome(item, skip=reason, detail=item.skip_detail or loaded.detail)
                continue
            for j, data in enumerate(loaded.image or []):
                jobs.append((n, j))
                flat.append(data)
        t0 = time.perf_counter()
        results = list(self._pool.map(self._one, flat))
        self.stage_seconds["preprocess"] += time.perf_counter() - t0
        per: dict[int, list] = {}
        for (n, _), r in zip(jobs, results):
            per.setdefault(n, []).append(r)
        for n, loaded in enumerate(batch):
            if outcomes[n] is not None:
                continue
            item = loaded.item  # type: ignore[assignment]
            images = per.get(n, [])
            bad = next(((j, r) for j, r in enumerate(images) if isinstance(r, _Failed)), None)
            if bad is not None:
                j, failed = bad
                outcomes[n] = Outcome(item, skip=failed.reason, detail=f"image {j}: {failed.message}")
                continue
            if self.layout == "single":
                parts = [(f"image.{self.format}", images[0])]
            else:
                parts = [(MULTI_PART, pickle.dumps([bytes(b) for b in images],
                                                   protocol=PICKLE_PROTOCOL))]
            parts.append((CONVERSATION_PART, conversation_json(item.conversation)))
            outcomes[n] = Outcome(item, parts=parts)
        return outcomes  # type: ignore[return-value]


def field_map(layout: str, image_format: str) -> dict[str, str]:
    """dataset.yaml's field_map for a layout."""
    imgs = f"image.{image_format}" if layout == "single" else MULTI_PART
    return {"imgs": imgs, "conversation": CONVERSATION_PART}


def finalize_chatml(out: Path, fields: dict[str, str], *, sqlite: bool = True) -> list[str]:
    """`finalize` with split parts train/val by shard name and Megatron-Bridge's dataset.yaml;
    its validation checks each split's first sample with the ChatML layout's checker. Returns
    the warnings (also logged).

    Validation cannot load samples through Energon without Megatron-Bridge's class installed;
    it then reads each split's first sample with our reader and says so in a warning.

    Raises:
        DatasetError: no shards, or validation found problems.
    """
    from shardcook.dataset import finalize, list_shards

    shards = list_shards(out)
    patterns = {s: p for s, p in SPLIT_PATTERNS.items()
                if any(n.startswith(f"{s}-shard-") for n in shards)}
    if not patterns:
        raise DatasetError(f"{out} holds no train or val shards to finalize")
    result = finalize(out, encoding=ENCODING, split_parts=patterns, sample_type=SAMPLE_TYPE,
                      field_map=fields, subflavors={}, sqlite=sqlite, force=True, validate=True)
    new = ["no sample went to val (see --val-fraction); split.yaml has no val part"] if (
        "val" not in patterns) else []
    new += result.validation.warnings if result.validation else []
    for w in new:
        log.warning(w)
    return list(result.index.warnings) + new


def run_chatml(cfg: RunConfig, opts: ChatmlOptions) -> dict | None:
    """`shardcook chatml`: the whole run for this rank; returns report.json's content on rank 0."""
    from shardcook.pipeline.driver import run_pipeline

    opts.check()
    if cfg.output.shard_size < 1:
        raise ConfigError(f"--shard-size must be at least 1, not {cfg.output.shard_size}.")
    if cfg.image.image_format not in ("jpg", "png"):
        raise ConfigError(f"--image-format must be jpg or png, not {cfg.image.image_format!r}.")
    if not 1 <= cfg.image.image_quality <= 100:
        raise ConfigError(f"--image-quality must be between 1 and 100, not {cfg.image.image_quality}.")
    if cfg.image.workers is not None and cfg.image.workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {cfg.image.workers}.")
    if cfg.source.max_samples is not None and cfg.source.max_samples < 1:
        raise ConfigError(f"--max-samples must be at least 1, not {cfg.source.max_samples}.")
    if not cfg.output.output_dir:
        raise ConfigError("--output-dir is required.")
    made: dict[str, ChatmlSource] = {}

    def make_source(c: RunConfig) -> ChatmlSource:  # bad setup raises here, before any work
        made["source"] = ChatmlSource(c, opts)
        return made["source"]

    def make_processor(c: RunConfig) -> ChatmlProcessor:
        return ChatmlProcessor(c, opts, made["source"].layout)

    def finish(out: Path, report: dict) -> None:
        src = made["source"]
        finalize_chatml(out, field_map(src.layout, cfg.image.image_format))

    workers = cfg.image.workers or os.cpu_count() or 1
    return run_pipeline(
        cfg, encoding=ENCODING, make_processor=make_processor,
        batch_size=max(16, 4 * workers), manifest_extra={"chatml": asdict(opts)},
        make_source=make_source, make_units=lambda s: s.units(cfg.output.shard_size),
        finish=finish)
