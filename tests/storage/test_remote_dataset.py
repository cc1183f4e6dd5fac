"""The dataset commands on a dataset in object storage (`msc://PROFILE/path`, `s3://bucket/path`)
against a real S3 server: finalize writes what `energon prepare` writes on the same bucket, and
Energon reads it from there; validate, info and preview say on the URL what they say on a local
copy; scratch holds one window of shards at a time; bad URLs are one sentence."""

from __future__ import annotations

import json
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from shardcook import DuplicateKeyError, ShardWriter, build_index, finalize, read_shard
from shardcook.dataset.fetched import PLACEHOLDER, WINDOW

from tests.helpers.dataset import cli, one_error_line, raw_parts
from tests.helpers.energon import encoded_parts
from tests.helpers.energon_bridge import bridge_parts
from tests.helpers.raw import encode, energon_parts, generated
from tests.helpers.s3server import SECRET_KEY, Store, make_store
from tests.helpers.shards import assert_same_index, energon_prepare

SPLIT = "0.6,0.2,0.2"


def chatml_parts(i: int) -> dict[str, bytes]:
    turns = [{"role": "user", "content": "<image> What is this?"},
             {"role": "assistant", "content": f"picture {i}"}]
    return {"image.jpg": encode(generated(i, (32, 32))),
            "conversation.json": json.dumps(turns).encode()}


LAYOUTS = {  # name: (encoding, parts of sample i)
    "raw": ("raw", raw_parts),
    "encoded": ("preencoded", lambda i: encoded_parts(f"{i:010d}", (4, 4), seed=i)),
    "bridge": ("bridge-flux", lambda i: bridge_parts(f"{i:010d}", (4, 4), seed=i)),
    "chatml": ("chatml", chatml_parts),
}


@dataclass
class Bucket:
    store: Store
    tmp: Path
    #: name -> the local folder of unfinalized shards it was uploaded from
    local: dict[str, Path]
    scratch: Path


def write(folder: Path, parts, n_shards: int, per_shard: int = 3) -> Path:
    with ShardWriter(folder, shard_size=per_shard) as w:
        for i in range(n_shards * per_shard):
            w.write(f"{i:010d}", parts(i))
    return folder


@pytest.fixture(scope="module")
def bucket(s3_server, tmp_path_factory):
    """One bucket: raw (7 shards, so finalize needs two windows) and small encoded, bridge-flux
    and chatml datasets, unfinalized, each also under `NAME-energon/` for `energon prepare`;
    `raw` is finalized on the URL by the CLI."""
    tmp = tmp_path_factory.mktemp("remote")
    store = make_store(s3_server, tmp / "cfg", "remote-datasets", "remoteds")
    with pytest.MonkeyPatch.context() as env:
        for key, value in store.env.items():
            env.setenv(key, value)
        local = {}
        for name, (_, parts) in LAYOUTS.items():
            local[name] = write(tmp / name, parts, n_shards=7 if name == "raw" else 2)
            store.upload_folder(local[name], name)
            store.upload_folder(local[name], f"{name}-energon")
        scratch = tmp / "scratch"
        scratch.mkdir()
        r = cli("finalize", store.url("raw"), "--encoding", "raw", "--split", SPLIT,
                "--scratch-dir", scratch)
        assert r.code == 0, r.stdout + r.stderr
        assert "indexed 21 samples in 7 shards" in r.stdout and "validated: ok" in r.stdout
        yield Bucket(store, tmp, local, scratch)


def local_copy(bucket: Bucket, name: str) -> Path:
    """The bucket's `name/` downloaded (with boto3), finalized metadata and all."""
    folder = bucket.tmp / f"copy-{name}"
    if not folder.exists():
        bucket.store.download_folder(name, folder)
    return folder


def shard_samples(folder: Path) -> dict[str, dict[str, bytes]]:
    return {key: dict(parts) for shard in sorted(folder.glob("*.tar"))
            for key, parts in read_shard(shard)}


