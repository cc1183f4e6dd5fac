"""Tars another tool wrote, in a bucket, read for their index either way: their headers walked
(a ranged read per sample) or the tars streamed (every byte, in large reads), chosen from what the
first tar's first reads measure of the store. The choice on given measurements; both ways end to
end on tars of ~100 KB images and of ~2 MB latents, with the index `energon prepare` writes on a
local copy; and the choice itself through a model of a store 100 ms away
(tests/helpers/storeproxy.py).
"""

from __future__ import annotations

import io
import json
import logging
import re
import shutil
import tarfile
import threading
from pathlib import Path

import numpy as np
import pytest
from shardcook import finalize
from shardcook.dataset.fetched import RUST_WALKS_AT_ONCE
from shardcook.dataset.tarreads import (
    PROBE_PIECE,
    PROBE_READS,
    STREAM_PIECE,
    Choice,
    Link,
    Probe,
    TarRead,
    choose,
    forced,
)
from shardcook.errors import ConfigError

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.s3server import add_profile, make_store
from tests.helpers.shards import assert_same_index, energon_prepare
from tests.helpers.storeproxy import StoreProxy

#: name -> (tars, samples a tar, bytes of the big member)
SIZES = {"images": (3, 10, 100_000), "latents": (3, 4, 2_000_000)}


