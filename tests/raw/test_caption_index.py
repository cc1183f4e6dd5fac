"""Directory sources listed by a caption index: Megatron-Bridge's `meta.json` (JSON array or
JSON Lines) and the Hugging Face imagefolder `metadata.jsonl` / `metadata.csv` give the same
samples as the paired-folder layout; nested folders; a row whose image is missing is skipped
with its reason; an index without `file_name` is one sentence."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.encode import run_in_process, samples
from tests.helpers.raw import make_folder, report

N = 4


def _raw(src: Path, out: Path, expect: int = 0):
    return run_in_process(["raw", "--input-dir", str(src), "--output-dir", str(out),
                           "--image-size", "64", "--quiet", "--workers", "1"], expect=expect)


def _content(out: Path) -> dict[str, tuple[bytes, bytes]]:
    """key -> (image bytes, caption) of every sample written."""
    return {k: (p["jpg"], p["txt"]) for k, p in samples(out).items()}


@pytest.fixture(scope="module")
def paired(tmp_path_factory):
    """The paired-folder inputs, their raw output, and (name in a nested folder, caption) rows."""
    tmp = tmp_path_factory.mktemp("caption_index")
    src = make_folder(tmp / "paired", N, photos=2)
    out = tmp / "paired_out"
    _raw(src, out)
    rows = []
    for img in sorted((src / "images").iterdir()):
        caption = (src / "captions" / f"{img.stem}.txt").read_text(encoding="utf-8")
        rows.append((f"photos/set a/{img.name}", caption))
    return src, out, rows


def _indexed(src: Path, folder: Path, rows: list[tuple[str, str]]) -> Path:
    (folder / "photos" / "set a").mkdir(parents=True)
    for name, _ in rows:
        if (src / "images" / Path(name).name).is_file():
            shutil.copy(src / "images" / Path(name).name, folder / name)
    return folder


def _write(kind: str, folder: Path, rows: list[tuple[str, str]]) -> None:
    if kind == "meta.json array":
        objs = [{"file_name": n, "caption": c} for n, c in rows]
        (folder / "meta.json").write_text(json.dumps(objs, indent=1), encoding="utf-8")
    elif kind == "meta.json lines":
        (folder / "meta.json").write_text(
            "\n".join(json.dumps({"file_name": n, "caption": c}) for n, c in rows) + "\n",
            encoding="utf-8")
    elif kind == "metadata.jsonl":  # Hugging Face's column name for the text
        (folder / "metadata.jsonl").write_text(
            "\n".join(json.dumps({"file_name": n, "text": c, "extra": 1}) for n, c in rows),
            encoding="utf-8")
    else:
        with open(folder / "metadata.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["file_name", "source_id", "caption"])
            w.writerows([n, i, c] for i, (n, c) in enumerate(rows))


@pytest.mark.parametrize("kind", ["meta.json array", "meta.json lines", "metadata.jsonl",
                                  "metadata.csv"])
def test_index_gives_the_same_samples_as_paired_folders(paired, kind, tmp_path):
    src, paired_out, rows = paired
    folder = _indexed(src, tmp_path / "in", rows)
    _write(kind, folder, rows)
    out = tmp_path / "out"
    _raw(folder, out)
    assert _content(out) == _content(paired_out)
    meta = json.loads(samples(out)["0000000001"]["meta.json"])
    assert meta["source"] == str(folder / rows[1][0])


def test_missing_file_and_bad_row_are_skipped_with_reasons(paired, tmp_path):
    src, paired_out, rows = paired
    folder = _indexed(src, tmp_path / "in", rows)
    lines = [json.dumps({"file_name": n, "caption": c}) for n, c in rows]
    lines += [json.dumps({"file_name": "photos/gone.jpg", "caption": "no such file"}),
              json.dumps({"caption": "a row without a file name"}),
              json.dumps({"file_name": "../outside.jpg", "caption": "outside the folder"})]
    (folder / "meta.json").write_text("\n".join(lines), encoding="utf-8")
    out = tmp_path / "out"
    _raw(folder, out)
    assert _content(out) == _content(paired_out)
    skipped = {s["key"]: (s["reason"], s["source"]) for s in report(out)["skipped"]}
    assert skipped == {
        f"{N:010d}": ("missing_image", str(folder / "photos" / "gone.jpg")),
        f"{N + 1:010d}": ("bad_index_row", f"{folder / 'meta.json'}:{N + 2}"),
        f"{N + 2:010d}": ("image_outside_folder", str(tmp_path / "outside.jpg")),
    }


def test_csv_without_file_name_is_one_sentence(paired, tmp_path):
    src, _, rows = paired
    folder = _indexed(src, tmp_path / "in", rows)
    (folder / "metadata.csv").write_text("image,caption\na.jpg,x\n", encoding="utf-8")
    r = _raw(folder, tmp_path / "out", expect=2)
    assert r.output.count("\n") == 1 and "has no file_name column" in r.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", ["[]", "  [ ]\n"])
def test_an_empty_index_says_it_lists_no_files(paired, tmp_path, text):
    src, _, rows = paired
    folder = _indexed(src, tmp_path / "in", rows)
    (folder / "meta.json").write_text(text, encoding="utf-8")
    r = _raw(folder, tmp_path / "out", expect=2)
    assert r.output.count("\n") == 1 and "lists no files" in r.output, r.output
    assert "caption column" not in r.output
    assert not (tmp_path / "out").exists()


def test_file_name_too_long_for_the_file_system_is_a_skipped_sample(paired, tmp_path):
    src, paired_out, rows = paired
    folder = _indexed(src, tmp_path / "in", rows)
    long_name = "x" * 5000 + ".jpg"
    objs = [{"file_name": n, "caption": c} for n, c in rows]
    objs.append({"file_name": long_name, "caption": "a name no file system holds"})
    (folder / "meta.json").write_text(json.dumps(objs), encoding="utf-8")
    out = tmp_path / "out"
    _raw(folder, out)
    assert _content(out) == _content(paired_out)
    (skip,) = report(out)["skipped"]
    assert (skip["key"], skip["reason"]) == (f"{N:010d}", "missing_image")
    assert skip["detail"] == "File name too long" and skip["source"] == str(folder / long_name)


@pytest.mark.parametrize("kind", ["meta.json array", "metadata.jsonl", "metadata.csv"])
def test_a_symlink_leading_out_of_the_folder_is_skipped_like_dotdot(paired, tmp_path, kind):
    src, _, rows = paired
    folder = _indexed(src, tmp_path / "in", rows)
    secret = tmp_path / "private"
    secret.mkdir()
    shutil.copy(src / "images" / Path(rows[0][0]).name, secret / "holiday.jpg")
    (folder / "photos" / "link.jpg").symlink_to(secret / "holiday.jpg")
    (folder / "elsewhere").symlink_to(secret, target_is_directory=True)
    (folder / "photos" / "inside.jpg").symlink_to(folder / rows[1][0])
    extra = [("photos/link.jpg", "a file outside"), ("elsewhere/holiday.jpg", "a folder outside"),
             ("photos/inside.jpg", "a link that stays inside")]
    _write(kind, folder, rows + extra)
    before = (secret / "holiday.jpg").read_bytes()
    out = tmp_path / "out"
    _raw(folder, out)
    skipped = {s["key"]: (s["reason"], s["source"]) for s in report(out)["skipped"]}
    assert skipped == {
        f"{N:010d}": ("image_outside_folder", str(folder / "photos" / "link.jpg")),
        f"{N + 1:010d}": ("image_outside_folder", str(folder / "elsewhere" / "holiday.jpg")),
    }
    written = _content(out)
    assert sorted(written) == [f"{i:010d}" for i in range(N)] + [f"{N + 2:010d}"]
    assert written[f"{N + 2:010d}"][0] == written["0000000001"][0]
    assert (secret / "holiday.jpg").read_bytes() == before
