"""`shardcook report`: one self-contained HTML page of a finished dataset (its facts, `validate`'s
verdict, the run's skips and timings, duplicates, latent statistics, plots and a grid of samples)
for a folder or a URL. It reads the metadata, the index, and the samples it shows and measures,
each by its `.tar.idx` offsets; nothing from the dataset is unpickled or run. A NeMo AutoModel
cache's page is `cachepage`'s."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from shardcook.dataset import metadata
from shardcook.dataset.arguments import DEFAULT_REPORT_SAMPLES, ReportOptions
from shardcook.dataset.cachefolder import CacheFolder
from shardcook.dataset.check.validate import validate_view
from shardcook.dataset.kind import AUTOMODEL_CACHE, JSONL, dataset_kind
from shardcook.dataset.location import cache_view, dataset_view
from shardcook.dataset.summary import read_metadata, summarize
from shardcook.dataset.view import DatasetView
from shardcook.encoders.models import MODELS
from shardcook.errors import ConfigError, DatasetError
from shardcook.fields import check_rules
from shardcook.files import write_atomic
from shardcook.htmlreport import picks
from shardcook.htmlreport.cachepage import cache_report
from shardcook.htmlreport.cards import PICTURE_ERRORS, card
from shardcook.htmlreport.indexed import IndexedView
from shardcook.htmlreport.page import Content, render
from shardcook.htmlreport.stats import LatentCheck, Tally, latent_check
from shardcook.layouts import Layout, by_encoding, registry_function
from shardcook.layouts.names import OURS_DIR, REPORT_HTML
from shardcook.storage.local import check_local_path
from shardcook.storage.location import Location, locate

__all__ = ["DEFAULT_SAMPLES", "make_report", "write_report"]

DEFAULT_SAMPLES = DEFAULT_REPORT_SAMPLES
#: Samples read for the statistics (sizes, captions, duplicates, latents), the shown ones
#: among them.
STATS_SAMPLES = 512
SEED = 0
#: Where the page goes in a dataset without `--out`, as a run's `--report-html` writes it.
REPORT_PAGE = f"{OURS_DIR}/{REPORT_HTML}"

T = TypeVar("T")


def _or_none(read: Callable[[Path], T | None], root: Path) -> T | None:
    """A record that may be damaged: validate reports the damage, the page goes without it."""
    try:
        return read(root)
    except DatasetError:
        return None


def _add_latent(check: LatentCheck, layout: Layout, sample: picks.Picked) -> None:
    assert layout.reading.preview is not None  # a layout with latents shows them
    try:
        latent, _ = registry_function(layout.reading.preview)(sample.key, sample.parts)
        check.add(latent)
    except PICTURE_ERRORS:
        return  # its card says why


def _content(view: DatasetView, samples: int, split: str | None) -> Content:
    from shardcook import __version__

    root = view.root
    counts, splits, dataset_yaml = read_metadata(root)
    if split is not None and split not in splits:
        raise DatasetError(f"{view.name} has no {split} split; it has "
                           f"{', '.join(splits) or 'none'}.")
    validation = validate_view(view, energon_check=False)
    summary = validation.summary or summarize(view, counts, splits, dataset_yaml)
    manifest = _or_none(metadata.read_manifest, root) or {}
    encoding = _or_none(metadata.recorded_encoding, root)
    layout = by_encoding(encoding) if encoding else None
    shards = [s for s in (splits[split] if split else counts) if s in counts]
    wanted = picks.positions(counts, shards, max(samples, STATS_SAMPLES), SEED)
    n_shown = min(samples, len(wanted))
    shown = {len(wanted) * i // n_shown for i in range(n_shown)}
    tally = Tally()
    spec = layout.encode if layout is not None else None
    latents = latent_check(MODELS[spec.model], spec.latents_scaled, manifest) if spec else None
    cards = []
    for i, sample in enumerate(picks.read(view, wanted)):
        if sample.error is not None:
            tally.unreadable.append((f"{sample.shard} #{sample.index}", sample.error))
        else:
            tally.add(sample.key, sample.parts)
            if latents is not None and layout is not None:
                _add_latent(latents, layout, sample)
        if i in shown:
            cards.append(card(layout, sample))
    return Content(
        name=view.name, summary=summary, layout=layout, split=split, manifest=manifest,
        run_report=_or_none(metadata.read_run_report, root), validation=validation,
        validate_command=f"shardcook validate {shlex.quote(view.name)}",
        shard_samples=[counts[s] for s in shards], tally=tally, latents=latents, cards=cards,
        version=__version__)


def make_report(dataset: str | os.PathLike[str] | Location, *, samples: int = DEFAULT_SAMPLES,
                split: str | None = None, scratch_dir: str | os.PathLike[str] | None = None
                ) -> str:
    """The report page of `dataset` (a finalized dataset's folder or URL, or a NeMo AutoModel
    cache's) as HTML.

    Args:
        samples: How many samples the grid shows (seeded, spread over the shards).
        split: Show and measure only this split's samples (default: every split's).
        scratch_dir: Where a URL's metadata is copied (default: the temporary folder).

    Raises:
        ConfigError: a bad location or sample count, a JSONL dataset, or a split of a cache.
        DatasetError: the dataset is not finalized, or has no such split; a cache's
            metadata.json is not AutoModel's.
    """
    what = dataset_kind(dataset)
    dataset = what.location
    if what.kind == JSONL:
        raise ConfigError(
            f"{dataset} is a JSONL dataset, and `shardcook report` makes the page of a folder of "
            f"tar shards or of a NeMo AutoModel cache; `shardcook info`, `validate` and "
            f"`preview` take {dataset}.")
    check_rules("--samples", samples, ReportOptions.__dataclass_fields__["samples"])
    if what.kind == AUTOMODEL_CACHE:
        if split is not None:
            raise ConfigError(f"{dataset} is a NeMo AutoModel cache, which has no splits; "
                              "leave out --split-part.")
        with cache_view(dataset, scratch_dir) as cache:
            return cache_report(CacheFolder.read(cache.root, cache.fetched), cache.name, samples,
                                SEED, cache.shown)
    with dataset_view(dataset, scratch_dir=scratch_dir) as view:
        return render(_content(IndexedView(view), samples, split))


def default_out(dataset: str | os.PathLike[str] | Location) -> str:
    """Where `write_report` writes without `out`: the dataset's own `.shardcook/report.html`, as
    a run's `--report-html` does (the path, or the URL)."""
    return locate(dataset, "The dataset folder").store.child(REPORT_PAGE)


