"""Media metadata against the reference: `shardcook finalize --media-metadata-by-*` and
`shardcook prepare-media` must write the `media_metadata` and `media_filters` rows that the real
`energon prepare` / `energon prepare-media` 7.4.1 write on copies of the same shards and
folders (every column but `created_at_utc`), for images, video and audio; where Energon breaks,
the rows are what it means to write. The shards, the folder and Energon's runs are made once;
Energon's commands run in this process (its workers are forked from it), saving an interpreter
start-up per run."""

from __future__ import annotations

import json
import os
import shutil
from fnmatch import fnmatch
from pathlib import Path

import pytest
from megatron.energon.cache.file_store import WebdatasetFileStore
from megatron.energon.epathlib import EPath
from megatron.energon.media.metadata import AVMetadata, ImageMetadata

from tests.helpers.dataset import cli, one_error_line, write_dataset
from tests.helpers.files import tree_state
from tests.helpers.media import energon, image, media_files, media_rows
from tests.helpers.shards import tarfile_shard

SPLIT = ("--encoding", "generic", "--split", "0.5,0.25,0.25")
ENERGON_SPLIT = ("--split-ratio", "0.5,0.25,0.25")
#: Glob patterns that match no member (the issue's example), and some that match members.
NO_MATCH, SOME = "*.heic,*.avif", "*.png,*.WEBP,*tone*"


def write_shards(root: Path) -> None:
    """4 shards of 2 samples; each sample holds some of the media files as parts
    (`KEY.small.jpg`), one sits in a folder inside its shard. The garbage files go to a sample
    that is not the first of its split (validation decodes those)."""
    files = [item for item in media_files().items() if not item[0].startswith("garbage")]
    garbage = [item for item in media_files().items() if item[0].startswith("garbage")]
    for shard in range(4):
        members = []
        for sample in range(2):
            i = shard * 2 + sample
            key = f"{'sub/' if shard == 3 and sample else ''}{i:06d}"
            chosen = files[i::8] + (garbage if i == 1 else [])
            members += [(f"{key}.{name}", data) for name, data in chosen]
        tarfile_shard(root / f"shard-{shard}.tar", members)


def write_folder(root: Path) -> None:
    """A plain folder of media files: nested and hidden folders, a `.nv-meta` folder deeper
    down (skipped), files of no media type."""
    for i, (name, data) in enumerate(media_files().items()):
        folder = ("", "nested/", ".hidden/", "a/b/")[i % 4]
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / name).write_bytes(data)
    (root / "a" / ".nv-meta").mkdir()
    (root / "a" / ".nv-meta" / "skipped.png").write_bytes(media_files()["photo.png"])


def energon_prepare(root: Path, *args: str) -> None:
    energon("prepare", "--non-interactive", "--sample-type", "CrudeWebdataset", "--no-progress",
            "--num-workers", "1", *ENERGON_SPLIT, *args, root)


def energon_prepare_media(root: Path, *args: str) -> None:
    energon("prepare-media", "--no-progress", "--num-workers", "1", *args, root)


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """The plain shards and folder, and Energon's results on copies of them."""
    base = tmp_path_factory.mktemp("media")
    write_shards(base / "shards")
    write_folder(base / "folder")
    copies = {name: base / name for name in ("by-extension", "by-header", "by-glob",
                                             "media-on-header")}
    for copy in copies.values():
        shutil.copytree(base / "shards", copy)
    shutil.copytree(base / "folder", base / "folder-energon")
    energon_prepare(copies["by-extension"], "--media-metadata-by-extension")
    energon_prepare(copies["by-header"], "--media-metadata-by-header")
    energon_prepare(copies["by-glob"], "--media-metadata-by-glob", NO_MATCH)
    energon_prepare(copies["media-on-header"], "--media-metadata-by-header")
    energon_prepare_media(copies["media-on-header"], "--media-metadata-by-extension")
    energon_prepare_media(base / "folder-energon", "--media-metadata-by-extension")
    return {"shards": base / "shards", "folder": base / "folder",
            "folder-energon": base / "folder-energon", **copies}


@pytest.fixture
def shards(made, tmp_path) -> Path:
    shutil.copytree(made["shards"], tmp_path / "ds")
    return tmp_path / "ds"


