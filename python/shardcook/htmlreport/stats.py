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

from shardcook.encoders.models import (
    LATENTS_MEAN_STD,
    PATCH_BATCH_NORM,
    PER_CHANNEL,
    SCALING_SHIFT,
    ModelFamily,
)
from shardcook.htmlreport.pictures import SINGLE_IMAGE_PARTS, image_parts
from shardcook.layouts.bridge_flux import LATENT_PART
from shardcook.layouts.chatml import CONVERSATION_PART, MULTI_IMAGE_PART, TURNS_KEY
from shardcook.layouts.mlperf import MEAN_PART

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


@dataclass(frozen=True)
class Normalisation:
    """How a dataset's latents were normalised: as its manifest records it, or, for a manifest
    that does not (an older shardcook's, another tool's), as its layout's model family implies
    (`approximate`)."""

    kind: str
    scaled: bool
    scaling_factor: float = 1.0
    shift_factor: float = 0.0
    channels: int | None = None  # how many channels a per-channel record has
    approximate: bool = False

    @property
    def expected(self) -> tuple[float, float]:
        """(mean, std) of every channel: normalised latents (`(z - shift) * scale`, or per
        channel `(z - latents_mean) / latents_std` or by the batch norm's statistics) have mean 0
        and standard deviation 1; FLUX's unscaled ones mean `shift` and standard deviation
        `1 / scale`."""
        return (0.0, 1.0) if self.scaled else (self.shift_factor, 1.0 / self.scaling_factor)

    @property
    def stored(self) -> str:
        """The stored latents in a word ("scaled latents have ...")."""
        if self.kind in PER_CHANNEL:
            return "normalised" if self.scaled else "unnormalised"
        return "scaled" if self.scaled else "unscaled"

    @property
    def knobs(self) -> tuple[str, str]:
        """What a wrong spread and a wrong mean point to."""
        if self.kind == LATENTS_MEAN_STD:
            return "the division by latents_std", "latents_mean"
        if self.kind == PATCH_BATCH_NORM:
            return "the division by the batch norm's standard deviation", "its running mean"
        return "the scaling factor", "the shift factor"

    def describe(self) -> str:
        """How the latents are stored and where the normalisation comes from, for the page."""
        if self.kind == LATENTS_MEAN_STD:
            how = ("normalised per channel, (z - latents_mean) / latents_std, with "
                   + (f"the {self.channels} means and standard deviations of the VAE's config "
                      "that manifest.json records" if not self.approximate else
                      "the VAE config's means and standard deviations"))
        elif self.kind == PATCH_BATCH_NORM:
            how = ("patchified 2x2 and normalised per channel, (z - bn_mean) / bn_std, with "
                   + (f"the {self.channels} batch-norm statistics of the VAE that manifest.json "
                      "records" if not self.approximate else
                      "the VAE's batch-norm running statistics"))
        else:
            how = (("scaled: (z - shift) * scale" if self.scaled else "unscaled: the VAE's z")
                   + f", with scaling factor {self.scaling_factor:g} and shift "
                     f"{self.shift_factor:g}")
        if self.approximate:
            how += (" (manifest.json records no normalisation, so this is what the layout "
                    "implies, and the check is approximate)")
        return f"Stored {how}"


def normalisation(family: ModelFamily, scaled: bool, manifest: dict[str, Any]
                  ) -> Normalisation | None:
    """The normalisation of latents a layout of model `family` (its registry entry) stores
    `scaled` or not: the manifest's `normalisation` record (every Wan run's), else, for a family
    of the scaling-shift convention, its `scaling_factor` and `shift_factor` (every FLUX run's),
    else what the family's entry implies (its `usual_factors`, FLUX.1's; a per-channel family's
    latents are normalised to mean 0 and standard deviation 1 whatever its VAE), marked
    approximate. None when nothing says what they should be (unnormalised latents of unknown
    statistics)."""
    def number(value: Any) -> float | None:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value
        return float(value) if ok and math.isfinite(value) else None

    record = manifest.get("normalisation")
    kind = record.get("kind") if isinstance(record, dict) else None
    if kind in PER_CHANNEL and isinstance(record, dict):
        names = ("latents_mean", "latents_std") if kind == LATENTS_MEAN_STD else (
            "bn_mean", "bn_std")
        means, stds = record.get(names[0]), record.get(names[1])
        if isinstance(means, list) and isinstance(stds, list) and means and len(means) == len(
                stds) and scaled:
            return Normalisation(str(kind), scaled, channels=len(means))
    if kind == SCALING_SHIFT and isinstance(record, dict):
        scale, shift = number(record.get("scaling_factor")), record.get("shift_factor")
        if scale is not None:
            return Normalisation(SCALING_SHIFT, scaled, scale, number(shift) or 0.0)
    convention = family.latents.convention
    scale = number(manifest.get("scaling_factor"))
    if scale is not None and convention == SCALING_SHIFT:
        return Normalisation(SCALING_SHIFT, scaled, scale,
                             number(manifest.get("shift_factor")) or 0.0)
    if convention in PER_CHANNEL:
        return Normalisation(convention, scaled, approximate=True) if scaled else None
    if family.latents.usual_factors is None:
        return None
    usual_scale, usual_shift = family.latents.usual_factors
    return Normalisation(SCALING_SHIFT, scaled, usual_scale, usual_shift, approximate=True)


@dataclass
class LatentCheck:
    """Per-channel statistics of the stored latents against what their normalisation
    implies."""

    norm: Normalisation
    samples: int = 0
    sums: list[float] = field(default_factory=list)
    squares: list[float] = field(default_factory=list)
    values: int = 0

    @property
    def expected(self) -> tuple[float, float]:
        return self.norm.expected

    def add(self, latent: Any) -> None:
        """One latent [C, ...] (a torch tensor: FLUX's [C, h, w], Wan's [C, T', h, w])."""
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
        stored, (spread, centre) = self.norm.stored, self.norm.knobs
        out = []
        if not 1 / STD_RATIO <= std / want_std <= STD_RATIO:
            out.append(f"the latents' standard deviation is {std:.3g}, {std / want_std:.2g} "
                       f"times the {want_std:.3g} that {stored} latents have: {spread} is "
                       "probably left out or applied twice")
        if abs(mean - want_mean) > MEAN_OFFSET * want_std:
            out.append(f"the latents' mean is {mean:.3g}, {abs(mean - want_mean) / want_std:.2g} "
                       f"standard deviations from the {want_mean:.3g} that {stored} latents "
                       f"have: {centre} is probably wrong")
        return out


def latent_check(family: ModelFamily, scaled: bool, manifest: dict[str, Any]
                 ) -> LatentCheck | None:
    """The check of a layout of model `family` (its registry entry) storing latents `scaled` or
    not, against the normalisation its manifest records (`normalisation`); None when there is
    nothing to check them against."""
    norm = normalisation(family, scaled, manifest)
    return LatentCheck(norm) if norm is not None else None


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
