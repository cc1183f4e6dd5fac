"""How a tar in a bucket without a `.tar.idx` or index rows is read for its index: by walking its
headers (a ranged read from each header, hopping over the member's data by its size) or by
streaming it (consecutive large reads, every byte, the headers parsed as the bytes pass).

A walk reads a few percent of the bytes but waits a round trip per sample, one after the other:
the next header's place is known only from the header before it, and makes a request per
sample. A stream waits a round trip and then on the bytes. Which is faster depends on the store,
the link and the CPU: the first reads (`Probe`) measure the time to the first byte, and how fast
small reads and large reads went, many at once (`Link`); `choose` compares the two ways on those
figures, for the dataset as a whole and, after its first reads, for each tar; `Choice.reason`
says why in words.

The bytes either way are the same Rust reader's (`_native.TarWalk`), so the index is the same.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from shardcook import _native
from shardcook.errors import ConfigError

__all__ = ["Choice", "Link", "Probe", "TarRead", "choose", "forced"]

#: The environment variable that takes the choice away: `walk` (the fewest bytes: a store whose
#: egress is billed), `stream`, or `auto` (the default: measured).
FORCE_VARIABLE = "SHARDCOOK_TAR_READS"

#: The least a walk's read asks for: the 512-byte header and, where the members after it are
#: small, those too; a walk whose read stopped short of the next header grows it (`MAX_AHEAD` at
#: most), so a sample of a big member and a few small ones costs one read.
READ_AHEAD = 2048
MAX_AHEAD = 16 << 10

#: A tar read through is read in pieces of this many bytes, each one ranged GET: MSC's Rust
#: client hands a read over whole, so the piece bounds the memory a stream holds (three pieces
#: at most: the one being parsed, the next arriving, and its copy as the client hands it over).
#: At 50 MB/s a piece takes 84 ms, several round trips of a store 10-20 ms away.
STREAM_PIECE = 4 << 20

#: The memory all streams hold at once bounds how many run at once; walks hold one small read
#: each and wait on the store, so many more run at once (see `remote`).
STREAM_MEMORY = 384 << 20
STREAMS_AT_ONCE = STREAM_MEMORY // (3 * STREAM_PIECE)

#: A walk advancing less than this per read fetches more than a sixteenth of the bytes it passes
#: (a request for every few KiB): such a tar is streamed, whatever the store.
WHOLE_BELOW = 16 * READ_AHEAD

#: The probe: this many small reads of the first tar, one after the other (the first opens a
#: connection), then reads at once: a small one from each of as many tars as walk at once, and
#: one of `PROBE_PIECE` bytes from each of as many as stream at once.
PROBE_READS = 4
PROBE_PIECE = 1 << 20

#: A read's time below this is no measurement (a clock's grain, a cached answer).
_LEAST_SECONDS = 1e-4


@dataclass(frozen=True)
class Link:
    """What the first reads found: `latency`, the seconds a read on an open connection waits
    for its first byte; `reads_per_second`, how fast `walks` small reads at once went (as many
    as walks run at once); `bytes_per_second`, what `streams` large reads at once delivered (as
    many as streams run at once). The rates take in whatever bounds them: the link, the store,
    the client's CPU, and where the store shares the client's cores, the store's CPU too."""

    latency: float
    reads_per_second: float
    bytes_per_second: float
    walks: int = 1
    streams: int = 1


@dataclass(frozen=True)
class Choice:
    """Stream or walk, the time `choose` estimated for each, and why, in words."""

    stream: bool
    walk_seconds: float
    stream_seconds: float
    reason: str


def _size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def choose(link: Link | None, spacing: float, size: int, *, tars: int = 1,
           walks_at_once: int = 1) -> Choice:
    """Whether `tars` tars of `size` bytes each, whose samples are `spacing` bytes apart (a
    walk's read each), are read sooner by streaming than by walking, on `link`, with
    `walks_at_once` walks running at once.

    A walk waits `size / spacing` round trips one after the other, in waves of as many tars as
    run at once, and its reads go no faster than the first small reads at once went. A stream
    waits a round trip and then every byte at the rate the first large reads at once got.
    Without a measured link (a first tar too small to measure), only samples too small for
    ranged reads to pay (`WHOLE_BELOW`) are streamed.
    """
    spacing = max(1.0, spacing)
    if spacing < WHOLE_BELOW:
        return Choice(True, math.inf, 0.0, f"samples {_size(spacing)} apart are too small for "
                      "ranged reads to pay (each read would fetch over a sixteenth of the bytes)")
    if link is None:
        return Choice(False, 0.0, math.inf, f"samples {_size(spacing)} apart, no link measured")
    reads = size / spacing
    waves = math.ceil(tars / max(1, walks_at_once))
    walk = max(waves * reads * link.latency, tars * reads / link.reads_per_second)
    stream = link.latency + tars * size / link.bytes_per_second
    measured = (f"a read waits {link.latency * 1e3:.1f} ms for its first byte, {link.walks} "
                f"small reads at once went at {link.reads_per_second:,.0f} a second and "
                f"{link.streams} large ones at {_size(link.bytes_per_second)}/s, and samples "
                f"are {_size(spacing)} apart")
    if stream < walk:
        return Choice(True, walk, stream, f"{measured}: streaming the tars, about {stream:.2f} "
                      f"s, beats walking their headers, about {walk:.2f} s")
    return Choice(False, walk, stream, f"{measured}: walking the headers, about {walk:.2f} s, "
                  f"beats streaming the tars, about {stream:.2f} s")