def test_finalize_on_a_url_writes_what_energon_prepare_writes_and_energon_reads_it(bucket):
    from megatron.energon.epathlib import EPath

    store = bucket.store
    ref = energon_prepare(store.url("raw-energon"), "--split-ratio", SPLIT)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    ours, theirs = local_copy(bucket, "raw"), local_copy(bucket, "raw-energon")
    assert_same_index(ours, theirs)
    # the shards are untouched; finalize added the index, metadata and its record, nothing else
    shards = sorted(p.name for p in bucket.local["raw"].glob("*.tar"))
    for shard in shards:
        assert store.get(f"raw/{shard}") == (bucket.local["raw"] / shard).read_bytes()
    meta = [".info.json", "dataset.yaml", "index.sqlite", "index.uuid", "split.yaml"]
    assert store.keys("raw/") == sorted(
        [f"raw/{s}" for s in shards] + [f"raw/{s}.idx" for s in shards]
        + [f"raw/.nv-meta/{m}" for m in meta] + ["raw/.shardcook/finalize.json"])
    assert list(bucket.scratch.iterdir()) == []
    # Energon itself reads every sample of every split from the bucket
    read = energon_parts(EPath(store.url("raw")))
    assert {key: parts for key, (_, parts) in read.items()} == shard_samples(bucket.local["raw"])
    assert sorted(split for split, _ in read.values()).count("train") == 12


def test_every_layout_finalizes_on_a_url_and_loads_through_energon(bucket):
    from megatron.energon.epathlib import EPath

    store = bucket.store
    for name, (encoding, _) in LAYOUTS.items():
        if name == "raw":
            continue
        r = cli("finalize", store.url(name), "--encoding", encoding, "--scratch-dir",
                bucket.scratch)
        assert r.code == 0, (name, r.stdout + r.stderr)
        expected = shard_samples(bucket.local[name])
        if name == "chatml":  # its class is Megatron-Bridge's (not installed): Energon reads
            # the crude twin `energon prepare` indexed on the bucket, with the same index
            ref = energon_prepare(store.url(f"{name}-energon"), "--split-ratio", "1,0,0")
            assert ref.returncode == 0, ref.stdout + ref.stderr
            assert_same_index(local_copy(bucket, name), local_copy(bucket, f"{name}-energon"))
            name = f"{name}-energon"
        read = energon_parts(EPath(store.url(name)))
        assert {key: parts for key, (_, parts) in read.items()} == expected, name
    assert list(bucket.scratch.iterdir()) == []


def _same_but_directory(url_report: dict, local_report: dict, url: str, local: Path) -> None:
    text = json.dumps(local_report).replace(str(local), url)
    assert url_report == json.loads(text)


def test_validate_info_and_preview_on_a_url_say_what_they_say_on_a_local_copy(bucket):
    store, copy = bucket.store, local_copy(bucket, "raw")
    url = store.url("raw")
    for args in (["validate", "--json"], ["validate", "--json", "--deep"], ["info", "--json"]):
        remote = cli(*args, url, "--scratch-dir", bucket.scratch)
        local = cli(*args, copy)
        assert remote.code == local.code == 0, remote.stdout + remote.stderr
        _same_but_directory(json.loads(remote.stdout), json.loads(local.stdout), url, copy)
    # an s3:// URL of the same folder, without a profile
    by_s3 = cli("info", "--json", store.s3_url("raw"))
    assert by_s3.code == 0, by_s3.stderr
    assert json.loads(by_s3.stdout)["samples"] == 21
    sheets = []
    for source, out in ((url, "url.png"), (copy, "local.png")):
        r = cli("preview", source, "--count", "4", "--out", bucket.tmp / out,
                "--scratch-dir", bucket.scratch)
        assert r.code == 0, r.stdout + r.stderr
        sheets.append(np.asarray(Image.open(bucket.tmp / out)))
    assert np.array_equal(*sheets)
    assert list(bucket.scratch.iterdir()) == []


