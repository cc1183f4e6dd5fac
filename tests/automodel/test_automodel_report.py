"""`shardcook report` on NeMo AutoModel's diffusion cache as `encode --layout automodel` writes
it: the page names the cache's counts, buckets and captions; its latent check, in the family's
normalised space, is green for the cache as written (measured over every file) and red for the
same latents stored x10, which `validate` cannot see; a Wan cache's cards show each file's own
first frame, and its page opens in Chromium with nothing logged or fetched; an image cache's
cards say why they have no picture; a damaged file is named; the files read are bounded."""

from __future__ import annotations

import html
import re
from collections import Counter
from pathlib import Path

import pytest
import torch
from PIL import Image
from shardcook.dataset.cachefolder import CacheFolder
from shardcook.htmlreport import cachepage, make_report
from shardcook.htmlreport.pictures import image_uri

from tests.automodel.test_automodel_flux import flux_root  # noqa: F401
from tests.helpers.automodel import SIZES, copy_of, entries, make_inputs, run_encode
from tests.helpers.browser import open_report
from tests.helpers.dataset import cli, one_error_line

SEED = 7
WARNING = re.compile(r'data-warning="latents">warning: ([^<]*)<')
COUNT = re.compile(r'data-count="([^"]+)">([\d,]+)<')


@pytest.fixture(scope="module")
def flux_cache(flux_root: Path, tmp_path_factory) -> Path:  # noqa: F811
    """A FLUX cache `encode --layout automodel` wrote."""
    root = tmp_path_factory.mktemp("flux_report")
    make_inputs(root / "in")
    run_encode("flux", root / "in", root / "out", flux_root, SEED)
    return root / "out"


@pytest.fixture(scope="module")
def wan_cache(tiny_wan: Path, tmp_path_factory) -> Path:
    """A Wan cache (video mode: each file holds its first frame)."""
    from tests.automodel.test_automodel_wan import make_inputs as make_videos
    from tests.automodel.test_automodel_wan import run_encode as encode_videos

    root = tmp_path_factory.mktemp("wan_report")
    make_videos(root / "in")
    encode_videos(root / "in", root / "out", tiny_wan, "wan", "--max-pixels", "16384")
    return root / "out"


def counts(page: str) -> dict[str, int]:
    return {name: int(n.replace(",", "")) for name, n in COUNT.findall(page)}


def latent_stats(cache: Path, key: str, channel_axis: int) -> tuple[float, float]:
    """Mean and standard deviation of every file's latent, all channels together."""
    flat = [torch.load(e["cache_file"], weights_only=True)[key].double()
            .movedim(channel_axis, 0).reshape(-1) for e in entries(cache)]
    values = torch.cat(flat)
    return float(values.mean()), float(values.std(correction=0))


def test_flux_page_names_counts_buckets_captions_and_its_latents_are_green(
        flux_cache: Path, tmp_path: Path) -> None:
    out = tmp_path / "page.html"
    r = cli("report", flux_cache, "--out", out)
    assert r.code == 0 and r.stdout.strip() == f"wrote {out}", r.stderr
    page = out.read_text()
    listed = entries(flux_cache)
    buckets = Counter(f"{w}x{h}" for w, h in (e["bucket_resolution"] for e in listed))
    assert len(listed) == len(SIZES) and len(buckets) > 2
    assert counts(page) == {"samples": len(SIZES), "shards": 1, "buckets": len(buckets),
                            **{f"bucket.{b}": n for b, n in buckets.items()},
                            "duplicate-captions": 0}
    assert "flux (processor flux)" in page
    captions = re.findall(r'<div class="caption">([^<]*)</div>', page)
    assert sorted(map(html.unescape, captions)) == sorted(e["prompt"] for e in listed)
    assert page.count("no picture: an image cache holds the VAE&#x27;s latents") == len(SIZES)
    assert 'alt="first frame"' not in page
    # green, in FLUX's normalised space ((z - shift) * scale: mean 0, std 1), and measured over
    # every file's latent
    assert WARNING.findall(page) == []
    assert "Within what the normalisation implies." in page
    assert "expected mean 0, standard deviation 1 in every channel" in page
    mean, std = latent_stats(flux_cache, "latent", 0)
    assert (f"Measured over {len(SIZES)} samples: mean {mean:.3g}, standard deviation "
            f"{std:.3g}.") in page
    assert '<p class="ok" data-validate="whole">whole</p>' in page


def test_latents_stored_ten_times_too_large_are_flagged(flux_cache: Path,
                                                       tmp_path: Path) -> None:
    cache = copy_of(flux_cache, tmp_path / "cache")
    for entry in entries(cache):
        data = torch.load(entry["cache_file"], weights_only=True)
        torch.save({**data, "latent": data["latent"] * 10}, entry["cache_file"])
    assert cli("validate", "--deep", cache).code == 0  # the shapes and keys are right
    page = make_report(cache)
    warnings = [html.unescape(w) for w in WARNING.findall(page)]
    assert any("times the 1 that scaled latents have: the scaling factor is probably left out"
               in w for w in warnings), warnings
    assert '<p class="ok" data-validate="whole">whole</p>' in page


