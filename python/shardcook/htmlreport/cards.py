"""One sample on the page: its picture (a latent in false colour, as `preview` shows it), its
caption or conversation, key and shard; clicked, all its parts. Every text from the dataset is
escaped; tensors and pickles are read only by the layouts' safe loaders."""

from __future__ import annotations

from html import escape
from typing import Any

from shardcook.dataset.summary import describe_parts
from shardcook.htmlreport.picks import Picked
from shardcook.htmlreport.pictures import (
    false_colour,
    image_parts,
    image_uri,
    open_image,
    players,
    video_frames,
)
from shardcook.htmlreport.stats import caption_of, turn_text, turns_of
from shardcook.layouts import Layout, registry_function

#: What reading one sample's picture can raise: our decode errors, and PIL's, numpy's and
#: torch's on damaged bytes or a tensor of the wrong shape.
PICTURE_ERRORS: tuple[type[Exception], ...] = (OSError, ValueError, RuntimeError, IndexError,
                                               KeyError, TypeError)
CAPTION_CHARS = 280
TEXT_PART_CHARS = 4000
TEXT_EXTENSIONS = ("txt", "json")


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{escape(alt)}">'


def picture(layout: Layout | None, key: str, parts: dict[str, bytes]) -> tuple[Any, str | None]:
    """(the layout's picture: a PIL image or a latent tensor, or None; its caption, or None
    when the layout gives none)."""
    if layout is not None and layout.reading.preview is not None:
        shown, caption = registry_function(layout.reading.preview)(key, parts)
        return shown, caption
    images = image_parts(parts) or video_frames(parts)
    return (open_image(images[0]) if images else None), None


def _media(parts: dict[str, bytes]) -> str:
    """All of a chatml sample's images, its first video's first frames and its players."""
    shown = [_img(image_uri(open_image(b), 160), "image") for b in image_parts(parts)[1:]]
    shown += [_img(image_uri(open_image(b), 160), "video frame") for b in video_frames(parts)]
    for element, part, uri in players(parts):
        shown.append(f'<{element} controls src="{uri}"></{element}>' if uri else
                     f"<p>{escape(part)}: {len(parts[part]):,} bytes, too large to embed</p>")
    return f'<div class="media">{"".join(shown)}</div>' if shown else ""


def _turns(turns: list[dict[str, Any]], limit: int | None = None) -> str:
    rows = []
    for turn in turns[:limit]:
        speaker, text = turn_text(turn)
        if limit is not None and len(text) > CAPTION_CHARS:
            text = text[:CAPTION_CHARS] + "…"
        rows.append(f'<div class="turn"><b>{escape(speaker)}</b> {escape(text)}</div>')
    return f'<div class="turns">{"".join(rows)}</div>'


def _parts_table(parts: dict[str, bytes]) -> str:
    rows = []
    for name, what in describe_parts(parts).items():
        text = ""
        if name.rsplit(".", 1)[-1] in TEXT_EXTENSIONS:
            body = parts[name].decode("utf-8", "replace")
            cut = "…" if len(body) > TEXT_PART_CHARS else ""
            text = f"<pre>{escape(body[:TEXT_PART_CHARS] + cut)}</pre>"
        rows.append(f"<tr><td>{escape(name)}</td><td>{escape(what)}</td><td>{text}</td></tr>")
    return ("<table><tr><th>part</th><th>what</th><th>content</th></tr>"
            f"{''.join(rows)}</table>")


def card(layout: Layout | None, sample: Picked) -> str:
    """The sample's card: a `<details>` whose summary is the tile and whose body lists all its
    parts."""
    where = f"{sample.shard} #{sample.index}"
    if sample.error is not None:
        return (f'<div class="card unreadable"><p>{escape(where)}</p>'
                f"<p>unreadable: {escape(sample.error)}</p></div>")
    parts = sample.parts
    try:
        shown, caption = picture(layout, sample.key, parts)
        if shown is not None and not hasattr(shown, "convert"):  # a latent [C, h, w]
            from PIL import Image

            shown = Image.fromarray(false_colour(shown))
        tile = _img(image_uri(shown), sample.key) if shown is not None else (
            '<div class="nopicture">no picture</div>')
        media = _media(parts)
    except PICTURE_ERRORS as e:
        tile = f'<div class="nopicture">unreadable: {escape(str(e) or type(e).__name__)}</div>'
        caption, media = None, ""
    turns = turns_of(parts)
    if turns is not None:
        text = _turns(turns, 2)
    else:
        caption = caption if caption is not None else caption_of(parts) or ""
        short = caption[:CAPTION_CHARS] + ("…" if len(caption) > CAPTION_CHARS else "")
        text = f'<div class="caption">{escape(short)}</div>'
    return (f'<details class="card"><summary>{tile}{text}'
            f'<div class="key">{escape(sample.key)}<br>{escape(where)}</div></summary>'
            f'<div class="parts"><button type="button" class="close">close</button>'
            f"<h3>{escape(sample.key)} <small>{escape(where)}</small></h3>"
            f"{_turns(turns) if turns is not None else ''}{media}{_parts_table(parts)}</div>"
            "</details>")