@pytest.mark.parametrize(("flags", "reference"), [
    (("--media-metadata-by-extension",), "by-extension"),
    (("--media-metadata-by-header",), "by-header"),
    (("--media-metadata-by-glob", NO_MATCH), "by-glob"),
])
def test_finalize_writes_energons_media_rows(made, shards, flags, reference):
    r = cli("finalize", shards, *SPLIT, *flags)
    assert r.code == 0, r.stdout + r.stderr
    ours, theirs = media_rows(shards), media_rows(made[reference])
    assert ours == theirs
    assert f"media metadata: {len(ours['media_metadata'])} files" in r.stdout
    if reference != "by-glob":
        found = {key.partition(".")[2]: (kind, json) for key, kind, json in ours["media_metadata"]}
        assert {kind for kind, _ in found.values()} == {"image", "av"}
        assert '"format":"PNG"' in found["png-named.jpg"][1]  # the content decides the format
        assert found["rotated.jpg"][1] == '{"width":40,"height":30,"format":"JPEG","mode":"RGB"}'
        assert not {"garbage.jpg", "garbage.mp4", "notes.txt"} & set(found)
        assert ("jpg-named.bin" in found) == (reference == "by-header")
        assert {"clip.mp4", "clip.webm", "tone.wav", "tone.flac", "tone.mp3"} <= set(found)


def test_energon_reads_what_finalize_records(made, shards):
    assert cli("finalize", shards, *SPLIT, "--media-metadata-by-header").code == 0
    store = WebdatasetFileStore(EPath(shards))
    image = store.get_media_metadata("000000.small.jpg")
    assert isinstance(image, ImageMetadata) and (image.width, image.height) == (64, 48)
    clips = [key for key, kind, _ in media_rows(shards)["media_metadata"] if kind == "av"]
    assert isinstance(store.get_media_metadata(clips[0]), AVMetadata)


def test_a_glob_that_matches_records_as_header_would(made, shards):
    """Energon 7.4.1 fails with an AssertionError on any member a glob matches; what it means:
    the members the patterns take (lowercased names), typed by content as HEADER does."""
    r = cli("finalize", shards, *SPLIT, "--media-metadata-by-glob", SOME)
    assert r.code == 0, r.stdout + r.stderr
    header = media_rows(made["by-header"])["media_metadata"]
    wanted = [row for row in header
              if any(fnmatch(row[0].lower(), p) for p in SOME.split(","))]
    assert {row[0].rpartition(".")[2] for row in wanted} >= {"png", "wav", "mp3"}
    assert media_rows(shards) == {"media_metadata": wanted,
                                  "media_filters": [(1, "GLOB", SOME)]}


def test_prepare_media_on_a_dataset_replaces_rows_and_appends_a_filter(made, shards):
    assert cli("finalize", shards, *SPLIT, "--media-metadata-by-header").code == 0
    r = cli("prepare-media", shards, "--media-metadata-by-extension")
    assert r.code == 0, r.stdout + r.stderr
    ours = media_rows(shards)
    assert ours == media_rows(made["media-on-header"])
    assert [f[1] for f in ours["media_filters"]] == ["HEADER", "EXTENSION"]


def test_prepare_media_makes_a_filesystem_dataset(made, tmp_path):
    folder = tmp_path / "folder"
    shutil.copytree(made["folder"], folder)
    r = cli("prepare-media", folder, "--media-metadata-by-extension")
    assert r.code == 0, r.stdout + r.stderr
    ours = media_rows(folder)
    assert ours == media_rows(made["folder-energon"])
    keys = [row[0] for row in ours["media_metadata"]]
    assert any(k.startswith(".hidden/") for k in keys) and not any(".nv-meta" in k for k in keys)
    assert sorted(p.name for p in (folder / ".nv-meta").iterdir()) == ["index.sqlite"]


def test_a_link_back_up_the_folder_is_walked_once(made, tmp_path):
    folder = tmp_path / "folder"
    shutil.copytree(made["folder"], folder)
    (folder / "nested" / "up").symlink_to("..", target_is_directory=True)
    assert cli("prepare-media", folder, "--media-metadata-by-extension").code == 0
    assert media_rows(folder) == media_rows(made["folder-energon"])


def test_prepare_media_by_header_on_a_folder(made, tmp_path):
    """Energon 7.4.1 hangs here; what it means: every file, typed by content, then extension."""
    folder = tmp_path / "folder"
    shutil.copytree(made["folder"], folder)
    assert cli("prepare-media", folder, "--media-metadata-by-header").code == 0
    by_extension = dict((k, (t, j)) for k, t, j in media_rows(made["folder-energon"])[
        "media_metadata"])
    ours = {k: (t, j) for k, t, j in media_rows(folder)["media_metadata"]}
    sniffed = next(key for key in ours if key.endswith("jpg-named.bin"))
    assert ours.pop(sniffed)[0] == "image"  # a JPEG by its content alone
    assert ours == by_extension
    assert media_rows(folder)["media_filters"] == [(1, "HEADER", "")]


