"""`shardcook report` of a NeMo AutoModel diffusion cache: the page an Energon dataset gets, from
what a cache holds. Counts, buckets, captions and input sizes come from the metadata shards
(every entry: they are read to count anyway); the verdict is `validate`'s own; the latent check
and the cards read a seeded pick of the cache files, at most `max(samples, STATS_FILES)` of them,
each loaded with `weights_only=True`. A video cache file's `first_frame` is its card's picture;
an image cache holds no pixels, and its card says so rather than show its latents as one. A
cache in object storage is read through its local copy (`dataset.cachecopy`), each file read
downloaded for its read."""

from __future__ import annotations

import shlex
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from shardcook.dataset import metadata
from shardcook.dataset.cachefolder import CacheFolder, bucket_of, cache_path
from shardcook.dataset.cachesummary import CacheSummary, describe_keys, summarize_cache
from shardcook.dataset.check.automodelcache import cache_problems
from shardcook.encoders.models import ModelFamily
from shardcook.errors import DatasetError
from shardcook.htmlreport import picks
from shardcook.htmlreport.cards import CAPTION_CHARS, PICTURE_ERRORS
from shardcook.htmlreport.page import (
    chart,
    count_span,
    document,
    examples,
    latent_section,
    skips,
    table_rows,
)
from shardcook.htmlreport.pictures import image_uri
from shardcook.htmlreport.stats import LatentCheck, Tally, latent_check

#: Cache files read for the latent statistics, the shown ones among them: fewer than an Energon
#: dataset's samples, as each file holds its text encoder's whole output too (megabytes), and
#: the captions and sizes come from the metadata shards.
STATS_FILES = 128
#: AutoModel's processors store every family's latents normalised (FLUX's `(z - shift) *
#: scale`, Wan's and Qwen-Image's per channel, FLUX.2's by its batch norm), as the trainer
#: reads them.
SCALED = True


@dataclass
class CacheFile:
    """One cache file read for the page: its entry, and its dict or why it could not be read."""

    entry: dict[str, Any]
    name: str
    data: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class CachePage:
    """What the page shows of one cache."""

    name: str
    cache: CacheFolder
    summary: CacheSummary
    entries: list[dict[str, Any]]
    manifest: dict[str, Any]
    problems: list[str]
    latents: LatentCheck | None
    cards: list[str] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)
    versions: set[str] = field(default_factory=set)


def cache_report(cache: CacheFolder, name: str, samples: int, seed: int,
                 shown: Callable[[str], str] = str) -> str:
    """The page of `cache`, named `name`, with `samples` cards picked with `seed`; `shown`
    names the cache as `name` in a sentence naming a local copy's file (`CacheCopy.shown`)."""
    from shardcook import __version__

    root = cache.root
    try:
        manifest = metadata.read_manifest(root) or {}
    except DatasetError:
        manifest = {}  # another tool's cache has none: the check is then approximate
    family = cache.family
    summary = summarize_cache(cache)
    summary.keys = {key: shown(what) for key, what in summary.keys.items()}
    page = CachePage(name=name, cache=cache, summary=summary,
                     entries=[entry for _, entry in cache.entries()], manifest=manifest,
                     problems=[shown(p) for p in cache_problems(root, fetched=cache.fetched)],
                     latents=latent_check(family, SCALED, manifest) if family else None)
    _read_files(page, samples, seed, shown)
    body = f"{_glance(page)}{_health(page)}{_plots(page)}{_samples(page)}"
    return document(name, __version__, body)


