"""What the report measures on the samples it reads: picture sizes (from the sample's metadata,
else the image header), caption lengths, conversation turns, exact duplicates of the stored
picture bytes and of captions, and for latent layouts the per-channel mean and standard deviation
of the stored latents against what the layout's normalisation implies."""

from __future__ import annotations

import hashlib
import io
import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from shardcook.htmlreport.pictures import SINGLE_IMAGE_PARTS, image_parts
from shardcook.layouts.bridge_flux import LATENT_PART
from shardcook.layouts.chatml import CONVERSATION_PART, MULTI_IMAGE_PART, TURNS_KEY
from shardcook.layouts.mlperf import FLUX_SCALING_FACTOR, FLUX_SHIFT_FACTOR, MEAN_PART

#: The parts whose stored bytes are a sample's picture, for exact duplicates.
PICTURE_PARTS = (*SINGLE_IMAGE_PARTS, MULTI_IMAGE_PART, "latents.pth", LATENT_PART, MEAN_PART)
#: Text parts that hold a caption, in the order they are looked for.
CAPTION_PARTS = ("txt", "caption.txt")
#: JSON parts whose `caption` field is the caption (Megatron-Bridge's `json`).
CAPTION_JSON_PARTS = ("json", "meta.json")
#: The latents' spread (all channels together) may differ from what the normalisation implies
#: by this factor either way before the page warns: a scale left out or applied twice (FLUX:
#: 1/0.3611 = 2.8) is well beyond it, the spread of real images well within.
STD_RATIO = 2.0
#: ... and their mean by this many expected standard deviations.
MEAN_OFFSET = 0.5
#: One channel is marked when it is off by these (per-channel statistics of real images vary).
CHANNEL_STD_RATIO = 3.0
CHANNEL_MEAN_OFFSET = 1.5


def _json(parts: dict[str, bytes], name: str) -> Any:
    try:
        return json.loads(parts[name])
    except (KeyError, ValueError, RecursionError):
        return None


def turns_of(parts: dict[str, bytes]) -> list[dict[str, Any]] | None:
    """A chatml sample's turns, or None when it holds no conversation."""
    doc = _json(parts, CONVERSATION_PART)
    turns = doc.get(TURNS_KEY) if isinstance(doc, dict) else doc
    return [t for t in turns if isinstance(t, dict)] if isinstance(turns, list) else None


def turn_text(turn: dict[str, Any]) -> tuple[str, str]:
    """(speaker, text) of one turn in ShareGPT (`from`/`value`) or OpenAI (`role`/`content`)
    form."""
    speaker = turn.get("from", turn.get("role", ""))
    text = turn.get("value", turn.get("content", ""))
    if isinstance(text, list):  # OpenAI's content parts: text, and media as <image>, <video>
        text = " ".join(str(p.get("text", "")) if p.get("type") == "text" else f"<{p.get('type')}>"
                        for p in text if isinstance(p, dict))
    return str(speaker), text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)


def caption_of(parts: dict[str, bytes]) -> str | None:
    """A sample's caption (a chatml sample's: its turns' text), or None when it has none."""
    for name in CAPTION_PARTS:
        if name in parts:
            return parts[name].decode("utf-8", "replace")
    for name in CAPTION_JSON_PARTS:
        meta = _json(parts, name)
        if isinstance(meta, dict) and isinstance(meta.get("caption"), str):
            return str(meta["caption"])
    turns = turns_of(parts)
    return None if turns is None else "\n".join(turn_text(t)[1] for t in turns)


def stored_size(parts: dict[str, bytes]) -> tuple[int, int] | None:
    """(width, height) of the stored picture: meta.json's `size` [h, w], Bridge's processed
    size, chatml's media record, else the first image's header (nothing decoded)."""
    from PIL import Image

    meta = _json(parts, "meta.json")
    if isinstance(meta, dict) and _pair(meta.get("size")):
        h, w = meta["size"]
        return int(w), int(h)
    bridge = _json(parts, "json")
    if isinstance(bridge, dict) and _pair([bridge.get("processed_height"),
                                           bridge.get("processed_width")]):
        return int(bridge["processed_width"]), int(bridge["processed_height"])
    try:
        images = image_parts(parts)
        if images:
            with Image.open(io.BytesIO(images[0])) as img:
                width, height = img.size
            return width, height
    except (OSError, ValueError):
        return None
    return None


def _pair(value: Any) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(
        isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)