def _write_into(dataset: Location, page: bytes) -> str:
    """`page` written as the dataset's `.shardcook/report.html`; returns where."""
    try:
        dataset.store.write_bytes(REPORT_PAGE, page)
    except Exception as e:  # noqa: BLE001 - a disk's or a client's error, as one sentence
        said = dataset.store.failure("The report page", REPORT_PAGE, "write", e)
        raise ConfigError(said.removesuffix(".") + "; give --out FILE.html to write the page "
                          "elsewhere.") from None
    return default_out(dataset)


def write_report(dataset: str | os.PathLike[str] | Location,
                 out: str | os.PathLike[str] | None = None, **options: Any) -> str:
    """Writes `make_report(dataset, **options)` to `out`, else into the dataset as its
    `.shardcook/report.html` (`default_out`, where a run's `--report-html` writes it, in a
    bucket too); returns where.

    Raises:
        ConfigError: `out` is not an .html file in a folder that exists, or the page cannot be
            written.
    """
    where = locate(dataset, "The dataset folder")
    if out is None:
        return _write_into(where, make_report(where, **options).encode("utf-8"))
    target = Path(out)
    check_local_path(target, "--out")
    if target.suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out {str(target)!r} must name an .html file.")
    if not target.parent.is_dir() or target.is_dir():
        raise ConfigError(f"--out {str(target)!r} must name a file in a folder that exists.")
    page = make_report(where, **options)
    try:
        write_atomic(target, page.encode("utf-8"))
    except OSError as e:
        raise ConfigError(f"--out {str(target)!r} cannot be written ({e.strerror or e}).") from None
    return str(target)
