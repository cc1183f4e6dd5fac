"""JSONL datasets (`NAME.jsonl` and its index `NAME.jsonl.idx`): `finalize` writes the index
`energon prepare` writes, byte for byte (against Energon's own index function, and its command
line); `validate`, `info` and `preview` read it, a bad file or a stale index is one sentence;
`blend` names it with a folder of images as its auxiliary source, and Energon's loader reads the
blend; a `.jsonl` in a bucket is indexed where it lies."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from megatron.energon.epathlib import EPath
from megatron.energon.flavors.jsonl.jsonl_prepare import JsonlPreparator
from PIL import Image
from shardcook.dataset.jsonl.offsets import record_offsets
from shardcook.errors import DatasetError

from tests.helpers.dataset import cli, one_error_line

#: Files Energon indexes, each a case of its rules.
INDEXED = {
    "blank lines before, between and after": b'\n\n{"a": 1}\n\n\n{"b": 2}\n\n',
    "CRLF": b'{"a": 1}\r\n{"b": 2}\r\n',
    "no final newline": b'{"a": 1}\n{"b": 2}',
    "whitespace lines, indented objects": b' \t\n  {"a": 1}  \n\r\n\t{"b": [1]}\r\n \r\n',
    "one record": b"{}",
    "braces in strings": b'{"a": "}"}\n{"b": "{"}\n',
}
#: Files Energon refuses (an AssertionError inside `energon prepare`).
REFUSED = {
    "empty": b"",
    "blank lines only": b"\n \n\r\n",
    "an array": b'{"a": 1}\n[1, 2]\n',
    "a bare value": b'{"a": 1}\nnull\n',
}


def energon(*args: object) -> str:
    """`energon ARGS`, Energon's own command line, run in this process (a new interpreter
    would spend seconds importing torch again); its output, once it succeeded."""
    from click.testing import CliRunner
    from megatron.energon.cli.main import main

    result = CliRunner().invoke(main, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    return result.output


def energon_index(folder: Path, data: bytes) -> bytes | None:
    """The index Energon's own function (what `energon prepare NAME.jsonl` runs) writes for
    `data`; None when it refuses the file."""
    path = folder / "energon.jsonl"
    path.write_bytes(data)
    try:
        JsonlPreparator.prepare_dataset(EPath(path))
    except AssertionError:
        return None
    return path.with_suffix(".jsonl.idx").read_bytes()


@pytest.mark.parametrize("data", INDEXED.values(), ids=INDEXED.keys())
def test_finalize_writes_energons_index(tmp_path, data):
    path = tmp_path / "data.jsonl"
    path.write_bytes(data)
    r = cli("finalize", path)
    assert r.code == 0, r.stderr
    assert path.with_suffix(".jsonl.idx").read_bytes() == energon_index(tmp_path, data)


@pytest.mark.parametrize("data", REFUSED.values(), ids=REFUSED.keys())
def test_finalize_refuses_what_energon_refuses_in_one_sentence(tmp_path, data):
    path = tmp_path / "data.jsonl"
    path.write_bytes(data)
    assert energon_index(tmp_path, data) is None
    r = cli("finalize", path)
    assert r.code == 2
    assert "JSON" in one_error_line(r)
    assert not path.with_suffix(".jsonl.idx").exists()


_LINES = st.sampled_from([b'{"a": 1}', b"{}", b' {"x": "}"} ', b"\t{}\x0c", b"", b"  ", b"\r",
                          b"\x0b", b"[1]", b'{"c": 2}\r', b"{", b"}", b"{ }"])


@settings(max_examples=80, deadline=None)
@given(lines=st.lists(st.tuples(_LINES, st.sampled_from([b"\n", b"\r\n"])), max_size=8),
       cut=st.booleans(), chunk=st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_offsets_are_energons_at_any_chunk_size(tmp_path_factory, lines, cut, chunk):
    data = b"".join(line + end for line, end in lines)
    data = data.rstrip(b"\n") if cut else data
    expected = energon_index(tmp_path_factory.mktemp("energon"), data)
    try:
        ours: bytes | None = record_offsets(io.BytesIO(data), "x.jsonl", chunk).tobytes()
    except DatasetError:
        ours = None
    assert ours == expected


@pytest.fixture(scope="module")
def captioned(tmp_path_factory):
    """DIR/data.jsonl naming DIR/images/*.png, finalized (the issue's command line, which must
    exit 0), and a copy `energon prepare` indexed."""
    root = tmp_path_factory.mktemp("captioned")
    (root / "images").mkdir()
    lines = [b""]  # a leading blank line, record 0's
    for i in range(6):
        Image.new("RGB", (8 + i, 4 + i), (40 * i, 0, 0)).save(root / "images" / f"{i}.png")
        end = b"\r\n" if i % 2 else b"\n"
        lines.append(json.dumps({"image": f"{i}.png", "caption": f"red {i}"}).encode() + end)
    data = b"\n".join(lines)
    (root / "data.jsonl").write_bytes(data)
    theirs = tmp_path_factory.mktemp("energon") / "data.jsonl"
    theirs.write_bytes(data)
    assert "Found 6 samples" in energon("prepare", "--non-interactive", theirs)
    for command in ("finalize", "validate", "info"):
        r = cli(command, root / "data.jsonl")
        assert r.code == 0, (command, r.stdout, r.stderr)
    return root, theirs


def test_issue_command_line_matches_energon_prepare(captioned):
    root, theirs = captioned
    assert ((root / "data.jsonl.idx").read_bytes()
            == theirs.with_suffix(".jsonl.idx").read_bytes())
    info = cli("info", root / "data.jsonl", "--json")
    summary = json.loads(info.stdout)
    assert summary["samples"] == 6
    assert summary["parts"] == {"json": "41 bytes, keys image, caption"}  # 2 newlines


def test_preview_shows_the_records(captioned, tmp_path):
    out = tmp_path / "sheet.png"
    r = cli("preview", captioned[0] / "data.jsonl", "--out", out, "--count", "2")
    assert r.code == 0, r.stderr
    assert Image.open(out).width > 2 * 192


def test_bad_records_and_stale_index_are_one_sentence(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": x}\n{"c": 3}\n')
    assert cli("finalize", path).code == 0  # Energon indexes it too: it parses no record
    assert cli("validate", path).code == 0  # the first record is JSON
    deep = cli("validate", path, "--deep")
    assert deep.code == 1
    assert "problem: " + str(path) + " sample 1 (the record at byte 9) is not valid JSON" in (
        deep.stdout)
    with path.open("ab") as f:
        f.write(b'{"d": 4}\n')
    stale = cli("validate", path)
    assert stale.code == 1 and "the file changed after it was indexed" in stale.stdout
    assert "the file changed after it was indexed" in one_error_line(cli("info", path))
    path.with_suffix(".jsonl.idx").unlink()
    assert "does not exist; run `shardcook finalize" in one_error_line(cli("info", path))
    refused = cli("finalize", path, "--split", "1,0,0")
    assert "--split does not apply" in one_error_line(refused)
    media = cli("finalize", path, "--media-metadata-by-extension")  # Energon refuses it too
    assert "--media-metadata-by-* does not apply" in one_error_line(media)


def test_a_form_feed_line_is_blank_to_the_index_but_breaks_its_record(tmp_path):
    """Energon's index takes a line of \\f as blank, so it ends the record before it, which
    its loader then fails to parse (JSON's whitespace has no \\f): finalize says so, and
    writes Energon's index only when told not to validate."""
    data = b'{"a": 1}\n\x0c\n{"b": 2}\n'
    path = tmp_path / "data.jsonl"
    path.write_bytes(data)
    assert "sample 0 (the record at byte 0) is not valid JSON" in one_error_line(
        cli("finalize", path))
    assert cli("finalize", path, "--no-validate").code == 0
    assert path.with_suffix(".jsonl.idx").read_bytes() == energon_index(tmp_path, data)


def test_blend_with_an_image_folder_as_aux_reads_through_energons_loader(captioned, tmp_path):
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        FileStore,
        WorkerConfig,
        get_loader,
        get_train_dataset,
        stateless,
    )

    root = tmp_path / "data"
    shutil.copytree(captioned[0], root)
    # the media metadata a cooker reads without decoding: a filesystem dataset, as Energon's
    # own prepare-media makes it (the folder alone would do for reading the files)
    energon("prepare-media", root / "images", "--media-metadata-by-extension", "--no-progress",
            "--num-workers", "1")
    mix = tmp_path / "mix.yaml"
    r = cli("blend", mix, f"{root / 'data.jsonl'}=1", "--aux", f"images={root / 'images'}")
    assert r.code == 0, r.stderr
    entry = yaml.safe_load(mix.read_text())["splits"]["train"]["blend"][0]
    assert entry["aux"] == {"images": "filesystem://data/images"}

    @stateless
    def cook(sample: dict, images: FileStore) -> dict:
        name = sample["json"]["image"]
        size = images.get_media_metadata(name)
        return {"__key__": sample["__key__"], "png": images.get(name, sample),
                "size": (size.width, size.height)}

    class Encoder(DefaultTaskEncoder):
        decoder = None  # the files' bytes as they are
        cookers = [Cooker(cook)]  # noqa: RUF012 (Energon's declaration style)

        def batch(self, samples: list) -> list:
            return samples

    config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    loader = get_loader(get_train_dataset(mix, worker_config=config, batch_size=1,
                                          shuffle_buffer_size=None, max_samples_per_sequence=None,
                                          task_encoder=Encoder()))
    seen = {}
    for _, (sample,) in zip(range(6), loader, strict=False):
        seen[sample["__key__"]] = sample
    assert sorted(seen) == [str(i) for i in range(6)]
    for key, sample in seen.items():
        i = int(key)
        assert sample["png"] == (root / "images" / f"{i}.png").read_bytes()
        assert list(sample["size"]) == [8 + i, 4 + i]


def test_a_jsonl_in_a_bucket_is_indexed_where_it_lies(captioned, s3_store):
    root = captioned[0]
    s3_store.put("ds/data.jsonl", (root / "data.jsonl").read_bytes())
    url = s3_store.url("ds/data.jsonl")
    for command in ("finalize", "validate", "info"):
        r = cli(command, url)
        assert r.code == 0, (command, r.stdout, r.stderr)
    assert s3_store.keys("ds/") == ["ds/data.jsonl", "ds/data.jsonl.idx"]
    assert s3_store.get("ds/data.jsonl.idx") == (root / "data.jsonl.idx").read_bytes()


def test_a_folder_named_like_a_jsonl_is_a_dataset_folder_in_a_bucket_too(s3_store, tmp_path):
    """Energon's test: a `.jsonl` that is a folder is no JSONL file; in a bucket, a name that
    objects lie under is a folder."""
    from tests.helpers.dataset import write_dataset

    folder = write_dataset(tmp_path / "shards.jsonl")
    s3_store.upload_folder(folder, "shards.jsonl")
    for where in (folder, s3_store.url("shards.jsonl")):
        r = cli("validate", where, "--scratch-dir", tmp_path)
        assert r.code == 0 and "JSONL" not in r.stdout, (r.stdout, r.stderr)
        r = cli("info", where, "--scratch-dir", tmp_path)
        assert r.code == 0 and "4 samples" in r.stdout.replace(",", ""), r.stdout


def test_a_jsonl_a_metadataset_names_is_not_read_for_code(tmp_path):
    """A JSONL file names no code: blend's check of what a metadataset names passes it over,
    even when a record looks like a dataset.yaml naming a class off the allowlist."""
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"__module__": "os", "__class__": "system"}\n')
    assert cli("finalize", path).code == 0
    assert cli("blend", tmp_path / "inner.yaml", path).code == 0
    outer = cli("blend", tmp_path / "outer.yaml", tmp_path / "inner.yaml")
    assert outer.code == 0, outer.stderr
