"""Bad inputs are skipped with their reason (report.json, summary) and the run goes on; bad
setup ends the run before any work with one sentence."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import get_args

import numpy as np
import pytest
import yaml
from shardcook.errors import SkipReason

from tests.helpers.raw import encode, energon_read, generated, photo, report, run_cli


def test_format_md_lists_every_skip_reason_and_no_other():
    # report.json is on-disk output: its vocabulary is the documented one
    text = (Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md").read_text(encoding="utf-8")
    table = text.split("| reason | the input was skipped because |", 1)[1].split("\n- ", 1)[0]
    documented = re.findall(r"^  \| `(\w+)` \|", table, flags=re.MULTILINE)
    assert documented == list(get_args(SkipReason))


def _bad_folder(root):
    img, cap = root / "images", root / "captions"
    img.mkdir(parents=True)
    cap.mkdir()

    def add(stem, data, caption=b"a caption", fmt="jpg"):
        (img / f"{stem}.{fmt}").write_bytes(data)
        if caption is not None:
            (cap / f"{stem}.txt").write_bytes(caption)

    add("00_good", encode(photo(1), "jpg"), b"a cat\n")
    add("01_not_an_image", b"this is not a JPEG at all")
    add("02_truncated_header", encode(generated(2), "png")[:40], fmt="png")
    add("03_huge", encode(np.zeros((700, 700, 3), np.uint8) + 90, "png"), fmt="png")
    add("04_tiny", encode(generated(4, (20, 40)), "png"), fmt="png")
    add("05_no_caption", encode(generated(5), "jpg"), caption=None)
    add("06_latin1_caption", encode(generated(6), "jpg"), caption="café crème".encode("latin-1"))
    add("07_two_captions", encode(generated(7), "jpg"), b"from captions/")
    (img / "07_two_captions.txt").write_bytes(b"next to the image")
    add("08_two_images", encode(generated(8), "jpg"), b"two images")
    (img / "08_two_images.webp").write_bytes(encode(generated(80), "webp"))
    add("09_empty_caption", encode(generated(9), "jpg"), b"")
    add("10_good", encode(generated(10), "webp"), "ünïcödé ✓".encode(), fmt="webp")
    return root


def test_bad_inputs_are_skipped_with_reasons(tmp_path):
    src = _bad_folder(tmp_path / "in")
    conf = tmp_path / "c.yaml"
    conf.write_text(yaml.safe_dump({"image": {"max_pixels": 400_000, "min_size": 32}}))
    out = tmp_path / "out"
    r = run_cli("raw", "--config", str(conf), "--input-dir", str(src), "--output-dir", str(out),
                "--image-size", "32", "--shard-size", "3")
    rep = report(out)
    by_key = {s["key"]: s for s in rep["skipped"] if s["key"]}
    assert {k: s["reason"] for k, s in by_key.items()} == {
        "0000000001": "decode_error",
        "0000000002": "decode_error",
        "0000000003": "too_large",
        "0000000004": "too_small",
        "0000000005": "missing_caption",
        "0000000006": "caption_not_utf8",
    }
    assert by_key["0000000001"]["source"].endswith("01_not_an_image.jpg")
    assert by_key["0000000001"]["detail"]  # the image core's message is kept
    ignored = sorted((s["reason"], os.path.basename(s["source"]), os.path.basename(s["used"]))
                     for s in rep["skipped"] if s["key"] is None)
    assert ignored == [("duplicate_caption", "07_two_captions.txt", "07_two_captions.txt"),
                       ("duplicate_image", "08_two_images.webp", "08_two_images.jpg")]
    dup_cap = next(s for s in rep["skipped"] if s["reason"] == "duplicate_caption")
    assert "/images/" in dup_cap["source"] and "/captions/" in dup_cap["used"]
    assert (rep["num_inputs"], rep["num_written"], rep["num_skipped"]) == (11, 5, 6)
    assert rep["empty_captions"] == 1
    assert rep["skipped_by_reason"] == {"caption_not_utf8": 1, "decode_error": 2,
                                        "duplicate_caption": 1, "duplicate_image": 1,
                                        "missing_caption": 1, "too_large": 1, "too_small": 1}
    assert {s["reason"] for s in rep["skipped"]} <= set(get_args(SkipReason))
    # the summary counts them too
    for line in ("inputs:  11", "written: 5 samples", "skipped: 6 inputs, 2 extra files ignored",
                 "decode_error: 2", "too_large: 1", "empty captions (kept): 1"):
        assert line in r.stderr, r.stderr
    # the run went on: everything usable is in the dataset, with the caption used
    got = {s["key"]: s["txt"] for s in energon_read(out)}
    assert got == {"0000000000": "a cat", "0000000007": "from captions/",
                   "0000000008": "two images", "0000000009": "", "0000000010": "ünïcödé ✓"}
    # unit 0 lost two of three inputs; unit 1 lost all three, so it has no shard
    assert rep["shards"] == {"000000.tar": 1, "000002.tar": 2, "000003.tar": 2}
    assert sorted(p.name for p in out.glob("*.tar")) == ["000000.tar", "000002.tar", "000003.tar"]
    manifest = json.loads((out / ".shardcook" / "manifest.json").read_text())
    assert (manifest["num_inputs"], manifest["num_samples"], manifest["num_skipped"]) == (11, 5, 6)


def _expect_setup_error(args, needle, tmp_path):
    r = run_cli("raw", *args, check=False)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    return r


def test_missing_input_folder(tmp_path):
    out = tmp_path / "out"
    _expect_setup_error(["--input-dir", str(tmp_path / "nope"), "--output-dir", str(out)],
                        "does not exist", tmp_path)
    assert not out.exists()


def test_no_images_found(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("caption without image")
    out = tmp_path / "out"
    _expect_setup_error(["--input-dir", str(tmp_path / "in"), "--output-dir", str(out)],
                        "No images found", tmp_path)
    assert not out.exists()


@pytest.fixture
def small_input(tmp_path):
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"{i}.png").write_bytes(encode(generated(i), "png"))
        (tmp_path / "in" / f"{i}.txt").write_text(f"c{i}")
    return tmp_path / "in"


def test_output_folder_holding_something_else(tmp_path, small_input):
    out = tmp_path / "out"
    out.mkdir()
    (out / "thesis.pdf").write_bytes(b"%PDF")
    for extra in ([], ["--overwrite"]):
        _expect_setup_error(["--input-dir", str(small_input), "--output-dir", str(out), *extra],
                            "not a shardcook dataset", tmp_path)
    assert sorted(os.listdir(out)) == ["thesis.pdf"]


def test_unwritable_output(tmp_path, small_input):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    _expect_setup_error(["--input-dir", str(small_input), "--output-dir", str(blocker / "out")],
                        "not writable", tmp_path)
    _expect_setup_error(["--input-dir", str(small_input), "--output-dir", str(blocker)],
                        "is a file", tmp_path)
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        _expect_setup_error(["--input-dir", str(small_input), "--output-dir", str(ro / "out")],
                            "not writable", tmp_path)


def test_huggingface_bad_setup(tmp_path):
    import datasets

    datasets.Dataset.from_dict({"pixels": [b"x"], "n": [1]}).save_to_disk(str(tmp_path / "hf"))
    out = tmp_path / "out"
    base = ["--source-type", "huggingface", "--hf-dataset", str(tmp_path / "hf"),
            "--output-dir", str(out)]
    from shardcook.cli import app
    from typer.testing import CliRunner

    # in-process (importing `datasets` once): the same CLI, same exit code and message
    for extra, needle in [([], "No image column"),
                          (["--image-column", "pixels"], "No caption column"),
                          (["--image-column", "pixels", "--caption-column", "meta.text"],
                           "--caption-column")]:
        r = CliRunner().invoke(app, ["raw", *base, *extra])
        assert r.exit_code == 2, r.output
        assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()


def test_variable_mode_keeps_aspect_and_skips_images_too_small_for_it(tmp_path):
    from shardcook.config import resolve

    from tests.helpers.raw import run_raw

    src = tmp_path / "in"
    src.mkdir()
    (src / "a.png").write_bytes(encode(generated(1, (300, 200)), "png"))
    (src / "b.png").write_bytes(encode(generated(2, (8, 600)), "png"))  # < 16 px high
    for stem in "ab":
        (src / f"{stem}.txt").write_text(stem)
    out = tmp_path / "out"
    run_raw(resolve({"input_dir": str(src), "output_dir": str(out), "resize_mode": "variable",
                     "max_size": 128, "quiet": True}, set()))
    rep = report(out)
    assert [(s["key"], s["reason"]) for s in rep["skipped"]] == [("0000000001", "too_small")]
    (got,) = energon_read(out)
    h, w = got["image"].shape[:2]
    assert max(h, w) <= 128 and h > w and h % 16 == 0 and w % 16 == 0
    assert got["meta"]["size"] == [h, w] and got["meta"]["orig_size"] == [300, 200]