def test_validate_deep_finds_a_damaged_shard_in_the_bucket(bucket):
    store = bucket.store
    for key in store.keys("raw/"):
        store.put("damaged/" + key[len("raw/"):], store.get(key))
    # shard 3: the second sample's tar header is overwritten (its size is unchanged)
    offsets = np.frombuffer(store.get("damaged/000003.tar.idx"), dtype=np.uint64)
    data = bytearray(store.get("damaged/000003.tar"))
    data[int(offsets[1]):int(offsets[1]) + 100] = b"\xff" * 100
    store.put("damaged/000003.tar", bytes(data))
    url = store.url("damaged")
    quick = cli("validate", url)
    assert quick.code == 0, quick.stdout  # nothing downloaded beyond first samples: not seen
    deep = cli("validate", "--deep", url)
    assert deep.code == 1
    problems = [line for line in deep.stdout.splitlines() if line.startswith("problem:")]
    assert problems and all("000003.tar" in p for p in problems), deep.stdout
    # shard 5 cut short: the listing's size alone shows it
    store.put("damaged/000005.tar", store.get("damaged/000005.tar")[:2048])
    quick = cli("validate", url)
    assert quick.code == 1
    assert "000005.tar: the shard is 2,048 bytes but its index ends at" in quick.stdout
    assert url in quick.stdout and str(bucket.scratch) not in quick.stdout


def test_finalize_holds_one_window_of_shards_and_refuses_a_key_in_two_windows(bucket, tmp_path):
    store = bucket.store
    folder = write(tmp_path / "dup", raw_parts, n_shards=7)
    # shard 6 (second window) repeats a key of shard 1 (first window)
    shutil.copy(folder / "000001.tar", folder / "000006.tar")
    store.upload_folder(folder, "dup")
    store.upload_folder(bucket.local["raw"], "windowed")
    before = {key: store.get(key) for key in store.keys("dup/")}
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    most, stop = [0], threading.Event()

    def watch() -> None:  # counts shards whose bytes are on scratch
        while not stop.is_set():
            here = 0
            try:
                for path in scratch.rglob("*.tar"):
                    with path.open("rb") as f:
                        here += f.read(len(PLACEHOLDER)) != PLACEHOLDER
            except OSError:  # a view removed while we looked
                continue
            most[0] = max(most[0], here)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with pytest.raises(DuplicateKeyError) as e:
            finalize(store.url("dup"), encoding="raw", scratch_dir=scratch)
        result = finalize(store.url("windowed"), encoding="raw", scratch_dir=scratch)
    finally:
        stop.set()
        watcher.join()
    assert str(e.value) == (
        'duplicate sample key "0000000003": in 000001.tar and in 000006.tar; keys must be '
        "unique across the dataset (rename or drop one)")
    assert store.keys("dup/") == sorted(before)  # nothing written, nothing removed
    assert all(store.get(key) == data for key, data in before.items())
    assert result.index.num_samples == 21 and result.validation is not None
    assert result.index.directory == store.url("windowed")
    assert 1 <= most[0] <= WINDOW
    assert list(scratch.iterdir()) == []
    # rebuilt without index.sqlite: the one in the bucket goes, the rest is rewritten
    meta = "windowed/.nv-meta/"
    assert f"{meta}index.sqlite" in store.keys(meta)
    uuid = store.get(f"{meta}index.uuid")
    rebuilt = build_index(store.url("windowed"), force=True, sqlite=False, scratch_dir=scratch)
    assert rebuilt.num_samples == 21
    assert store.keys(meta) == [f"{meta}{n}" for n in (".info.json", "dataset.yaml", "index.uuid",
                                                       "split.yaml")]
    assert store.get(f"{meta}index.uuid") != uuid
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize(("args", "words"), [
    (["info", "msc://nosuchprofile/x"], "profile 'nosuchprofile'"),
    (["finalize", "s3://no-such-bucket-here/x"], "cannot list s3://no-such-bucket-here/x"),
    (["validate", "msc:/nosuchprofile/x"], "not a whole URL"),
    (["info", "{url}/nothing-here"], "holds no objects"),
    (["preview", "{url}/encoded-energon"], "has no .nv-meta/dataset.yaml"),
    (["finalize", "{url}/notes"], "no .tar shards found in {url}/notes"),
    (["info", "{url}/trap"], "holds an object named 'a/../../escape.tar', which is no file name"),
])
def test_a_url_that_is_no_dataset_is_one_sentence(bucket, args, words):
    store = bucket.store
    store.put("notes/readme.txt", b"not a dataset")
    store.put("trap/a/../../escape.tar", b"\0" * 1024)
    url = store.url()
    r = cli(*(a.format(url=url) for a in args), "--scratch-dir", bucket.scratch)
    assert r.code == 2, r.stdout + r.stderr
    line = one_error_line(r)
    assert words.format(url=url) in line
    assert SECRET_KEY not in r.stdout + r.stderr
    assert list(bucket.scratch.iterdir()) == []