def tars_of(folder: Path, kind: str) -> Path:
    """`kind`'s tars as Python's tarfile writes them: a big member (a JPEG's bytes, an .npy)
    and a small .json and .txt per sample."""
    count, samples, big = SIZES[kind]
    rng = np.random.default_rng(len(kind))
    folder.mkdir(parents=True)
    for t in range(count):
        with tarfile.open(folder / f"{kind}-{t:03d}.tar", "w", format=tarfile.PAX_FORMAT) as tar:
            for i in range(samples):
                key = f"{kind}{t:03d}{i:04d}"
                size = big + int(rng.integers(-big // 10, big // 10))
                parts = {"bin": rng.integers(0, 256, size, dtype=np.uint8).tobytes(),
                         "json": json.dumps({"key": key}).encode(), "txt": b"a caption"}
                for ext, data in parts.items():
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size, info.mtime = len(data), 1_700_000_000
                    tar.addfile(info, io.BytesIO(data))
    return folder


@pytest.fixture(scope="module")
def bucket(s3_server, tmp_path_factory):
    """Both kinds of tars in a bucket, and `energon prepare`'s index of a local copy of each."""
    tmp = tmp_path_factory.mktemp("tarreads")
    store = make_store(s3_server, tmp / "cfg", "tar-reads", "tarreads")
    theirs = {}
    for kind in SIZES:
        local = tars_of(tmp / kind, kind)
        theirs[kind] = tmp / f"energon-{kind}"
        shutil.copytree(local, theirs[kind])
        r = energon_prepare(theirs[kind], "--split-ratio", "1,0,0")
        assert r.returncode == 0, r.stdout + r.stderr
    with pytest.MonkeyPatch.context() as env:
        for key, value in store.env.items():
            env.setenv(key, value)
        yield store, tmp, theirs


# -- the choice, on given measurements ---------------------------------------------------------

#: 200 tars: of 100 samples of ~100 KB images (10 MB), or of 10 samples of ~2 MB latents (20 MB).
IMAGES = {"spacing": 100_000, "size": 10_000_000, "tars": 200, "walks_at_once": RUST_WALKS_AT_ONCE}
LATENTS = {"spacing": 2_000_000, "size": 20_000_000, "tars": 200,
           "walks_at_once": RUST_WALKS_AT_ONCE}

#: A store 20 ms away, a client with cores to spare: 128 small reads at once at 20,000 a second,
#: 32 large ones at 50 MB/s each.
AWAY = Link(0.020, 20_000, 32 * 50e6, walks=128, streams=32)
#: A store on the client's two cores (the bench's): requests cost the store's CPU too.
SHARED = Link(0.0008, 2_800, 880e6, walks=128, streams=32)
#: A store on the same machine that answers requests cheaply.
NEAR = Link(0.0005, 20_000, 1e9, walks=128, streams=32)


def _choose(link: Link | None, case: dict) -> Choice:
    return choose(link, case["spacing"], case["size"], tars=case["tars"],
                  walks_at_once=case["walks_at_once"])


def test_20_ms_away_images_stream_and_latents_walk():
    """Images: 100 round trips a tar, two waves of 128 tars, 4 s, against 2 GB at 1.6 GB/s;
    latents: 10 round trips a tar against 4 GB."""
    images = _choose(AWAY, IMAGES)
    assert images.stream and images.stream_seconds < images.walk_seconds
    assert images.reason == (
        "a read waits 20.0 ms for its first byte, 128 small reads at once went at 20,000 a "
        "second and 32 large ones at 1.6 GB/s, and samples are 100.0 KB apart: streaming the "
        f"tars, about {images.stream_seconds:.2f} s, beats walking their headers, about "
        f"{images.walk_seconds:.2f} s")
    latents = _choose(AWAY, LATENTS)
    assert not latents.stream and latents.walk_seconds < latents.stream_seconds
    assert latents.reason.endswith(f"walking the headers, about {latents.walk_seconds:.2f} s, "
                                   f"beats streaming the tars, about "
                                   f"{latents.stream_seconds:.2f} s")


def test_where_requests_cost_the_store_cpu_on_the_same_cores_images_stream_at_any_latency():
    """20,000 reads at 2,800 a second take 7 s whatever the latency; 2 GB at 880 MB/s 2.3 s."""
    assert _choose(SHARED, IMAGES).stream
    assert not _choose(SHARED, LATENTS).stream


def test_a_near_store_that_answers_requests_cheaply_is_walked():
    assert not _choose(NEAR, IMAGES).stream
    assert not _choose(NEAR, LATENTS).stream


def test_the_longer_the_round_trip_the_larger_the_samples_that_stream():
    def stream(latency: float, spacing: int) -> bool:
        return choose(Link(latency, 20_000, 32 * 50e6), spacing, 10_000_000, tars=200,
                      walks_at_once=RUST_WALKS_AT_ONCE).stream

    for latency, largest in ((0.020, 100_000), (0.050, 250_000), (0.100, 500_000)):
        assert stream(latency, largest) and not stream(latency, 8 * largest), latency
    assert not stream(0.005, 100_000)


def test_members_too_small_for_ranged_reads_stream_even_unmeasured():
    for link in (None, NEAR, Link(0.001, 10, 1e3)):
        assert choose(link, 5_000, 10_000_000).stream
    assert not choose(None, 100_000, 10_000_000).stream


def test_the_probe_measures_the_latency_and_the_rates_of_reads_at_once():
    probe = Probe()
    probe.small = [0.045, 0.021, 0.020, 0.019]  # the first opened the connection
    assert probe.link() is None  # no reads at once yet
    probe.reads = (255, 0.045 + 0.090)  # each opened a connection too
    probe.pieces = [(32, 32 << 20, 0.020 + 0.080), (32, 32 << 20, 0.020 + 0.040)]
    link = probe.link()  # the faster of the two large reads at once: a stall only slows
    assert link is not None and link.latency == pytest.approx(0.020)
    assert link.reads_per_second == pytest.approx(255 / 0.090)
    assert link.bytes_per_second == pytest.approx((32 << 20) / 0.040)
    assert (link.walks, link.streams) == (255, 32)
    assert STREAM_PIECE >= 1 << 20


def test_a_probed_tar_times_only_its_reads_one_after_the_other(tmp_path):
    """The first tar's reads one after the other are the latency's; its large read at once,
    later, is the bandwidth's. Walked over a real tar's bytes, as the index walks it."""
    tar = next(tars_of(tmp_path / "images", "images").glob("*.tar")).read_bytes()
    probe = Probe()
    read = TarRead("t.tar", len(tar), threading.Event(), probe=probe)
    while (span := read.span()) is not None:
        read.feed(span[0], tar[span[0]:span[1]], 0.02)
    assert read.reads == len(probe.small) >= PROBE_READS and read.walk.second_sample
    span = read.span(PROBE_PIECE)
    assert span is not None and span[1] == min(len(tar), span[0] + PROBE_PIECE)
    read.feed(span[0], tar[span[0]:span[1]], 0.05)
    assert len(probe.small) == read.reads - 1 and 0.05 not in probe.small


def test_the_variable_forces_a_way_or_is_one_sentence(monkeypatch):
    monkeypatch.delenv("SHARDCOOK_TAR_READS", raising=False)
    assert forced() is None
    for way in ("walk", "stream"):
        monkeypatch.setenv("SHARDCOOK_TAR_READS", way)
        choice = forced()
        assert choice is not None and choice.stream == (way == "stream")
    monkeypatch.setenv("SHARDCOOK_TAR_READS", "fast")
    with pytest.raises(ConfigError, match=r"^SHARDCOOK_TAR_READS='fast' must be walk, stream or "
                                          r"auto\.$"):
        forced()


def test_a_bad_variable_is_one_line_and_exit_2_from_finalize(bucket, monkeypatch):
    store, tmp, _ = bucket
    store.upload_folder(tmp / "images", "bad-variable")
    monkeypatch.setenv("SHARDCOOK_TAR_READS", "fast")
    r = cli("finalize", "--encoding", "generic", "--scratch-dir", tmp,
            store.url("bad-variable"))
    assert r.code == 2
    assert one_error_line(r) == "error: SHARDCOOK_TAR_READS='fast' must be walk, stream or auto."
    assert store.keys("bad-variable/") == [f"bad-variable/images-{t:03d}.tar" for t in range(3)]


# -- both ways, end to end ---------------------------------------------------------------------

@pytest.mark.parametrize("way", ["walk", "stream"])
@pytest.mark.parametrize("kind", ["images", "latents"])
@pytest.mark.parametrize("client", ["boto3", "rust"])
def test_either_way_indexes_as_energon_prepare_does_on_a_local_copy(
        bucket, s3_server, monkeypatch, caplog, kind, way, client):
    store, tmp, theirs = bucket
    prefix = f"{kind}-{way}-{client}"
    store.upload_folder(tmp / kind, prefix)
    options = {"rust_client": {"allow_http": True}} if client == "rust" else {}
    proxy = StoreProxy(s3_server.port)  # counts what the store sends
    monkeypatch.setenv("SHARDCOOK_TAR_READS", way)
    try:
        url = add_profile(store, f"{kind}{way}{client}", endpoint_url=proxy.endpoint, **options)
        with caplog.at_level(logging.INFO, logger="shardcook.dataset.fetched"):
            result = finalize(f"{url}/{prefix}", encoding="generic", split="1,0,0",
                              scratch_dir=tmp)
        counted = proxy.stats()
    finally:
        proxy.stop()
    count, samples, big = SIZES[kind]
    assert result.index.num_samples == count * samples
    assert_same_index(_downloaded(store, prefix, tmp), theirs[kind])
    said = [r.getMessage() for r in caplog.records if r.name == "shardcook.dataset.fetched"]
    assert f"SHARDCOOK_TAR_READS={way} says so" in said[0]
    assert said[-1].startswith(f"indexed {count} tars from their bytes: {count} "
                               f"{'streamed' if way == 'stream' else 'walked'} ("), said
    share = float(re.search(r"MiB read, ([\d.]+)% of them\)$", said[-1]).group(1))
    size = sum(p.stat().st_size for p in (tmp / kind).glob("*.tar"))
    # besides the index's reads, finalize reads the first sample of the first tar, to check the
    # encoding and in validation, a few times
    first_samples = 4 * (big * 1.1 + 4096)
    if way == "walk":
        assert share < 5 and counted["ranged_gets"] >= count * samples, (said, counted)
        assert counted["downloaded"] < size * 0.05 + first_samples, (counted, size)
    else:  # every byte, but what of a member longer than a piece lies past the piece's end
        assert share > (99 if kind == "images" else 50), said
        assert counted["ranged_gets"] < count * samples, counted


def _downloaded(store, prefix: str, tmp: Path) -> Path:
    copy = tmp / f"copy-{prefix}"
    shutil.rmtree(copy, ignore_errors=True)
    store.download_folder(prefix, copy)
    return copy


# -- the choice, through a store 100 ms away ----------------------------------------------------

@pytest.mark.parametrize(("kind", "way"), [("images", "streamed"), ("latents", "walked")])
def test_through_a_store_100_ms_away_images_stream_and_latents_walk(
        bucket, s3_server, monkeypatch, caplog, kind, way):
    """At 100 ms to the first byte and 5 MB/s a connection, a round trip delivers 500 KB: ten
    100 KB samples a tar wait about 1 s walked against 0.3 s streamed; four 2 MB samples about
    0.5 s walked against 1.7 s streamed (the test server's own time adds to each round trip,
    which favours streaming the images all the more). The metadata is the same either way."""
    store, tmp, theirs = bucket
    prefix = f"{kind}-away"
    store.upload_folder(tmp / kind, prefix)
    monkeypatch.delenv("SHARDCOOK_TAR_READS", raising=False)
    proxy = StoreProxy(s3_server.port, latency=0.100, connect=0.100, bandwidth=5e6)
    try:
        url = add_profile(store, f"away{kind}", endpoint_url=proxy.endpoint,
                          rust_client={"allow_http": True})
        with caplog.at_level(logging.INFO, logger="shardcook.dataset.fetched"):
            finalize(f"{url}/{prefix}", encoding="generic", split="1,0,0", scratch_dir=tmp)
    finally:
        proxy.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "shardcook.dataset.fetched"]
    count = SIZES[kind][0]
    assert said[0].startswith(f"{count} tars without an index to read: a read waits "), said
    assert ("streaming the tars, about" if way == "streamed" else "walking the headers, about"
            ) in said[0], said
    assert said[-1].startswith(f"indexed {count} tars from their bytes: {count} {way} ("), said
    assert_same_index(_downloaded(store, prefix, tmp), theirs[kind])


def test_a_tar_of_tiny_members_among_walked_ones_is_streamed(bucket, s3_server, monkeypatch,
                                                             caplog):
    """The first tar's probe chooses walking for the dataset (2 MB latents, 100 ms away); a tar
    whose samples are a few hundred bytes apart is streamed after its first reads all the same."""
    store, tmp, _ = bucket
    mixed = tmp / "mixed"
    shutil.copytree(tmp / "latents", mixed)
    with tarfile.open(mixed / "latents-999-tiny.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for i in range(4000):  # 4 MB: more than the probe reads of it
            info = tarfile.TarInfo(f"tiny{i:04d}.txt")
            info.size, info.mtime = 40, 1_700_000_000
            tar.addfile(info, io.BytesIO(bytes(40)))
    store.upload_folder(mixed, "mixed")
    reference = tmp / "energon-mixed"
    shutil.copytree(mixed, reference)
    r = energon_prepare(reference, "--split-ratio", "1,0,0")
    assert r.returncode == 0, r.stdout + r.stderr
    monkeypatch.delenv("SHARDCOOK_TAR_READS", raising=False)
    proxy = StoreProxy(s3_server.port, latency=0.100, connect=0.100, bandwidth=5e6)
    try:
        url = add_profile(store, "mixedaway", endpoint_url=proxy.endpoint,
                          rust_client={"allow_http": True})
        with caplog.at_level(logging.INFO, logger="shardcook.dataset.fetched"):
            finalize(f"{url}/mixed", encoding="generic", split="1,0,0", scratch_dir=tmp)
    finally:
        proxy.stop()
    said = [r.getMessage() for r in caplog.records if r.name == "shardcook.dataset.fetched"]
    assert "walking the headers, about" in said[0], said
    assert said[-1].startswith("indexed 4 tars from their bytes: 1 streamed ("), said
    assert "), 3 walked (" in said[-1], said
    assert_same_index(_downloaded(store, "mixed", tmp), reference)