def _read_files(page: CachePage, samples: int, seed: int, shown: Callable[[str], str]
                ) -> None:
    """Reads the picked files one at a time (none kept: a cache file is megabytes), adding each
    latent to the check and making the shown files' cards."""
    wanted = [i for _, i in picks.positions({"": len(page.entries)}, [""],
                                            max(samples, STATS_FILES), seed)]
    n_shown = min(samples, len(wanted))
    on_cards = {len(wanted) * i // n_shown for i in range(n_shown)}
    family = page.cache.family
    for i, number in enumerate(wanted):
        file = _load(page.cache, page.entries[number])
        if file.error is not None:
            file.error = shown(file.error)
        if file.data is None:
            page.unreadable.append((file.name, file.error or "unreadable"))
        else:
            version = file.data.get("model_version")
            if isinstance(version, str):
                page.versions.add(version)
            if page.latents is not None and family is not None:
                _add_latent(page.latents, family, file.data)
        if i in on_cards:
            page.cards.append(_card(file, family))


def _load(cache: CacheFolder, entry: dict[str, Any]) -> CacheFile:
    root = cache.root
    path = cache_path(root, entry)
    if path is None:
        return CacheFile(entry, "(no cache_file)", error="its entry names no cache_file")
    inside = path.is_relative_to(root.resolve())
    file = CacheFile(entry, str(path.relative_to(root.resolve())) if inside else str(path))
    if not inside:  # validate names it; the page reads nothing from elsewhere
        file.error = f"{path} is outside the cache"
        return file
    try:
        file.data = cache.load(path)
    except DatasetError as e:
        file.error = str(e)
    return file


def _add_latent(check: LatentCheck, family: ModelFamily, data: dict[str, Any]) -> None:
    """The file's latent, channels first, if it has the family's rank (validate names one that
    has not)."""
    import torch

    assert family.automodel is not None  # found by its AutoModel model_type
    keys = family.automodel.keys
    latent = data.get(keys.latent)
    if (isinstance(latent, torch.Tensor) and latent.dim() == keys.latent_rank
            and latent.is_floating_point()):
        check.add(latent.movedim(keys.channel_axis, 0))


def _where(entry: dict[str, Any]) -> str:
    bucket, original = bucket_of(entry), entry.get("original_resolution")
    out = f"bucket {bucket[0]}x{bucket[1]}" if bucket else "no bucket"
    if isinstance(original, list) and len(original) == 2:
        out += f", original {original[0]}x{original[1]}"
    return out


def _tile(data: dict[str, Any], family: ModelFamily | None) -> str:
    """The file's first frame (a video processor's `first_frame`, [H, W, 3] uint8), else why
    there is no picture."""
    import torch
    from PIL import Image

    frame = data.get("first_frame")
    if (isinstance(frame, torch.Tensor) and frame.dtype == torch.uint8 and frame.dim() == 3
            and frame.shape[-1] == 3):
        try:
            return f'<img src="{image_uri(Image.fromarray(frame.numpy()))}" alt="first frame">'
        except PICTURE_ERRORS as e:
            return f'<div class="nopicture">unreadable: {escape(str(e) or type(e).__name__)}</div>'
    why = ("an image cache holds the VAE's latents, not pixels, and showing them needs the VAE"
           if family is not None and family.input_kind == "image" else
           "the file holds no first frame")
    return f'<div class="nopicture">no picture: {escape(why)}</div>'


def _card(file: CacheFile, family: ModelFamily | None) -> str:
    """A file's card: the tile, its caption, file and bucket; clicked, all its keys."""
    where = _where(file.entry)
    prompt = file.entry.get("prompt")
    if not isinstance(prompt, str) and file.data is not None:
        prompt = file.data.get("prompt")
    caption = prompt if isinstance(prompt, str) else ""
    short = caption[:CAPTION_CHARS] + ("…" if len(caption) > CAPTION_CHARS else "")
    if file.data is None:
        tile = f'<div class="nopicture">unreadable: {escape(file.error or "")}</div>'
        keys = ""
    else:
        tile = _tile(file.data, family)
        rows = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>"
                       for k, v in describe_keys(file.data).items())
        keys = f"<table><tr><th>key</th><th>what</th></tr>{rows}</table>"
    return (f'<details class="card"><summary>{tile}<div class="caption">{escape(short)}</div>'
            f'<div class="key">{escape(file.name)}<br>{escape(where)}</div></summary>'
            f'<div class="parts"><button type="button" class="close">close</button>'
            f"<h3>{escape(file.name)} <small>{escape(where)}</small></h3>"
            f"<p>{escape(caption)}</p>{keys}</div></details>")


