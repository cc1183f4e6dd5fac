"""finalize of tars another tool wrote, in a bucket: indexed from ranged reads of their headers
(GNU long names and PAX headers included), with the index `energon prepare` writes on the same
objects, and only a small share of the big members' bytes read from the store."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from shardcook import ShardError, finalize
from shardcook.dataset.fetched import Fetched
from shardcook.errors import DatasetError
from shardcook.storage import Remote

from tests.helpers.s3server import add_profile, make_store
from tests.helpers.shards import assert_same_index, energon_prepare
from tests.helpers.tcpproxy import TcpProxy

SPLIT = "0.6,0.2,0.2"
BIG = 100_000
#: shard name -> (tar format, samples, bytes of the big member)
SHARDS = {
    "gnu-00.tar": (tarfile.GNU_FORMAT, 12, BIG),
    "pax-01.tar": (tarfile.PAX_FORMAT, 12, BIG),
    "ustar-02.tar": (tarfile.USTAR_FORMAT, 12, BIG),
    "tiny-03.tar": (tarfile.PAX_FORMAT, 60, 40),
}


def foreign_tar(path: Path, fmt: int, samples: int, big: int, seed: int) -> None:
    """A WebDataset tar as Python's tarfile writes one: a big `.bin` and a small `.json` per
    sample, long keys in the GNU and PAX shards, a folder entry and Energon-skipped metadata."""
    rng = np.random.default_rng(seed)
    long = fmt != tarfile.USTAR_FORMAT
    with tarfile.open(path, "w", format=fmt) as tar:
        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))

        folder = tarfile.TarInfo("sub")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        add("__meta__/about.txt", b"skipped")
        for i in range(samples):
            key = f"sub/{'k' * 120 if long else 'k'}{seed:02d}{i:04d}"
            add(f"{key}.bin", rng.integers(0, 256, big, dtype=np.uint8).tobytes())
            add(f"{key}.json", json.dumps({"i": i, "seed": seed}).encode())


@pytest.fixture(scope="module")
def foreign(s3_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("foreign")
    store = make_store(s3_server, tmp / "cfg", "foreign-tars", "foreigntars")
    local = tmp / "tars"
    local.mkdir()
    for seed, (name, (fmt, samples, big)) in enumerate(SHARDS.items()):
        foreign_tar(local / name, fmt, samples, big, seed)
    for prefix in ("boto3", "rust", "theirs"):
        store.upload_folder(local, prefix)
    with pytest.MonkeyPatch.context() as env:
        for key, value in store.env.items():
            env.setenv(key, value)
        yield store, local, tmp


@pytest.mark.parametrize("client", ["boto3", "rust"])
def test_foreign_tars_are_indexed_from_ranged_header_reads_as_energon_indexes_them(
        foreign, s3_server, client, monkeypatch):
    """With MSC's boto3 client (a thread per walk) and with its Rust client, which a profile
    turns on (the walks as tasks awaiting it). Walking is forced: which way finalize takes on a
    given store is tests/storage/test_tar_reads.py's."""
    store, local, tmp = foreign
    monkeypatch.setenv("SHARDCOOK_TAR_READS", "walk")
    options = {"rust_client": {"allow_http": True}} if client == "rust" else {}
    proxy = TcpProxy(s3_server.port)
    try:  # the same bucket through a proxy that counts the bytes the store sends
        counted = add_profile(store, f"counted{client}", endpoint_url=proxy.endpoint, **options)
        reads = Remote(f"{counted}/{client}").rust_reads(4)
        assert (reads is not None) == (client == "rust")
        if reads is not None:
            reads.close()
        result = finalize(f"{counted}/{client}", encoding="generic", split=SPLIT,
                          scratch_dir=tmp)
    finally:
        proxy.stop()
    assert result.index.num_samples == 96 and result.validation is not None
    if not (tmp / "copy-theirs").is_dir():
        ref = energon_prepare(store.url("theirs"), "--split-ratio", SPLIT)
        assert ref.returncode == 0, ref.stdout + ref.stderr
        store.download_folder("theirs", tmp / "copy-theirs")
    ours = tmp / f"copy-{client}"
    store.download_folder(client, ours)
    assert_same_index(ours, tmp / "copy-theirs")
    # the shards were walked with ranged reads (the tiny one's reads take all its bytes); besides,
    # finalize read the first sample of the first shard (to check the encoding) and validate
    # each split's: a tenth of the big shards is room for those walks and HTTP, where
    # downloading the shards would read them all
    sizes = {name: (local / name).stat().st_size for name in SHARDS}
    big = sum(size for name, size in sizes.items() if name != "tiny-03.tar")
    first_samples = 4 * (BIG + 2048)
    assert proxy.downloaded < sizes["tiny-03.tar"] + first_samples + big // 10, (
        proxy.downloaded, sizes)


def test_a_truncated_foreign_tar_is_named_with_its_url_and_the_bucket_is_left_as_it_was(
        foreign):
    store, local, tmp = foreign
    whole = (local / "gnu-00.tar").read_bytes()
    store.put("broken/gnu-00.tar", whole[:250_000])
    with pytest.raises(ShardError) as e:
        finalize(store.url("broken"), encoding="generic", scratch_dir=tmp)
    assert str(e.value).startswith(f"{store.url('broken')}/gnu-00.tar: member data of ")
    assert "runs past the end of the file (250000 bytes; truncated?)" in str(e.value)
    assert store.keys("broken/") == ["broken/gnu-00.tar"]


@pytest.mark.parametrize("client", ["boto3", "rust"])
def test_a_tar_gone_before_its_walk_is_named_with_its_url(foreign, client):
    """A read that fails mid-walk (the object deleted after the listing) is one sentence naming
    the object, on either client, and no walk is left running."""
    store, local, tmp = foreign
    options = {"rust_client": {"allow_http": True}} if client == "rust" else {}
    profile = add_profile(store, f"gone{client}", **options)
    store.upload_folder(local, f"gone-{client}")
    with Fetched.open(Remote(f"{profile}/gone-{client}"), scratch_dir=tmp) as view:
        store.server.client().delete_object(Bucket=store.bucket,
                                            Key=f"gone-{client}/pax-01.tar")
        with pytest.raises(DatasetError) as e:
            view.index_shards(sorted(SHARDS), None)
    assert str(e.value).startswith(f"cannot read {profile}/gone-{client}/pax-01.tar ("), e.value
    assert "pax-01.tar does not exist" in str(e.value) and "Traceback" not in str(e.value)
