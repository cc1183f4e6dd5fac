"""The page's plots, drawn by matplotlib (imported only here, when a page is made) as SVG
images inline in the page."""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

from shardcook.htmlreport.pictures import bytes_uri

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SIZE = (4.2, 2.6)
COLOUR = "#3b6ea8"


def _figure() -> Figure:
    import matplotlib

    matplotlib.use("Agg", force=False)  # no display; never a GUI backend
    from matplotlib.figure import Figure

    matplotlib.rcParams.update({"svg.hashsalt": "shardcook", "svg.fonttype": "none",
                                "font.size": 9})
    fig = Figure(figsize=SIZE)
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.18, top=0.9)  # constrained: 3x slower
    return fig


def _svg(fig: Figure) -> str:
    out = io.BytesIO()
    fig.savefig(out, format="svg", metadata={"Date": None, "Creator": None})
    return bytes_uri(out.getvalue(), "image/svg+xml")


def histogram(values: Sequence[float], title: str, xlabel: str, ylabel: str = "samples") -> str:
    """A histogram of `values` as an SVG data URI (`ylabel`: what the bars count)."""
    fig = _figure()
    ax = fig.add_subplot()
    distinct = len(set(values))
    ax.hist(values, bins=min(40, max(distinct, 1)), color=COLOUR)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _svg(fig)


def channel_plot(channels: Sequence[tuple[float, float]], expected: tuple[float, float]) -> str:
    """Each channel's mean with its standard deviation as a bar, against the band the
    normalisation implies."""
    fig = _figure()
    ax = fig.add_subplot()
    mean, std = expected
    ax.axhspan(mean - std, mean + std, color="#d9e6d2", label="expected mean ± std")
    ax.axhline(mean, color="#5a8f4a", linewidth=1)
    xs = range(len(channels))
    ax.errorbar(xs, [m for m, _ in channels], yerr=[s for _, s in channels], fmt="o",
                color=COLOUR, markersize=3, label="stored mean ± std")
    ax.set_title("latent channels")
    ax.set_xlabel("channel")
    ax.legend(fontsize=7, loc="upper right")
    return _svg(fig)