@dataclass
class LatentCheck:
    """Per-channel statistics of the stored latents against the normalisation's."""

    scaled: bool
    scaling_factor: float
    shift_factor: float
    samples: int = 0
    sums: list[float] = field(default_factory=list)
    squares: list[float] = field(default_factory=list)
    values: int = 0

    @property
    def expected(self) -> tuple[float, float]:
        """(mean, std) the layout implies: scaled latents `(z - shift) * scale` have mean 0 and
        standard deviation 1; unscaled ones mean `shift` and standard deviation `1 / scale`."""
        return (0.0, 1.0) if self.scaled else (self.shift_factor, 1.0 / self.scaling_factor)

    def add(self, latent: Any) -> None:
        """One latent [C, h, w] (a torch tensor)."""
        flat = latent.double().reshape(latent.shape[0], -1)
        sums, squares = flat.sum(dim=1).tolist(), (flat * flat).sum(dim=1).tolist()
        if not self.sums:
            self.sums, self.squares = [0.0] * len(sums), [0.0] * len(sums)
        if len(sums) != len(self.sums):
            return  # a shape validate reports; the statistics stay those of one channel count
        self.sums = [a + b for a, b in zip(self.sums, sums, strict=True)]
        self.squares = [a + b for a, b in zip(self.squares, squares, strict=True)]
        self.values += flat.shape[1]
        self.samples += 1

    @staticmethod
    def _mean_std(total: float, square: float, n: int) -> tuple[float, float]:
        mean = total / n
        return mean, math.sqrt(max(square / n - mean * mean, 0.0))

    def channels(self) -> list[tuple[float, float]]:
        return [self._mean_std(s, q, self.values) for s, q in
                zip(self.sums, self.squares, strict=True)] if self.values else []

    def overall(self) -> tuple[float, float]:
        return self._mean_std(sum(self.sums), sum(self.squares), self.values * len(self.sums))

    def channel_off(self, mean: float, std: float) -> bool:
        want_mean, want_std = self.expected
        return (not 1 / CHANNEL_STD_RATIO <= std / want_std <= CHANNEL_STD_RATIO
                or abs(mean - want_mean) > CHANNEL_MEAN_OFFSET * want_std)

    def warnings(self) -> list[str]:
        if not self.values:
            return []
        mean, std = self.overall()
        want_mean, want_std = self.expected
        stored = "scaled" if self.scaled else "unscaled"
        out = []
        if not 1 / STD_RATIO <= std / want_std <= STD_RATIO:
            out.append(f"the latents' standard deviation is {std:.3g}, {std / want_std:.2g} "
                       f"times the {want_std:.3g} that {stored} latents have: the scaling "
                       "factor is probably left out or applied twice")
        if abs(mean - want_mean) > MEAN_OFFSET * want_std:
            out.append(f"the latents' mean is {mean:.3g}, {abs(mean - want_mean) / want_std:.2g} "
                       f"standard deviations from the {want_mean:.3g} that {stored} latents "
                       "have: the shift factor is probably wrong")
        return out


def latent_check(scaled: bool, manifest: dict[str, Any]) -> LatentCheck:
    """The check for a layout storing latents `scaled` or not, with the VAE factors the
    manifest records (else FLUX.1's)."""
    def factor(name: str, default: float) -> float:
        value = manifest.get(name)
        return float(value) if isinstance(value, (int, float)) and value else default

    return LatentCheck(scaled, factor("scaling_factor", FLUX_SCALING_FACTOR),
                       factor("shift_factor", FLUX_SHIFT_FACTOR))


@dataclass
class Tally:
    """What the samples read add up to."""

    read: int = 0
    widths: list[int] = field(default_factory=list)
    heights: list[int] = field(default_factory=list)
    caption_words: list[int] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)
    pictures: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    captions: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    def add(self, key: str, parts: dict[str, bytes]) -> None:
        self.read += 1
        size = stored_size(parts)
        if size:
            self.widths.append(size[0])
            self.heights.append(size[1])
        caption = caption_of(parts)
        if caption is not None:
            self.caption_words.append(len(caption.split()))
            if caption.strip():
                self.captions[caption.strip()].append(key)
        turns = turns_of(parts)
        if turns is not None:
            self.turns.append(len(turns))
        picture = next((parts[p] for p in PICTURE_PARTS if p in parts), None)
        try:  # chatml's image list may be empty: no picture to compare
            pictured = MULTI_IMAGE_PART not in parts or bool(image_parts(parts))
        except ValueError:
            pictured = False
        if picture is not None and pictured:
            self.pictures[hashlib.sha256(picture).hexdigest()].append(key)

    @staticmethod
    def repeated(groups: dict[str, list[str]]) -> list[list[str]]:
        """The groups of keys holding the same thing, largest first."""
        return sorted((keys for keys in groups.values() if len(keys) > 1), key=len, reverse=True)
