"""Inputs read from a bucket (the real MSC client against the real S3 server): WebDataset tars
by brace pattern or glob, an --input-dir (images + captions, or a caption index), and a chatml
JSONL with its media give the shards the same inputs give from a local folder; the only
difference allowed is where each input came from (meta.json's `source`, report.json's sources).
A missing tar or an unusable URL stops the run in one sentence; an object deleted after the
listing is skipped with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from shardcook import read_shard
from shardcook.config import RunConfig
from shardcook.jobs.raw import RawJob
from shardcook.output.folder import OutputFolder
from shardcook.sources.base import Source

from tests.helpers.chatml import turns, write_images, write_jsonl
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import encode, generated, make_folder, report

RAW = ("--image-size", "32", "--quiet")


def run(*args: object) -> None:
    """`shardcook ARGS` in this process (no interpreter start per run), which must succeed."""
    r = cli(*args)
    assert r.code == 0 and r.escaped is None, (r.stderr, r.escaped)


def samples(out: Path, local: str, url: str) -> list[tuple[str, str, dict[str, bytes]]]:
    """(shard, key, parts) of every sample in shard order; a meta.json `source` under `local`
    is rewritten to lie under `url`."""
    found = []
    for shard in sorted(out.glob("*.tar")):
        for key, parts in read_shard(shard):
            if "meta.json" in parts:
                meta = json.loads(parts["meta.json"])
                meta["source"] = meta["source"].replace(local, url, 1)
                parts["meta.json"] = json.dumps(meta).encode()
            found.append((shard.name, key, dict(parts)))
    assert found
    return found


def skipped(out: Path, local: str, url: str) -> list[tuple[str, str]]:
    return [(s["source"].replace(local, url, 1), s["reason"]) for s in report(out)["skipped"]]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A folder of 7 images + captions, the two raw shards made from it (4 + 3 samples), a flat
    folder listed by metadata.jsonl, and a chatml JSONL with its images."""
    root = tmp_path_factory.mktemp("remote_inputs")
    folder = make_folder(root / "folder", 7, photos=2)
    run("raw", "--input-dir", str(folder), "--output-dir", str(root / "tars"),
            "--shard-size", "4", *RAW)
    indexed = root / "indexed"
    (indexed / "pics").mkdir(parents=True)
    rows = []
    for i in range(5):
        (indexed / "pics" / f"{i}.png").write_bytes(encode(generated(i), "png"))
        rows.append({"file_name": f"pics/{i}.png", "text": f"picture {i}"})
    rows += [{"file_name": "pics/missing.png", "text": "gone"},
             {"file_name": "../folder/images/0000.jpg", "text": "outside"}, {"text": "no name"}]
    write_jsonl(indexed / "metadata.jsonl", rows)
    chat = root / "chat"
    names = write_images(chat / "media", 4, photos=1)
    records = [{"id": f"r{i}", "images": [f"media/{n}"], "conversation": turns(1)}
               for i, n in enumerate(names)]
    records.append({"id": "up", "images": ["../folder/images/0000.jpg"],
                    "conversation": turns(1)})
    write_jsonl(chat / "records.jsonl", records)
    return root


def test_webdataset_tars_in_a_bucket_give_the_local_shards(s3_store, inputs, tmp_path):
    tars = inputs / "tars"
    s3_store.upload_folder(tars, "wds")
    # units of 3 inputs: the second one reads the end of one tar and the start of the next
    local, by_braces, by_glob = tmp_path / "local", tmp_path / "braces", tmp_path / "glob"
    run("raw", "--source-type", "webdataset", "--input-path",
            f"{tars}/{{000000..000001}}.tar", "--output-dir", str(local), "--shard-size", "3", *RAW)
    run("raw", "--source-type", "webdataset", "--input-path",
            s3_store.url("wds/{000000..000001}.tar"), "--output-dir", str(by_braces),
            "--shard-size", "3", *RAW)
    run("raw", "--source-type", "webdataset", "--input-path", s3_store.s3_url("wds/*.tar"),
            "--output-dir", str(by_glob), "--shard-size", "3", *RAW)
    want = samples(local, str(tars), s3_store.url("wds"))
    assert len(want) == 7 and len({s for s, _, _ in want}) == 3
    assert samples(by_braces, "", "") == want
    assert samples(by_glob, s3_store.s3_url("wds"), s3_store.url("wds")) == want


def test_a_tar_with_its_index_beside_it_is_read_once(s3_store, inputs, caplog, tmp_path):
    """Tars with their `.tar.idx` in the bucket are counted from it and each read once; tars
    without one are counted from their headers first (a second read of small tars); the shards
    are the same."""
    import logging
    import re

    tars = inputs / "tars"
    s3_store.upload_folder(tars, "indexed")
    for tar in ("000000.tar", "000001.tar"):
        s3_store.put(f"bare/{tar}", (tars / tar).read_bytes())
    gets = {}
    for prefix in ("indexed", "bare"):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="werkzeug"):
            run("raw", "--source-type", "webdataset", "--input-path",
                s3_store.url(f"{prefix}/{{000000..000001}}.tar"), "--output-dir",
                str(tmp_path / prefix), "--shard-size", "10", *RAW)
        pattern = re.compile(rf'GET /[^/ ]+/{prefix}/(0+[01]\.tar) HTTP')  # 206s are coloured
        gets[prefix] = sorted(m[1] for r in caplog.records if (m := pattern.search(r.getMessage())))
    assert gets["indexed"] == ["000000.tar", "000001.tar"]
    assert gets["bare"] == ["000000.tar", "000000.tar", "000001.tar", "000001.tar"]
    assert samples(tmp_path / "indexed", s3_store.url("indexed"), "") == samples(
        tmp_path / "bare", s3_store.url("bare"), "")


