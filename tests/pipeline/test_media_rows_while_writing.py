"""`raw`, `encode` and `chatml` with `--media-metadata-by-*`: the rows are computed from the bytes
being written and recorded per shard (`.shardcook/media/`), so the run's finalize, and a later
`shardcook finalize` of the folder (local or in a bucket), write index.sqlite's media tables
without reading a shard: the shard scanner is replaced by one that raises while they run. The
rows must equal what the real `energon prepare --media-metadata-by-*` 7.4.1 writes on a copy of
the same shards (every column but `created_at_utc`). The runs are made once per module."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
import yaml
from shardcook.dataset.media import scan as mediascan

from tests.helpers.chatml import write_images, write_jsonl
from tests.helpers.chatml_media import write_audio, write_clip
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.encode import encode_args
from tests.helpers.media import energon, media_rows
from tests.helpers.raw import killed_after, make_folder

#: The flags of each strategy, and the image format raw writes under it.
STRATEGIES = {
    "extension": (("--media-metadata-by-extension",), "jpg"),
    "header": (("--media-metadata-by-header",), "png"),
    "glob-none": (("--media-metadata-by-glob", "*.heic,*.avif"), "webp"),
    "glob": (("--media-metadata-by-glob", "*.webp,*.txt"), "webp"),
}
#: Energon 7.4.1 fails on any member a glob matches: that one is checked against finalize's
#: reading of the shards (tests/dataset/test_media_metadata.py checks that against Energon).
ENERGON_TAKES = ("extension", "header", "glob-none")


class ShardRead(Exception):
    """The shard scanner was called: a shard was read for its media metadata."""


@contextmanager
def no_shard_read() -> Iterator[None]:
    """Within the block, reading a shard's members for media metadata raises ShardRead."""
    def refuse(root, shards, media_filter):
        raise ShardRead(f"{media_filter.strategy}: read {list(shards)}")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mediascan, "shard_rows", refuse)
        yield


def ok(*args: object) -> None:
    r = cli(*args)
    assert r.code == 0 and r.escaped is None, (r.stdout, r.stderr, r.escaped)


def shards_only(out: Path, dest: Path) -> Path:
    """A copy of the shards alone, for Energon to index afresh."""
    shutil.copytree(out, dest, ignore=shutil.ignore_patterns(".shardcook", ".nv-meta", "*.idx"))
    return dest


def energon_rows(out: Path, dest: Path, *flags: str) -> dict[str, list[tuple]]:
    """The media rows `energon prepare FLAGS` writes on a copy of `out`'s shards."""
    copy = shards_only(out, dest)
    energon("prepare", "--non-interactive", "--sample-type", "CrudeWebdataset", "--no-progress",
            "--num-workers", "1", "--split-ratio", "1,0,0", *flags, copy)
    return media_rows(copy)


def records(out: Path) -> list[str]:
    return sorted(p.name for p in (out / ".shardcook" / "media").glob("*.sqlite"))


def stages(out: Path) -> dict[str, float]:
    return yaml.safe_load((out / ".shardcook" / "report.json").read_text())["stage_seconds"]


