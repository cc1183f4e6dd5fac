"""The page: its sections (at a glance, health, plots, samples) as one HTML document with its
CSS, script and images inline; `document` and the sections' pieces are the cache page's too. A
Content-Security-Policy lets it load nothing and run only its own script, so a caption that
escaped escaping still could not run or fetch anything."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from shardcook.dataset.check.validate import ValidationReport
from shardcook.dataset.summary import DatasetSummary
from shardcook.htmlreport.plots import channel_plot, histogram
from shardcook.htmlreport.stats import LatentCheck, Tally
from shardcook.layouts import Layout

#: Examples shown per skip reason, per group of duplicates, and groups shown.
EXAMPLES = 3

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px;color:#222}
h1{font-size:22px}.row{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}
.row h3{margin-top:0}h2{border-bottom:1px solid #ccc;margin-top:28px}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;
vertical-align:top}
.ok{color:#2c6e2c;font-weight:bold}.warn{color:#a33;font-weight:bold}
.plots{display:flex;flex-wrap:wrap;gap:8px}.plots img{width:420px}.single{width:420px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(200px,1fr));gap:10px}
.card{border:1px solid #ddd;border-radius:4px;padding:6px;background:#fafafa}
.card summary{list-style:none;cursor:pointer}.card summary::-webkit-details-marker{display:none}
.card summary img{width:100%;aspect-ratio:1;object-fit:contain;background:#eee}
.nopicture{aspect-ratio:1;display:flex;align-items:center;justify-content:center;
background:#eee;color:#777;text-align:center}
.caption,.turns{font-size:12px;overflow-wrap:anywhere;white-space:pre-wrap}
.key{font-size:11px;color:#666;overflow-wrap:anywhere}
.card[open] .parts{position:fixed;inset:4vh 6vw;overflow:auto;background:#fff;z-index:10;
padding:16px;box-shadow:0 0 0 100vmax rgba(0,0,0,.45)}
.parts pre{white-space:pre-wrap;max-height:240px;overflow:auto;margin:0;font-size:12px}
.parts .close{float:right}.media img{margin:4px}.turn{margin:4px 0}
"""
SCRIPT = """
for (const d of document.querySelectorAll("details.card")) {
  d.addEventListener("toggle", () => {
    if (!d.open) return;
    for (const o of document.querySelectorAll("details.card[open]")) if (o !== d) o.open = false;
  });
}
document.addEventListener("click", (e) => {
  const b = e.target.closest(".close");
  if (b) b.closest("details").open = false;
});
document.addEventListener("keydown", (e) => {
  if (e.key !== "Escape") return;
  for (const d of document.querySelectorAll("details.card[open]")) d.open = false;
});
"""


def _policy() -> str:
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    return ("default-src 'none'; img-src data:; media-src data:; style-src 'unsafe-inline'; "
            f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'")


@dataclass
class Content:
    """Everything the page shows."""

    name: str
    summary: DatasetSummary
    layout: Layout | None
    split: str | None
    manifest: dict[str, Any]
    run_report: dict[str, Any] | None
    validation: ValidationReport
    validate_command: str
    shard_samples: list[int]
    tally: Tally
    latents: LatentCheck | None
    cards: list[str]
    version: str


def table_rows(pairs: Sequence[tuple[str, str]]) -> str:
    return "".join(f"<tr><th>{escape(k)}</th><td>{v}</td></tr>" for k, v in pairs)


def count_span(name: str, value: int) -> str:
    return f'<span data-count="{escape(name)}">{value:,}</span>'


def _glance(c: Content) -> str:
    s, m = c.summary, c.manifest
    layout = (f"{c.layout.name} (encoding {c.layout.encoding})" if c.layout else
              "not a layout shardcook knows")
    pairs = [("dataset", escape(c.name)), ("layout", escape(layout)),
             ("sample type", escape(s.dataset_type)),
             ("samples", count_span("samples", s.samples)),
             ("shards", count_span("shards", s.shards)),
             ("bytes on disk", (f'{count_span("bytes", s.bytes_on_disk)} '
                               f"({s.bytes_per_sample:,.0f} per sample)"))]
    if m:
        pairs.append(("written by", escape(f"shardcook {m.get('shardcook_version', '?')}, "
                                           f"format {m.get('format_version', '?')}")))
        source = json.dumps(m.get("source"), ensure_ascii=False)
        pairs.append(("source", escape(source)))
    rows = "".join(f'<tr data-split="{escape(n)}"><td>{escape(n)}</td>'
                   f'<td>{count_span(f"{n}.samples", p.samples)}</td>'
                   f'<td>{count_span(f"{n}.shards", p.shards)}</td></tr>'
                   for n, p in s.splits.items())
    parts = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>"
                    for k, v in s.parts.items())
    out = [f'<h2>At a glance</h2><div class="row"><div><table>{table_rows(pairs)}</table></div>',
           (f"<div><h3>Splits</h3><table><tr><th>split</th><th>samples</th><th>shards</th></tr>"
           f"{rows}</table></div>"),
           f"<div><h3>Parts of the first sample</h3><table>{parts}</table></div>" if parts else ""]
    rep = c.run_report or {}
    stages = rep.get("stage_seconds")
    if isinstance(stages, dict) and stages:
        timing = [(str(k), f"{v} s") for k, v in stages.items()]
        timing.append(("whole run (wall)", f"{rep.get('wall_seconds', '?')} s"))
        out.append("<div><h3>Time per stage</h3>"
                   f"<table>{table_rows([(k, escape(v)) for k, v in timing])}</table></div>")
    out.append("</div>")
    if m.get("config"):
        config = json.dumps(m["config"], indent=2, ensure_ascii=False)
        out.append("<details><summary>The run's config (manifest.json)</summary>"
                   f"<pre>{escape(config)}</pre></details>")
    return "".join(out)