def test_a_missing_tar_in_the_pattern_is_one_sentence(s3_store, inputs, tmp_path):
    s3_store.upload_folder(inputs / "tars", "wds")
    out = tmp_path / "out"
    r = cli("raw", "--source-type", "webdataset", "--input-path",
            s3_store.url("wds/{000000..000002}.tar"), "--output-dir", out, *RAW)
    line = one_error_line(r)
    assert r.code == 2 and f"names '{s3_store.url('wds/000002.tar')}', which does not " \
                          "exist; fix the pattern or restore the file." in line, line
    assert not out.exists()


@pytest.mark.parametrize("layout", ["folder", "indexed"])
def test_an_input_dir_in_a_bucket_gives_the_local_shards(s3_store, inputs, tmp_path, layout):
    src = inputs / layout
    s3_store.upload_folder(src, f"in/{layout}")
    if layout == "indexed":  # what the `..` row names, in the bucket too: still outside
        s3_store.upload_folder(inputs / "folder", "in/folder")
    url = s3_store.url(f"in/{layout}")
    local, remote = tmp_path / "local", tmp_path / "remote"
    run("raw", "--input-dir", str(src), "--output-dir", str(local), "--shard-size", "2", *RAW)
    run("raw", "--input-dir", url, "--output-dir", str(remote), "--shard-size", "2", *RAW)
    assert samples(remote, "", "") == samples(local, str(src), url)
    assert skipped(remote, "", "") == skipped(local, str(inputs), s3_store.url("in"))
    if layout == "indexed":
        assert [reason for _, reason in skipped(remote, "", "")] == [
            "missing_image", "image_outside_folder", "bad_index_row"]


class ListedRawJob(RawJob):
    """`raw` on a source opened (listed, counted) before the run, so a test can change the
    bucket in between."""

    def __init__(self, cfg: RunConfig, listed: Source) -> None:
        super().__init__(cfg)
        self.listed = listed

    def source(self, cfg: RunConfig, folder: OutputFolder) -> Source:
        return self.listed


def test_an_object_deleted_after_the_listing_is_skipped_with_its_reason(s3_store, inputs,
                                                                        tmp_path):
    from shardcook.config import resolve
    from shardcook.pipeline.driver import run_pipeline
    from shardcook.sources.directory import DirectorySource

    s3_store.upload_folder(inputs / "folder", "in")
    cfg = resolve({"input_dir": s3_store.url("in"), "output_dir": str(tmp_path / "out"),
                   "image_size": 32, "quiet": True, "shard_size": 4})
    source = DirectorySource(cfg.source.input_dir or "")  # listed now
    s3_store.server.client().delete_object(Bucket=s3_store.bucket, Key="in/images/0002.webp")
    s3_store.server.client().delete_object(Bucket=s3_store.bucket, Key="in/captions/0005.txt")
    result = run_pipeline(cfg, ListedRawJob(cfg, source))
    assert result is not None
    got = {(s["source"], s["reason"], s.get("detail")) for s in report(tmp_path / "out")["skipped"]}
    assert got == {
        (s3_store.url("in/images/0002.webp"), "unreadable_image", "No such object"),
        (s3_store.url("in/images/0005.webp"), "missing_caption",
         f"{s3_store.url('in/captions/0005.txt')}: No such object"),
    }
    assert sum(1 for shard in (tmp_path / "out").glob("*.tar") for _ in read_shard(shard)) == 5


def test_chatml_from_a_jsonl_and_media_in_a_bucket(s3_store, inputs, tmp_path):
    chat = inputs / "chat"
    s3_store.upload_folder(chat, "chat")
    s3_store.upload_folder(inputs / "folder", "folder")  # what "../folder/..." names
    local, remote = tmp_path / "local", tmp_path / "remote"
    common = ("--val-fraction", "0.3", "--shard-size", "2", "--quiet")
    run("chatml", "--input", str(chat / "records.jsonl"), "--output-dir", str(local), *common)
    run("chatml", "--input", s3_store.url("chat/records.jsonl"), "--output-dir", str(remote),
            *common)
    # the record naming a file above the JSONL's folder: read locally, refused in the bucket
    assert report(local)["skipped"] == []
    (up,) = report(remote)["skipped"]
    assert up["reason"] == "media_outside_folder" and up["source"].endswith("records.jsonl:5")
    assert up["key"] is not None
    want = [s for s in samples(local, "", "") if s[1] != up["key"]]
    assert len(want) == 4 and samples(remote, "", "") == want


