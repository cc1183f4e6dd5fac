"""`shardcook report`'s page opened from its file in headless Chromium: nothing logged, nothing
fetched, every picture decoded, the counts `info --json` gives, a `<script>` caption shown as
text, a screenshot that is not blank, a click showing a sample's parts; for raw, chatml and
encode's three layouts (the page `--report-html` wrote, latents in false colour as `preview`
shows them, the latent statistics)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from shardcook import ShardWriter, finalize
from shardcook.layouts.chatml import pickle_bytes_list, sample_json

from tests.helpers.browser import Opened, blank, open_report, open_reports
from tests.helpers.dataset import cli, raw_parts
from tests.helpers.encode import encode_args, run_in_process
from tests.helpers.raw import encode, generated, make_folder

SCRIPT_CAPTION = '<script>window.__pwned = true</script><img src="x" onerror="window.__pwned=true">'


def _raw_dataset(d: Path) -> Path:
    with ShardWriter(d, shard_size=5) as w:
        for i in range(12):
            parts = raw_parts(i)
            if i == 3:
                parts["txt"] = SCRIPT_CAPTION.encode()
            w.write(f"{i:06d}", parts)
    finalize(d, encoding="raw", split=(0.75, 0.25, 0))
    return d


def _wav() -> bytes:
    import soundfile

    out = io.BytesIO()
    soundfile.write(out, np.zeros(1600, np.int16), 16000, format="WAV")
    return out.getvalue()


def _chatml_dataset(d: Path) -> Path:
    frames = [encode(generated(i, (32, 48))) for i in range(3)]
    turns = [{"from": "human", "value": "<image><video>\nWhat is shown?"},
             {"from": "gpt", "value": "A square </div><b>not bold</b>"}]
    with ShardWriter(d, shard_size=2, prefix="train-shard-") as w:
        for i in range(4):
            w.write(f"{i:06d}", {"image.jpg": encode(generated(i, (48, 64))),
                                 "videos": pickle_bytes_list([frames]),
                                 "audio.wav": _wav(),
                                 "conversation.json": sample_json(turns, {"images": 1})})
    finalize(d, encoding="chatml")
    return d


def _loaded(opened: Opened, shot: Path) -> None:
    assert opened.console_errors == []
    assert opened.requests == []
    assert opened.images and all(width > 0 for _, width in opened.images), opened.images
    assert not blank(shot.read_bytes())


def _check(page: Path, tmp_path: Path) -> tuple[dict, Opened]:
    shot = tmp_path / "shot.png"
    opened = open_report(page, shot)
    _loaded(opened, shot)
    return opened.counts, opened


def _counts_are_infos(counts: dict, d: Path) -> dict:
    info = json.loads(cli("info", "--json", d).stdout)
    assert counts["samples"] == info["samples"]
    assert counts["shards"] == info["shards"]
    assert counts["bytes"] == info["bytes_on_disk"]
    for name, split in info["splits"].items():
        assert (counts[f"{name}.samples"], counts[f"{name}.shards"]) == (
            split["samples"], split["shards"])
    return info


def test_raw_page_in_chromium(tmp_path):
    d = _raw_dataset(tmp_path / "raw")
    page = tmp_path / "raw.html"
    r = cli("report", d, "--out", page, "--samples", "8")
    assert r.code == 0, r.stderr
    counts, opened = _check(page, tmp_path)
    assert _counts_are_infos(counts, d)["samples"] == 12
    assert not opened.injected_ran
    assert SCRIPT_CAPTION in opened.captions  # shown as the text it is
    # 8 sample pictures plus the plots; a click opens the sample's parts
    assert sum(1 for alt, _ in opened.images if alt.isdigit()) == 8
    assert opened.clicked_parts == ["jpg", "txt", "meta.json"]


def test_chatml_page_in_chromium(tmp_path):
    d = _chatml_dataset(tmp_path / "chatml")
    page = tmp_path / "chatml.html"
    assert cli("report", d, "--out", page).code == 0
    counts, opened = _check(page, tmp_path)
    assert counts["samples"] == 4
    assert all("A square </div><b>not bold</b>" in t for t in opened.turns[1::2])
    assert opened.media == ["audio"] * 4
    assert sum(1 for alt, _ in opened.images if alt == "video frame") == 4 * 3
    assert opened.clicked_parts == ["image.jpg", "videos", "audio.wav", "conversation.json"]


#: Each layout's parts, as the click on a sample lists them.
ENCODED_PARTS = {
    "primus": ["latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth", "caption.txt",
               "meta.json"],
    "megatron-bridge": ["pth", "pickle", "json"],
    "mlperf": ["t5.bytes", "clip.bytes", "mean.bytes", "logvar.bytes", "json"],
}


def test_encoded_pages_in_chromium(tiny_flux, tmp_path):
    src = make_folder(tmp_path / "in", 4, photos=1)
    for layout in ENCODED_PARTS:
        run_in_process(encode_args(tiny_flux, src, tmp_path / layout, "--layout", layout,
                                   "--precision", "bf16", "--shard-size", "3", "--report-html"))
    pages = open_reports([(tmp_path / layout / ".shardcook" / "report.html",
                           tmp_path / f"{layout}.png") for layout in ENCODED_PARTS])
    for (layout, parts), opened in zip(ENCODED_PARTS.items(), pages, strict=True):
        _loaded(opened, tmp_path / f"{layout}.png")
        assert _counts_are_infos(opened.counts, tmp_path / layout)["samples"] == 4
        # each sample's latent in false colour, as `preview` shows it, and the channels' plot
        assert sum(1 for alt, _ in opened.images if alt.isdigit()) == 4
        assert [alt for alt, _ in opened.images].count("latent channels") == 1
        assert len(opened.channels) == 4, opened.channels  # the tiny VAE's latent channels
        assert opened.clicked_parts == parts
        # The tiny random-weight VAE's z has a standard deviation near 0.25, an eighth of the
        # 1 / scale = 2 its config implies: the layouts storing z as it is warn; primus stores
        # (z - shift) * scale, near 0.6, within the factor of 2 around 1.
        if layout == "primus":
            assert opened.latent_warnings == []
        else:
            assert len(opened.latent_warnings) == 1
            assert "scaling factor is probably left out" in opened.latent_warnings[0]