def examples(groups: list[list[str]]) -> str:
    items = "".join(f"<li>{escape(', '.join(keys[:EXAMPLES + 1]))}"
                    f"{' …' if len(keys) > EXAMPLES + 1 else ''}</li>"
                    for keys in groups[:EXAMPLES])
    return f"<ul>{items}</ul>" if items else ""


def skips(rep: dict[str, Any] | None) -> str:
    if rep is None:
        return "<p>No report.json: this dataset was not written by a shardcook run.</p>"
    by_reason = rep.get("skipped_by_reason") or {}
    if not by_reason:
        return '<p class="ok">No input was skipped.</p>'
    skipped = rep.get("skipped") or []
    rows = []
    for reason, n in by_reason.items():
        examples = [str(s.get("source") or s.get("key") or s.get("file")) for s in skipped
                    if isinstance(s, dict) and s.get("reason") == reason][:EXAMPLES]
        rows.append(f"<tr><td>{escape(str(reason))}</td><td>{escape(str(n))}</td>"
                    f"<td>{escape(', '.join(examples))}</td></tr>")
    return ("<table><tr><th>reason</th><th>inputs</th><th>e.g.</th></tr>"
            f"{''.join(rows)}</table>")


def latent_section(check: LatentCheck) -> str:
    if not check.values:
        return "<p>No latent could be read.</p>"
    mean, std = check.overall()
    want_mean, want_std = check.expected
    approximate = ' data-approximate' if check.norm.approximate else ''
    facts = (f"<p{approximate}>{escape(check.norm.describe())}: expected mean {want_mean:.3g}, "
             f"standard deviation {want_std:.3g} in every channel. Measured over "
             f"{check.samples:,} samples: mean {mean:.3g}, standard deviation {std:.3g}.</p>")
    warnings = check.warnings()
    verdict = ("".join(f'<p class="warn" data-warning="latents">warning: {escape(w)}</p>'
                       for w in warnings) or '<p class="ok">Within what the normalisation '
                                                 "implies.</p>")
    rows = "".join(f"<tr{' class=warn' if check.channel_off(m, s) else ''}><td>{i}</td>"
                   f"<td>{m:.3g}</td><td>{s:.3g}</td></tr>"
                   for i, (m, s) in enumerate(check.channels()))
    plot = channel_plot(check.channels(), check.expected)
    return (f"{verdict}{facts}<div class=plots><img src=\"{plot}\" alt=\"latent channels\">"
            f"<table><tr><th>channel</th><th>mean</th><th>std</th></tr>{rows}</table></div>")


