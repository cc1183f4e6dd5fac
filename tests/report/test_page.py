"""`shardcook report`'s page opened from its file in headless Chromium: nothing logged, nothing
fetched, every picture decoded, the counts `info --json` gives, a `<script>` caption shown as
text, a screenshot that is not blank, a click showing a sample's parts; for raw and chatml."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
from shardcook import ShardWriter, finalize
from shardcook.layouts.chatml import pickle_bytes_list, sample_json

from tests.helpers.browser import blank, open_report
from tests.helpers.dataset import cli, raw_parts
from tests.helpers.raw import encode, generated

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


def _check(page: Path, tmp_path: Path) -> tuple[dict, object]:
    shot = tmp_path / "shot.png"
    opened = open_report(page, shot)
    assert opened.console_errors == []
    assert opened.requests == []
    assert opened.images and all(width > 0 for _, width in opened.images), opened.images
    assert not blank(shot.read_bytes())
    return opened.counts, opened


def test_raw_page_in_chromium(tmp_path):
    d = _raw_dataset(tmp_path / "raw")
    page = tmp_path / "raw.html"
    r = cli("report", d, "--out", page, "--samples", "8")
    assert r.code == 0, r.stderr
    counts, opened = _check(page, tmp_path)
    info = json.loads(cli("info", "--json", d).stdout)
    assert counts["samples"] == info["samples"] == 12
    assert counts["shards"] == info["shards"]
    assert counts["bytes"] == info["bytes_on_disk"]
    for name, split in info["splits"].items():
        assert (counts[f"{name}.samples"], counts[f"{name}.shards"]) == (
            split["samples"], split["shards"])
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