def forced() -> Choice | None:
    """The way `FORCE_VARIABLE` sets, None when it leaves the choice to the measurements.

    Raises:
        ConfigError: it holds something else, in one sentence.
    """
    value = os.environ.get(FORCE_VARIABLE, "auto")
    if value == "auto":
        return None
    if value not in ("walk", "stream"):
        raise ConfigError(f"{FORCE_VARIABLE}={value!r} must be walk, stream or auto.")
    return Choice(value == "stream", 0.0, 0.0, f"{FORCE_VARIABLE}={value} says so")


class Probe:
    """The first reads, timed: the first tar's `small` reads one after the other (the first
    of them opened the connection), then one small read of each of several tars at once
    (`reads`: how many, seconds), then one large read of each of several at once, once or more
    (`pieces`: how many, bytes, seconds; the fastest counts, as a stall only slows)."""

    def __init__(self) -> None:
        self.small: list[float] = []
        self.reads: tuple[int, float] | None = None
        self.pieces: list[tuple[int, int, float]] = []

    def link(self) -> Link | None:
        """The link the reads measured; None when the first tar ended before they could."""
        pieces = [p for p in self.pieces if p[1] > 0]
        if len(self.small) < 2 or not pieces:
            return None
        latency = max(_LEAST_SECONDS, statistics.median(self.small[1:]))
        count, seconds = self.reads or (0, 0.0)
        # the reads at once each opened a connection, as the first tar's first read did
        rate = (count / max(_LEAST_SECONDS, seconds - self.small[0]) if count
                else 1 / latency)
        streams, size, took = max(pieces, key=lambda p: p[1] / max(_LEAST_SECONDS,
                                                                     p[2] - latency))
        return Link(latency, rate, size / max(_LEAST_SECONDS, took - latency),
                    max(1, count), streams)


class TarRead:
    """One tar read for its index: `span` names the next range to read, `feed` hands it over
    with the seconds it took, until `span` says None (the end block, or `stop` set). It walks or
    streams as `stream` says at the start and, after `PROBE_READS` reads, as `judge` says of this
    tar (its spacing and the bytes left; without a judge, `choose` without a link). With a
    `probe`, its reads are timed into it and it stops (`span` None) after `PROBE_READS` of them,
    once it knows where its second sample starts, until `probe` is cleared."""

    def __init__(self, url: str, size: int, stop: threading.Event, *, stream: bool = False,
                 judge: Callable[[float, int], Choice] | None = None,
                 probe: Probe | None = None) -> None:
        self.walk = _native.TarWalk(url, size)
        self.size = size
        self.stop = stop
        self.streaming = stream
        self.judge = judge
        self.probe = probe
        self.reads = 0
        #: Bytes read, and whether any read streamed.
        self.read_bytes = 0
        self.streamed = stream
        self.ahead = READ_AHEAD
        self._checked = False

    def spacing(self) -> float:
        """Bytes a sample so far: what a walk advances a read, once its read-ahead takes a
        sample's small members and the next header in one read."""
        return self.walk.position / max(1, self.walk.samples)

    def span(self, ahead: int | None = None) -> tuple[int, int] | None:
        """`(start, end)` of the next read (of at least `ahead` bytes, when given); None once
        the walk is complete, stopped, or a probe's reads one after the other are done."""
        needed = self.walk.needed()
        if needed is None or self.stop.is_set():
            return None
        if (ahead is None and self.probe is not None and self.reads >= PROBE_READS
                and self.walk.second_sample is not None):
            return None
        start, length = needed
        if ahead is None:
            ahead = STREAM_PIECE if self.streaming else self.ahead
        return start, min(self.size, start + max(length, ahead))

    def feed(self, start: int, data: bytes, seconds: float) -> None:
        """The bytes read at `start`, in `seconds`; walks on as far as they reach."""
        end = start + len(data)
        self.walk.feed(start, data)
        self.reads += 1
        self.read_bytes += len(data)
        needed = self.walk.needed()
        if needed is not None and not self.streaming and needed[0] <= end:
            # stopped short of a header among small members: the next reads take them all
            self.ahead = min(MAX_AHEAD, max(self.ahead, -(-(sum(needed) - start) // 512) * 512))
        if self.probe is not None:
            if len(data) <= MAX_AHEAD:  # its reads one after the other, not those at once
                self.probe.small.append(seconds)
        elif needed is not None and not self._checked and self.reads >= PROBE_READS:
            self._checked = True
            left = self.size - self.walk.position
            choice = (self.judge or partial(choose, None))(self.spacing(), left)
            self.streaming = choice.stream
            self.streamed = self.streamed or choice.stream