def _batches(path, split: str, n: int) -> list[dict]:
    import torch
    from shardcook.energon import get_diffusion_loader

    w = get_diffusion_loader(path, batch_size=2, split=split, num_workers=0,
                             batch_drop_last=False)
    out = []
    for _ in range(n):
        batch = next(w)
        out.append({k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
                   | {"__key__": list(batch.__key__)})
    return out


def test_get_diffusion_loader_on_a_url_yields_the_batches_of_the_local_copy(bucket):
    copy, url = local_copy(bucket, "raw"), bucket.store.url("raw")
    for split, n in (("train", 7), ("val", 2)):
        from_url = _batches(url, split, n)
        assert from_url == _batches(copy, split, n), split
        keys = {k for b in from_url for k in b["__key__"]}
        # 0.6,0.2,0.2 of 7 shards of 3: train is shards 0-3, val shard 4
        assert keys <= {f"{i:010d}" for i in range(12)} if split == "train" else (
            keys == {f"{i:010d}" for i in range(12, 15)})


def test_a_blend_names_a_url_dataset_and_the_loader_reads_it(bucket):
    import yaml
    from shardcook.energon import get_diffusion_loader

    url, copy, out = bucket.store.url("raw"), local_copy(bucket, "raw"), bucket.tmp / "mix.yaml"
    r = cli("blend", out, f"{url}=3", f"{copy}=1")
    assert r.code == 0, r.stdout + r.stderr
    blend = yaml.safe_load(out.read_text())["splits"]["train"]["blend"]
    assert blend == [{"path": url, "weight": 3.0}, {"path": "copy-raw", "weight": 1.0}]
    w = get_diffusion_loader(out, batch_size=4, num_workers=0)
    keys = [k for _ in range(6) for k in next(w).__key__]
    assert len(keys) == 24 and set(keys) <= {f"{i:010d}" for i in range(12)}
    refused = cli("blend", bucket.tmp / "bad.yaml", f"{bucket.store.url('encoded-energon')}=1")
    assert refused.code == 2
    line = one_error_line(refused)
    assert f"{bucket.store.url('encoded-energon')} is not a prepared Energon dataset" in line
    assert not (bucket.tmp / "bad.yaml").exists()


def test_tar_index_only_reindexes_in_the_bucket_and_fix_duplicates_is_refused_there(bucket):
    store = bucket.store
    store.upload_folder(write(bucket.tmp / "reindexed", raw_parts, n_shards=2), "reindexed")
    url = store.url("reindexed")
    assert cli("finalize", url, "--encoding", "raw", "--split", SPLIT).code == 0
    uuid, idx = store.get("reindexed/.nv-meta/index.uuid"), store.get("reindexed/000001.tar.idx")
    store.put("reindexed/000001.tar.idx", b"\0" * 8)
    r = cli("finalize", url, "--tar-index-only", "--tmp-path", bucket.scratch)
    assert r.code == 0, r.stdout + r.stderr
    assert store.get("reindexed/000001.tar.idx") == idx
    assert store.get("reindexed/.nv-meta/index.uuid") != uuid
    refused = cli("finalize", url, "--force", "--fix-duplicates")
    assert refused.code == 2 and "bucket" in one_error_line(refused)