def _health(c: Content) -> str:
    v, t = c.validation, c.tally
    if v.ok:
        verdict = '<p class="ok" data-validate="whole">whole</p>'
    else:
        verdict = "".join(f'<p class="warn" data-problem>{escape(p)}</p>' for p in v.problems)
    verdict += "".join(f"<p>warning: {escape(w)}</p>" for w in v.warnings)
    pictures, captions = t.repeated(t.pictures), t.repeated(t.captions)
    total = c.summary.splits[c.split].samples if c.split else c.summary.samples
    dups = (f"<p>Among the {count_span('compared', t.read)} samples read of {total:,}"
            f"{' in the split' if c.split else ''}, compared with one another: "
            f"{count_span('duplicate-pictures', sum(len(g) - 1 for g in pictures))} exact "
            "duplicate pictures (same stored bytes), "
            f"{count_span('duplicate-captions', sum(len(g) - 1 for g in captions))} duplicate "
            "captions.</p>"
            f"{examples(pictures)}{examples(captions)}"
            + ("" if t.read >= total else
               f'<p data-scope="duplicates">Copies are counted only when two of them are among '
               f"the samples read, {t.read:,} of {total:,}: a picture or caption that a share "
               f"<i>f</i> of the dataset holds is read about {t.read:,}·<i>f</i> times, so "
               "what is repeated at scale shows (a placeholder image, a boilerplate caption), "
               "and a rare duplicate mostly does not. The page reads the index and these "
               "samples, never every sample.</p>"))
    out = [(f"<h2>Health</h2><h3>Validation</h3>{verdict}"
           f"<p>The checks of <code>{escape(c.validate_command)}</code>, but each shard "
           "checked against its <code>.tar.idx</code> and its size rather than scanned, "
           "index.sqlite by lookups at each shard's first and last row rather than counted "
           "(and not searched for a part held twice), and each split's first sample decoded "
           "by shardcook rather than loaded through Energon: run that command for all "
           "three.</p>"),
           f"<h3>Skipped inputs</h3>{skips(c.run_report)}",
           f"<h3>Duplicates</h3>{dups}"]
    if c.latents is not None:
        out.append(f"<h3>Latent statistics</h3>{latent_section(c.latents)}")
    if t.unreadable:
        out.append("<h3>Unreadable samples</h3><ul>" + "".join(
            f"<li>{escape(w)}: {escape(e)}</li>" for w, e in t.unreadable) + "</ul>")
    return "".join(out)


def chart(values: Sequence[float], title: str, unit: str, counted: str) -> str:
    """A histogram of `values`; one value, which a histogram would draw as a single bar over a
    meaningless axis, is said in words."""
    if len(set(values)) == 1:
        return (f'<p class="single" data-single="{escape(title)}"><b>{escape(title)}</b>: '
                f"{values[0]:.4g} {escape(unit)} for all {len(values):,} {counted}</p>")
    return f'<img src="{histogram(values, title, unit, counted)}" alt="{escape(title)}">'


def _plots(c: Content) -> str:
    t = c.tally
    charts: list[tuple[Sequence[float], str, str, str]] = [
        (t.widths, "width", "pixels", "samples"), (t.heights, "height", "pixels", "samples"),
        ([w / h for w, h in zip(t.widths, t.heights, strict=True)], "aspect ratio",
         "width / height", "samples"),
        (t.caption_words, "caption length", "words", "samples"),
        (c.shard_samples, "samples per shard", "samples", "shards"),
        (t.turns, "conversation turns", "turns", "samples")]
    images = "".join(chart(values, title, unit, counted)
                     for values, title, unit, counted in charts if values)
    return (f"<h2>Plots</h2><p>Sizes and captions of the {t.read:,} samples read; samples per "
            f"shard of every shard{' of the split' if c.split else ''}.</p>"
            f'<div class="plots">{images}</div>')


def render(c: Content) -> str:
    """The whole page."""
    split = f", split {c.split}" if c.split else ""
    samples = (f"<h2>Samples</h2><p>{len(c.cards)} samples{escape(split)}, seeded and spread "
               "over the shards; click one for all its parts.</p>"
               f'<div class="grid">{"".join(c.cards)}</div>')
    return document(c.name, c.version, f"{_glance(c)}{_health(c)}{_plots(c)}{samples}")


def document(name: str, version: str, body: str) -> str:
    """The page of `name` around its sections `body`: its policy, style and script."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{_policy()}">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(name)}: shardcook report</title><style>{STYLE}</style></head>"
            f"<body><h1>{escape(name)}</h1><p>Made by shardcook {escape(version)}.</p>"
            f"{body}<script>{SCRIPT}</script></body></html>\n")