def shard_digests(out: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.tar"))}


def raw_args(src: Path, out: Path | str, image_format: str, *extra: object) -> list[object]:
    return ["raw", "--input-dir", src, "--output-dir", out, "--shard-size", "2",
            "--resize-mode", "variable", "--max-size", "96", "--image-format", image_format,
            "--workers", "1", "--quiet", "--split", "1,0,0", *extra]


@pytest.fixture(scope="module")
def raw_runs(tmp_path_factory) -> dict[str, object]:
    """A raw run of 6 inputs (4 real photos) per strategy, made while no shard may be read, and
    the references: Energon's rows on copies, finalize's reading for the matching glob."""
    base = tmp_path_factory.mktemp("mediarows")
    src = make_folder(base / "in", 6, photos=4)
    outs, theirs = {}, {}
    with no_shard_read():
        for name, (flags, image_format) in STRATEGIES.items():
            outs[name] = base / name
            ok(*raw_args(src, outs[name], image_format, *flags))
    for name in ENERGON_TAKES:
        theirs[name] = energon_rows(outs[name], base / f"energon-{name}", *STRATEGIES[name][0])
    read = shards_only(outs["glob"], base / "read-glob")
    ok("finalize", read, "--encoding", "raw", *STRATEGIES["glob"][0])
    theirs["glob"] = media_rows(read)
    plain = base / "plain"
    ok(*raw_args(src, plain, "png"))
    return {"src": src, "outs": outs, "theirs": theirs, "plain": plain, "base": base}


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_raw_records_rows_as_energon_writes_them(raw_runs, strategy):
    out = raw_runs["outs"][strategy]
    assert records(out) == ["000000.tar.sqlite", "000001.tar.sqlite", "000002.tar.sqlite"]
    ours, theirs = media_rows(out), raw_runs["theirs"][strategy]
    assert ours == theirs
    kinds = {key.split(".", 1)[1]: kind for key, kind, _ in ours["media_metadata"]}
    expected = {"extension": {"jpg": "image"}, "header": {"png": "image"}, "glob-none": {},
                "glob": {"webp": "image"}}[strategy]
    assert kinds == expected
    assert len(ours["media_metadata"]) == (0 if strategy == "glob-none" else 6)
    assert "media_rows" in stages(out)


def test_a_run_without_the_flags_records_nothing_and_writes_the_same_shards(raw_runs):
    plain, header = raw_runs["plain"], raw_runs["outs"]["header"]
    assert not (plain / ".shardcook" / "media").exists() and "media_rows" not in stages(plain)
    with closing(sqlite3.connect(plain / ".nv-meta" / "index.sqlite")) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master")}
    assert not tables & {"media_metadata", "media_filters"}
    assert shard_digests(plain) == shard_digests(header)
    assert (plain / ".nv-meta" / ".info.json").read_bytes() == (
        header / ".nv-meta" / ".info.json").read_bytes()


def test_a_later_finalize_merges_the_records_and_keeps_energons_semantics(raw_runs, tmp_path):
    src, theirs = raw_runs["src"], raw_runs["theirs"]
    out = tmp_path / "out"
    with no_shard_read():
        ok(*raw_args(src, out, "jpg", "--media-metadata-by-extension", "--no-finalize"))
        assert not (out / ".nv-meta").exists()
        ok("finalize", out)  # no flag, no media tables yet: the run's filter, from its records
        assert media_rows(out) == theirs["extension"]
        ok("finalize", out, "--force")  # no flag: the tables there are kept
        assert media_rows(out) == theirs["extension"]
        ok("finalize", out, "--force", "--media-metadata-by-extension")  # the same: records
        assert media_rows(out) == theirs["extension"]
        r = cli("finalize", out, "--force", "--media-metadata-by-header")  # another: read
        assert isinstance(r.escaped, ShardRead), (r.stdout, r.stderr, r.escaped)
        assert media_rows(out) == theirs["extension"]  # the failed finalize changed nothing
        (out / "000001.tar").touch()  # a rewritten shard: its record no longer describes it
        r = cli("finalize", out, "--force", "--media-metadata-by-extension")
        assert isinstance(r.escaped, ShardRead) and "000001.tar']" in str(r.escaped)
    ok("finalize", out, "--force", "--media-metadata-by-header")
    header = media_rows(out)
    assert header["media_metadata"] == energon_rows(
        out, tmp_path / "energon", "--media-metadata-by-header")["media_metadata"]
    assert [row[1:] for row in header["media_filters"]] == [("HEADER", "")]


def test_resume_after_an_interrupted_run_keeps_the_rows_complete(raw_runs, tmp_path):
    """The worst moments of a killed run: unit 1's shard renamed but neither its record nor its
    marker written, unit 2's record written but not its marker; the same command redoes both."""
    src = raw_runs["src"]
    out = tmp_path / "out"
    args = raw_args(src, out, "png", "--media-metadata-by-header")
    ok(*args, "--no-finalize")
    progress, media = out / ".shardcook" / "progress", out / ".shardcook" / "media"
    for unit in (1, 2):
        (progress / f"{unit:06d}.json").unlink()
    (media / "000001.tar.sqlite").unlink()
    with closing(sqlite3.connect(media / "000002.tar.sqlite")) as db, db:
        db.execute("DELETE FROM media_metadata")  # what the redone unit must not keep
    with no_shard_read():
        ok(*args)
    assert records(out) == records(raw_runs["outs"]["header"])
    assert media_rows(out) == raw_runs["theirs"]["header"]


def test_a_run_killed_and_resumed_has_every_row(tmp_path):
    """SIGKILL mid-run (its units' records and markers as they were), then the same command."""
    src = make_folder(tmp_path / "in", 16, photos=16)
    out = tmp_path / "out"
    args = [str(a) for a in raw_args(src, out, "jpg", "--media-metadata-by-extension",
                                     "--max-size", "640")]
    assert 2 <= len(killed_after(args, out, 2)) < 8
    with no_shard_read():
        ok(*args)
    assert records(out) == [f"00000{u}.tar.sqlite" for u in range(8)]
    theirs = energon_rows(out, tmp_path / "energon", "--media-metadata-by-extension")
    assert media_rows(out) == theirs and len(theirs["media_metadata"]) == 16


def test_a_bucket_run_records_and_a_later_finalize_reads_no_shard(raw_runs, s3_store, tmp_path):
    src = raw_runs["src"]
    url = s3_store.url("data/set")
    with no_shard_read():
        ok(*raw_args(src, url, "png", "--media-metadata-by-header", "--no-finalize"))
        keys = s3_store.keys("data/set/.shardcook/media/")
        assert keys == [f"data/set/.shardcook/media/00000{i}.tar.sqlite" for i in range(3)]
        ok("finalize", url)
    s3_store.download_folder("data/set", tmp_path / "copy")
    assert media_rows(tmp_path / "copy") == raw_runs["theirs"]["header"]


@pytest.mark.parametrize("command", ["raw", "encode", "chatml"])
@pytest.mark.parametrize(("flags", "says"), [
    (("--media-metadata-by-extension", "--media-metadata-by-header"), "not several"),
    (("--media-metadata-by-glob", ""), "takes comma-separated patterns"),
])
def test_bad_combinations_are_one_sentence(tmp_path, command, flags, says):
    source = ("--input", tmp_path / "d.jsonl") if command == "chatml" else (
        "--input-dir", tmp_path)
    r = cli(command, *source, "--output-dir", tmp_path / "out", *flags)
    assert r.code == 2
    line = one_error_line(r)
    finalize = one_error_line(cli("finalize", tmp_path, *flags))
    assert says in line and line == finalize


def test_the_yaml_config_takes_them(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"output": {"media_metadata_by_glob": "*.jpg"}}))
    r = cli("raw", "--config", config, "--input-dir", tmp_path, "--output-dir", tmp_path / "o",
            "--print-config")
    assert r.code == 0, r.stderr
    assert yaml.safe_load(r.stdout)["output"]["media_metadata_by_glob"] == "*.jpg"
    config.write_text(yaml.safe_dump({"output": {"media_metadata_by_glob": "*.jpg",
                                                 "media_metadata_by_header": True}}))
    r = cli("raw", "--config", config, "--input-dir", tmp_path, "--output-dir", tmp_path / "o")
    assert r.code == 2 and "not several" in one_error_line(r)