@pytest.mark.parametrize(("args", "words"), [
    (["raw", "--input-dir", "msc://nosuchprofile/in"], "profile 'nosuchprofile'"),
    (["raw", "--source-type", "webdataset", "--input-path", "msc://nosuchprofile/{0..3}.tar"],
     "profile 'nosuchprofile'"),
    (["raw", "--input-dir", "ftp://host/in"], "is a URL (ftp://)"),
    (["chatml", "--input", "msc://nosuchprofile/a.jsonl"], "profile 'nosuchprofile'"),
    (["raw", "--input-dir", "msc:///in"], "names no profile"),
    (["raw", "--input-dir", "s3://no-such-bucket-here/in"], "cannot be listed"),
    (["raw", "--source-type", "webdataset", "--input-path", "s3://no-such-bucket-here/*.tar"],
     "cannot be listed"),
])
def test_an_input_url_that_cannot_work_is_one_sentence(s3_store, tmp_path, args, words):
    out = tmp_path / "out"
    r = cli(*args, "--output-dir", out)
    line = one_error_line(r)
    assert r.code == 2 and words in line, line
    assert "DO-NOT-PRINT" not in r.stdout + r.stderr
    assert not out.exists()


def test_a_tar_deleted_after_it_was_counted_stops_the_run_in_one_sentence(s3_store, inputs,
                                                                           tmp_path):
    from shardcook.config import resolve
    from shardcook.errors import DatasetError
    from shardcook.pipeline.driver import run_pipeline
    from shardcook.sources.webdataset import WebDatasetSource

    s3_store.upload_folder(inputs / "tars", "wds")
    cfg = resolve({"source_type": "webdataset", "input_path": s3_store.url("wds"),
                   "output_dir": str(tmp_path / "out"), "image_size": 32, "quiet": True,
                   "shard_size": 4, "finalize": False})
    source = WebDatasetSource(cfg.source.location())  # counted now
    assert len(source) == 7
    s3_store.server.client().delete_object(Bucket=s3_store.bucket, Key="wds/000001.tar")
    with pytest.raises(DatasetError, match=r"Input tar '.*/wds/000001.tar' cannot be read any "
                                           r"more \(No such object\); restore it"):
        run_pipeline(cfg, ListedRawJob(cfg, source))
    assert [p.name for p in (tmp_path / "out").glob("*.tar")] == ["000000.tar"]


def test_an_input_dir_url_that_is_an_object_or_nothing_is_one_sentence(s3_store, tmp_path):
    s3_store.put("in/a.png", encode(generated(0), "png"))
    for url, words in ((s3_store.url("in/a.png"), "is a file, not a folder"),
                       (s3_store.url("nothing"), "does not exist; check --input-dir")):
        r = cli("raw", "--input-dir", url, "--output-dir", tmp_path / "out", *RAW)
        line = one_error_line(r)
        assert r.code == 2 and f"{url!r}" in line and words in line, line
        assert not (tmp_path / "out").exists()


#: Keys under `in/` whose names no file can have; MSC and Energon would read them elsewhere.
UNSAFE_KEYS = ["in/../up.jpg", "in/images/../up.jpg", "in/images/./dot.jpg",
               "in/images//empty.jpg", "in/.."]


def test_objects_whose_names_cannot_be_files_are_skipped_with_their_reason(s3_store, inputs,
                                                                           tmp_path):
    s3_store.upload_folder(inputs / "folder", "in")
    for key in UNSAFE_KEYS:
        s3_store.put(key, encode(generated(9), "jpg"))
    r = cli("raw", "--input-dir", s3_store.url("in"), "--output-dir", tmp_path / "out",
            "--image-size", "32")
    assert r.code == 0 and r.escaped is None, r.stderr
    done = report(tmp_path / "out")
    unsafe = sorted(s["source"] for s in done["skipped"] if s["reason"] == "unsafe_name")
    root = s3_store.url("in")
    assert unsafe == sorted(f"{root}/{key[len('in/'):]}" for key in UNSAFE_KEYS)
    assert done["skipped_by_reason"]["unsafe_name"] == len(UNSAFE_KEYS)
    assert done["num_ignored_files"] == len(UNSAFE_KEYS) and done["num_written"] == 7
    assert f"{len(UNSAFE_KEYS)} extra files ignored" in r.stderr  # the summary
    assert f"unsafe_name: {len(UNSAFE_KEYS)}" in r.stderr


@pytest.mark.parametrize("key", ["wds/../up.tar", "wds/sub/./dot.tar", "wds//empty.tar"])
def test_a_tar_object_whose_name_cannot_be_a_file_is_refused(s3_store, inputs, tmp_path, key):
    s3_store.upload_folder(inputs / "tars", "wds")
    s3_store.put(key, (inputs / "tars" / "000000.tar").read_bytes())
    out = tmp_path / "out"
    r = cli("raw", "--source-type", "webdataset", "--input-path", s3_store.url("wds/**"),
            "--output-dir", out, *RAW)
    line = one_error_line(r)
    assert r.code == 2, line
    assert f"matches {s3_store.url('wds')}/{key[len('wds/'):]}, whose name" in line, line
    assert not out.exists()