def _glance(p: CachePage) -> str:
    s, family = p.summary, p.cache.family
    pairs = [("cache", escape(p.name)), ("kind", "NeMo AutoModel diffusion cache"),
             ("model_type", escape(f"{s.model_type} (processor {s.processor})")),
             ("model family", escape(family.name if family else "none shardcook knows"))]
    if p.versions:
        pairs.append(("model_version", escape(", ".join(sorted(p.versions)))))
    pairs += [("samples", count_span("samples", len(p.entries))),
              ("metadata shards", count_span("shards", len(p.cache.shards))),
              ("buckets", count_span("buckets", len(s.buckets))),
              ("written by", escape(f"shardcook {p.manifest.get('shardcook_version', '?')}"
                                    if s.written_by_shardcook is not None else
                                    "another tool (no .shardcook/ record)"))]
    buckets = "".join(f'<tr data-bucket="{escape(b)}"><td>{escape(b)}</td>'
                      f"<td>{count_span(f'bucket.{b}', n)}</td></tr>"
                      for b, n in s.buckets.items())
    keys = table_rows([(k, escape(v)) for k, v in s.keys.items()])
    out = [f'<h2>At a glance</h2><div class="row"><div><table>{table_rows(pairs)}</table></div>',
           ("<div><h3>Buckets</h3><table><tr><th>bucket</th><th>samples</th></tr>"
            f"{buckets}</table></div>"),
           f"<div><h3>Keys of the first file</h3><table>{keys}</table></div>" if keys else ""]
    if s.written_by_shardcook:
        facts = table_rows([(k, escape(str(v))) for k, v in s.written_by_shardcook.items()])
        out.append(f"<div><h3>Recorded by shardcook</h3><table>{facts}</table></div>")
    out.append("</div>")
    return "".join(out)


def _duplicates(p: CachePage) -> str:
    captions: dict[str, list[str]] = defaultdict(list)
    for number, entry in enumerate(p.entries):
        prompt, source = entry.get("prompt"), entry.get("image_path", entry.get("video_path"))
        if isinstance(prompt, str) and prompt.strip():
            captions[prompt.strip()].append(str(source) if source else f"entry {number}")
    repeated = Tally.repeated(captions)
    return (f"<p>Among the captions of all {len(p.entries):,} entries: "
            f"{count_span('duplicate-captions', sum(len(g) - 1 for g in repeated))} duplicate "
            "captions.</p>"
            f"{examples(repeated)}")


def _latent_part(p: CachePage) -> str:
    if p.latents is not None:
        return latent_section(p.latents)
    return (f"<p>metadata.json's model_type {escape(repr(p.cache.model_type))} is no family "
            "shardcook knows, so there is nothing to check the latents against.</p>")


def _health(p: CachePage) -> str:
    if not p.problems:
        verdict = '<p class="ok" data-validate="whole">whole</p>'
    else:
        verdict = "".join(f'<p class="warn" data-problem>{escape(x)}</p>' for x in p.problems)
    command = f"shardcook validate {shlex.quote(p.name)}"
    out = [f"<h2>Health</h2><h3>Validation</h3>{verdict}"
           f"<p>The checks of <code>{escape(command)}</code>: the counts, every listed file "
           "present and none unlisted, and the first file of each bucket loaded and checked; "
           "with <code>--deep</code> it checks every file.</p>",
           f"<h3>Skipped inputs</h3>{skips(_run_report(p.cache.root))}",
           f"<h3>Duplicates</h3>{_duplicates(p)}",
           f"<h3>Latent statistics</h3>{_latent_part(p)}"]
    if p.unreadable:
        out.append("<h3>Unreadable files</h3><ul>" + "".join(
            f"<li>{escape(w)}: {escape(e)}</li>" for w, e in p.unreadable) + "</ul>")
    return "".join(out)


def _run_report(root: Path) -> dict[str, Any] | None:
    try:
        return metadata.read_run_report(root)
    except DatasetError:
        return None


def _plots(p: CachePage) -> str:
    sizes = [e.get("original_resolution") for e in p.entries]
    pairs = [(int(s[0]), int(s[1])) for s in sizes if isinstance(s, list) and len(s) == 2
             and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in s)]
    words = [len(e["prompt"].split()) for e in p.entries if isinstance(e.get("prompt"), str)]
    per_shard = [len(s.entries or []) for s in p.cache.shards]
    charts: list[tuple[Sequence[float], str, str, str]] = [
        ([w for w, _ in pairs], "input width", "pixels", "samples"),
        ([h for _, h in pairs], "input height", "pixels", "samples"),
        ([w / h for w, h in pairs], "input aspect ratio", "width / height", "samples"),
        (words, "caption length", "words", "samples"),
        (per_shard, "samples per metadata shard", "samples", "shards")]
    images = "".join(chart(values, title, unit, counted)
                     for values, title, unit, counted in charts if values)
    return ("<h2>Plots</h2><p>The inputs' sizes before bucketing (original_resolution) and the "
            "captions of every entry in the metadata shards.</p>"
            f'<div class="plots">{images}</div>')


def _samples(p: CachePage) -> str:
    return (f"<h2>Samples</h2><p>{len(p.cards)} cache files, seeded and spread over the "
            "entries; click one for all its keys.</p>"
            f'<div class="grid">{"".join(p.cards)}</div>')