def test_finalize_force_keeps_or_rebuilds_the_media_tables(made, shards):
    assert cli("finalize", shards, *SPLIT, "--media-metadata-by-extension").code == 0
    before = media_rows(shards)
    r = cli("finalize", shards, "--force", *SPLIT)
    assert r.code == 0, r.stdout + r.stderr
    assert media_rows(shards) == before  # no media flag: kept
    r = cli("finalize", shards, "--force", *SPLIT, "--media-metadata-by-header")
    assert r.code == 0, r.stdout + r.stderr
    assert media_rows(shards) == media_rows(made["by-header"])  # a media flag: rebuilt


@pytest.mark.parametrize(("args", "says"), [
    (("--media-metadata-by-extension", "--media-metadata-by-header"), "not several"),
    (("--media-metadata-by-glob", ""), "takes comma-separated patterns"),
    (("--media-metadata-by-header", "--no-sqlite"), "leave out --no-sqlite"),
])
def test_bad_media_flags_are_one_sentence(shards, args, says):
    before = tree_state(shards)
    r = cli("finalize", shards, *SPLIT, *args)
    assert r.code == 2
    assert says in one_error_line(r)
    assert tree_state(shards) == before


def test_prepare_media_refusals(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("no media")
    r = cli("prepare-media", tmp_path / "empty", "--media-metadata-by-extension")
    assert r.code == 2 and "holds no file that the media filter takes" in one_error_line(r)
    r = cli("prepare-media", tmp_path / "empty")
    assert r.code == 2 and "pass one of" in one_error_line(r)
    assert not (tmp_path / "empty" / ".nv-meta").exists()


def test_finalize_in_a_bucket_records_the_same_rows(made, s3_store, tmp_path):
    s3_store.upload_folder(made["shards"], "ds")
    r = cli("finalize", s3_store.url("ds"), *SPLIT, "--media-metadata-by-extension",
            "--scratch-dir", tmp_path)
    assert r.code == 0, r.stdout + r.stderr
    fetched = tmp_path / "fetched"
    (fetched / ".nv-meta").mkdir(parents=True)
    (fetched / ".nv-meta" / "index.sqlite").write_bytes(s3_store.get("ds/.nv-meta/index.sqlite"))
    assert media_rows(fetched) == media_rows(made["by-extension"])


# ---- bad inputs: prepare-media refuses in one sentence or skips a file with its reason ----------


def photo_folder(root: Path) -> Path:
    """A plain folder holding one PNG."""
    root.mkdir(parents=True)
    (root / "photo.png").write_bytes(image((50, 70), "PNG"))
    return root


def keys(root: Path) -> list[str]:
    return [row[0] for row in media_rows(root)["media_metadata"]]


def warnings_of(r) -> list[str]:
    return [line for line in r.stdout.splitlines() if line.startswith("warning: skipped ")]


def test_prepare_media_refuses_a_linked_nv_meta_of_a_folder(tmp_path):
    folder, victim = photo_folder(tmp_path / "pm"), tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine")
    (folder / ".nv-meta").symlink_to(victim, target_is_directory=True)
    before = tree_state(tmp_path)
    r = cli("prepare-media", folder, "--media-metadata-by-extension")
    assert r.code == 2 and "is a symbolic link" in one_error_line(r)
    assert tree_state(tmp_path) == before  # no index.sqlite in the folder it points to


def test_prepare_media_refuses_a_linked_nv_meta_of_a_dataset(tmp_path):
    """A finished dataset whose `.nv-meta` links to another dataset's: that one's index.sqlite
    stays as it was."""
    other = write_dataset(tmp_path / "other")
    ds = write_dataset(tmp_path / "ds")
    shutil.rmtree(ds / ".nv-meta")
    (ds / ".nv-meta").symlink_to(other / ".nv-meta", target_is_directory=True)
    before = tree_state(tmp_path)
    r = cli("prepare-media", ds, "--media-metadata-by-extension")
    assert r.code == 2 and "is a symbolic link" in one_error_line(r)
    assert tree_state(tmp_path) == before


@pytest.mark.timeout(60)  # the FIFO used to block the command forever
@pytest.mark.parametrize("flag", ["--media-metadata-by-extension", "--media-metadata-by-header"])
def test_prepare_media_skips_a_fifo_and_a_device_with_the_reason(tmp_path, flag):
    folder = photo_folder(tmp_path / "d")
    os.mkfifo(folder / "f.png")
    (folder / "z.png").symlink_to("/dev/zero")  # used to be read until memory ran out
    r = cli("prepare-media", folder, flag)
    assert r.code == 0 and r.escaped is None, r.stdout + r.stderr
    assert warnings_of(r) == [
        "warning: skipped f.png: a FIFO, not a regular file",
        "warning: skipped z.png: a link to /dev/zero, out of the folder",
    ]
    assert keys(folder) == ["photo.png"]
    assert sorted(p.name for p in (folder / ".nv-meta").iterdir()) == ["index.sqlite"]


@pytest.mark.timeout(60)
def test_prepare_media_refuses_a_fifo_named_as_a_shard(tmp_path):
    """A shard `.info.json` lists is the dataset: one that is not a file is refused, not
    skipped (its rows would be missing), and never waited on."""
    ds = write_dataset(tmp_path / "ds")
    shard = next(iter(json.loads((ds / ".nv-meta" / ".info.json").read_text())["shard_counts"]))
    (ds / shard).unlink()
    os.mkfifo(ds / shard)
    index = (ds / ".nv-meta" / "index.sqlite").read_bytes()
    r = cli("prepare-media", ds, "--media-metadata-by-header")
    assert r.code == 2
    assert f"cannot read the members of shard {ds / shard}" in one_error_line(r)
    assert "not a regular file" in one_error_line(r)
    assert (ds / ".nv-meta" / "index.sqlite").read_bytes() == index
    assert not list((ds / ".nv-meta").glob(".*media-tmp"))


@pytest.mark.parametrize("dataset", [False, True])
def test_prepare_media_names_an_index_that_is_not_sqlite(tmp_path, dataset):
    root = write_dataset(tmp_path / "ds") if dataset else photo_folder(tmp_path / "d")
    (root / ".nv-meta").mkdir(exist_ok=True)
    index = root / ".nv-meta" / "index.sqlite"
    index.write_bytes(b"not an SQLite file, but long enough to hold a header" * 4)
    before = tree_state(root)
    r = cli("prepare-media", root, "--media-metadata-by-extension")
    assert r.code == 2
    assert f"{index} is not a readable SQLite index" in one_error_line(r)
    assert tree_state(root) == before


def test_prepare_media_stays_in_the_folder(tmp_path):
    """`up -> ..` and a file linking out are not followed (with the reason); a link to a file
    inside the folder is recorded."""
    folder = photo_folder(tmp_path / "d")
    (tmp_path / "outside.png").write_bytes(image((8, 8), "PNG"))
    (folder / "up").symlink_to("..", target_is_directory=True)
    (folder / "out.png").symlink_to(tmp_path / "outside.png")
    (folder / "nested").mkdir()
    (folder / "nested" / "same.png").symlink_to("../photo.png")
    r = cli("prepare-media", folder, "--media-metadata-by-extension")
    assert r.code == 0 and r.escaped is None, r.stdout + r.stderr
    assert keys(folder) == ["nested/same.png", "photo.png"]
    assert warnings_of(r) == [
        "warning: skipped up: a link to .., out of the folder, so not followed",
        f"warning: skipped out.png: a link to {tmp_path / 'outside.png'}, out of the folder",
    ]


def test_prepare_media_skips_a_dangling_link(tmp_path):
    folder = photo_folder(tmp_path / "d")
    (folder / "dead.png").symlink_to("missing.png")
    r = cli("prepare-media", folder, "--media-metadata-by-header")
    assert r.code == 0 and r.escaped is None, r.stdout + r.stderr
    assert keys(folder) == ["photo.png"]
    assert warnings_of(r) == ["warning: skipped dead.png: a link to missing.png, which leads "
                              "nowhere (No such file or directory)"]


@pytest.mark.parametrize("glob", [",", "*.jpg,", ",*.jpg", " ", "*.jpg, ,*.png"])
def test_prepare_media_refuses_an_empty_glob_pattern(tmp_path, glob):
    ds = write_dataset(tmp_path / "ds")
    before = tree_state(ds)
    r = cli("prepare-media", ds, "--media-metadata-by-glob", glob)
    assert r.code == 2 and "each one not empty" in one_error_line(r)
    assert tree_state(ds) == before


def test_prepare_media_refuses_a_glob_that_matches_no_member(tmp_path):
    """Energon records the filter and no row; a run that found nothing says so and writes
    nothing, as on a plain folder."""
    ds = write_dataset(tmp_path / "ds")
    before = tree_state(ds)
    r = cli("prepare-media", ds, "--media-metadata-by-glob", "*.heic,*.avif")
    assert r.code == 2
    assert ("the media filter (--media-metadata-by-glob '*.heic,*.avif') takes no member of "
            "the 2 shard(s) of") in one_error_line(r)
    assert tree_state(ds) == before
    folder = photo_folder(tmp_path / "d")
    r = cli("prepare-media", folder, "--media-metadata-by-glob", "*.heic")
    assert r.code == 2 and "holds no file that the media filter takes" in one_error_line(r)
    assert not (folder / ".nv-meta").exists()