@pytest.fixture(scope="module")
def chatml_input(tmp_path_factory) -> Path:
    """Conversations with an image, a video (kept as `video.mp4`) and an audio file each."""
    src = tmp_path_factory.mktemp("chatml_media")
    names = write_images(src, 3, photos=2)
    write_clip(src / "clip.mp4", seconds=1, fps=8)
    write_audio(src / "tone.wav", seconds=0.5)
    turn = {"role": "user", "content": [{"type": "image"}, {"type": "video"}, {"type": "audio"},
                                        "Was ist das?"]}
    return write_jsonl(src / "d.jsonl", [
        {"id": f"r{i}", "image": name, "video": "clip.mp4", "audio": "tone.wav",
         "conversation": [turn, {"role": "assistant", "content": "Ein Film."}]}
        for i, name in enumerate(names)])


@pytest.mark.parametrize("flag", ["--media-metadata-by-extension", "--media-metadata-by-header"])
def test_chatml_records_images_video_and_audio(chatml_input, tmp_path, flag):
    out = tmp_path / "out"
    with no_shard_read():
        ok("chatml", "--input", chatml_input, "--output-dir", out, "--val-fraction", "0",
           "--shard-size", "2", "--video-layout", "mp4", "--quiet", flag)
    assert records(out) == ["train-shard-000000.tar.sqlite", "train-shard-000001.tar.sqlite"]
    ours = media_rows(out)
    assert ours == energon_rows(out, tmp_path / "energon", flag)
    parts = sorted({key.split(".", 1)[1]: kind for key, kind, _ in ours["media_metadata"]}
                   .items())
    assert parts == [("audio.wav", "av"), ("image.jpg", "image"), ("video.mp4", "av")]
    assert len(ours["media_metadata"]) == 9


def test_encode_records_no_media_part_as_energon_finds_none(tiny_flux, tmp_path):
    """No encode layout writes a media part: the flag records empty rows per shard, and finalize
    writes an empty media_metadata table and the filter row, as Energon does on the shards."""
    src = make_folder(tmp_path / "in", 3, photos=1)
    out = tmp_path / "out"
    with no_shard_read():
        ok(*encode_args(tiny_flux, src, out, "--shard-size", "2", "--batch-size", "2",
                        "--media-metadata-by-header"))
    assert records(out) == ["000000.tar.sqlite", "000001.tar.sqlite"]
    ours = media_rows(out)
    assert ours == {"media_metadata": [], "media_filters": [(1, "HEADER", "")]}
    assert ours == energon_rows(out, tmp_path / "energon", "--media-metadata-by-header")