def test_wan_page_shows_each_files_first_frame_in_chromium(wan_cache: Path,
                                                          tmp_path: Path) -> None:
    out, shot = tmp_path / "wan.html", tmp_path / "wan.png"
    assert cli("report", wan_cache, "--out", out).code == 0
    page = out.read_text()
    listed = entries(wan_cache)
    files = [torch.load(e["cache_file"], weights_only=True) for e in listed]
    for file in files:  # each card's picture is its own file's first frame
        assert image_uri(Image.fromarray(file["first_frame"].numpy())) in page
    assert "model_version</th><td>wan2.1<" in page
    opened = open_report(out, shot)
    assert opened.console_errors == [] and opened.requests == []
    frames = [width for alt, width in opened.images if alt == "first frame"]
    assert len(frames) == len(listed) and all(width > 0 for width in frames)
    assert opened.counts["samples"] == len(listed)
    assert opened.latent_warnings == [] and len(opened.channels) == 16
    assert opened.clicked_parts == list(files[0])  # the first entry's file, all its keys


def test_a_damaged_file_is_named_on_its_card(flux_cache: Path, tmp_path: Path) -> None:
    cache = copy_of(flux_cache, tmp_path / "cache")
    victim = Path(entries(cache)[0]["cache_file"])
    victim.write_bytes(victim.read_bytes()[:100])
    r = cli("report", cache, "--out", tmp_path / "page.html")
    assert r.code == 0 and r.escaped is None, r.stderr
    page = html.unescape((tmp_path / "page.html").read_text())
    assert "<h3>Unreadable files</h3>" in page
    assert f'<div class="nopicture">unreadable: {victim} cannot be loaded' in page
    assert f'<p class="warn" data-problem>{victim} cannot be loaded' in page
    # the latent check goes on with the others
    assert f"Measured over {len(SIZES) - 1} samples" in page


def test_the_files_read_are_bounded_and_a_split_is_refused(flux_cache: Path,
                                                            monkeypatch) -> None:
    loaded: list[Path] = []
    load = CacheFolder.load
    monkeypatch.setattr(CacheFolder, "load", lambda cache, path: loaded.append(path) or
                        load(cache, path))
    monkeypatch.setattr(cachepage, "STATS_FILES", 3)
    page = make_report(flux_cache, samples=2)
    # the page's 3, the summary's first file, and validate's first file of each bucket
    buckets = {tuple(e["bucket_resolution"]) for e in entries(flux_cache)}
    assert len(loaded) == 3 + 1 + len(buckets), loaded
    assert page.count('<details class="card">') == 2
    assert "Measured over 3 samples" in page
    r = cli("report", flux_cache, "--split-part", "train")
    assert r.code == 2 and one_error_line(r) == (
        f"error: {flux_cache} is a NeMo AutoModel cache, which has no splits; leave out "
        "--split-part.")


def test_a_cache_in_a_bucket_gets_its_page_written_there(flux_cache: Path, s3_store) -> None:
    url = s3_store.url("caches/flux")
    for path in sorted(flux_cache.rglob("*")):
        name = path.relative_to(flux_cache).as_posix()
        if path.is_file() and (not name.startswith(".shardcook/")
                               or name == ".shardcook/manifest.json"):
            data = path.read_bytes()
            if name.startswith("metadata_shard_"):  # entries name their files by URL
                data = data.replace(str(flux_cache).encode(), url.encode())
            s3_store.put(f"caches/flux/{name}", data)
    # the first file: validate (without --deep) reads the first of each bucket
    victim = entries(flux_cache)[0]["cache_file"][len(str(flux_cache)) + 1:]
    s3_store.put(f"caches/flux/{victim}", s3_store.get(f"caches/flux/{victim}")[:100])
    r = cli("report", url)
    assert r.code == 0 and r.stdout.strip() == f"wrote {url}/.shardcook/report.html", r.stderr
    page = html.unescape(s3_store.get("caches/flux/.shardcook/report.html").decode())
    local = make_report(flux_cache)
    assert counts(page) == counts(local)
    assert f"<h1>{url}</h1>" in page
    # the damaged file named by its URL, the others measured as where they were written
    assert f'<p class="warn" data-problem>{url}/{victim} cannot be loaded' in page
    assert f'<div class="nopicture">unreadable: {url}/{victim} cannot be loaded' in page
    assert f"Measured over {len(SIZES) - 1} samples" in page
    assert "shardcook-cache-" not in page  # nothing names the local copy
