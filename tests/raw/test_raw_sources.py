"""Sources for `raw`/`encode`: order, pairing, laziness, skips; then each kind end to end
through `shardcook raw`, finalize, validate and Energon's loader."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image
from shardcook import ShardWriter, validate
from shardcook.config import resolve
from shardcook.errors import ConfigError
from shardcook.sources.directory import DirectorySource
from shardcook.sources.huggingface import HuggingFaceSource
from shardcook.sources.webdataset import WebDatasetSource

from tests.helpers.raw import encode, energon_read, generated, make_folder, photo, report


# ---- directory ---------------------------------------------------------------------------
def test_directory_pairs_by_stem_sorted_any_case(tmp_path):
    img, cap = tmp_path / "images", tmp_path / "captions"
    img.mkdir()
    cap.mkdir()
    names = ["b.JPG", "a.png", "c.Jpeg", "d.webp", "e.bmp", "f.gif", "g.TIF", "h.tiff"]
    for n in names:
        (img / n).write_bytes(b"x")
        (cap / (n.split(".")[0] + ".txt")).write_text(f"cap {n}\n")
    (img / ".hidden.jpg").write_bytes(b"x")
    (img / "notes.md").write_text("not an image")
    (img / "i.json").write_text("{}")
    src = DirectorySource(tmp_path)
    items = list(src.items(0, len(src)))
    in_order = sorted(names, key=lambda n: n.split(".")[0])
    assert [it.source.rsplit("/", 1)[-1] for it in items] == in_order
    assert [it.caption for it in items] == [f"cap {n}" for n in in_order]
    assert [it.key for it in items] == [f"{i:010d}" for i in range(8)]
    assert all(it.skip is None and it.image_path for it in items)
    # a window reads only that window, same items
    assert [it.source for it in src.items(3, 6)] == [it.source for it in items[3:6]]
    assert len(DirectorySource(tmp_path, max_samples=5)) == 5
    assert list(DirectorySource(tmp_path, max_samples=5).items(4, 100))[-1].index == 4


def test_directory_flat_layout_duplicates_and_bad_captions(tmp_path):
    for stem, fmt in [("01", "jpg"), ("01", "png"), ("02", "jpg"), ("03", "jpg"), ("04", "jpg")]:
        (tmp_path / f"{stem}.{fmt}").write_bytes(b"x")
    (tmp_path / "01.txt").write_text("one")
    (tmp_path / "01.TXT").write_text("other one")
    (tmp_path / "02.txt").write_bytes(b"\xff\xfe\xfa not utf-8")
    (tmp_path / "04.txt").write_text("")
    src = DirectorySource(tmp_path)
    a, b, c, d = src.items(0, 4)
    assert src.layout == "flat"
    # sorted by name: 01.TXT comes before 01.txt, 01.jpg before 01.png
    assert (a.caption, a.skip) == ("other one", None)
    assert sorted((e.reason, e.source.rsplit("/", 1)[-1], e.used.rsplit("/", 1)[-1])
                  for e in a.extras) == [("duplicate_caption", "01.txt", "01.TXT"),
                                         ("duplicate_image", "01.png", "01.jpg")]
    assert a.source.endswith("01.jpg")  # the first by name is used, deterministically
    assert (b.caption, b.skip) == (None, "caption_not_utf8")
    assert (c.caption, c.skip) == (None, "missing_caption")
    assert (d.caption, d.skip) == ("", None)  # empty caption is kept


def test_directory_bad_setup(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        DirectorySource(tmp_path / "missing")
    (tmp_path / "readme.txt").write_text("no images")
    with pytest.raises(ConfigError, match="No images found"):
        DirectorySource(tmp_path)


# ---- huggingface -------------------------------------------------------------------------
def _hf_rows(n):
    return {
        "image": [{"bytes": encode(generated(i, (40, 56)), "png"), "path": None} for i in range(n)],
        "text": [f"row {i}" for i in range(n)],
        "meta": [{"caption": f"nested {i}", "lang": "en"} for i in range(n)],
        "other": list(range(n)),
    }


def test_huggingface_save_to_disk_detects_columns_and_reads_lazily(tmp_path):
    import datasets

    ds = datasets.Dataset.from_dict(_hf_rows(10)).cast_column("image", datasets.Image())
    ds.save_to_disk(str(tmp_path / "hf"))
    src = HuggingFaceSource(str(tmp_path / "hf"), "train")
    assert (src.image_column, src.caption_column, len(src)) == ("image", "text", 10)
    items = list(src.items(3, 6))
    assert [it.index for it in items] == [3, 4, 5]
    assert [it.caption for it in items] == ["row 3", "row 4", "row 5"]
    arr = np.asarray(Image.open(io.BytesIO(items[0].image)))
    assert arr.shape == (40, 56, 3)
    nested = HuggingFaceSource(str(tmp_path / "hf"), caption_column="meta.caption", max_samples=4)
    assert [it.caption for it in nested.items(0, 100)] == [f"nested {i}" for i in range(4)]
    with pytest.raises(ConfigError, match="--caption-column"):
        HuggingFaceSource(str(tmp_path / "hf"), caption_column="nope")
    with pytest.raises(ConfigError, match="no split"):
        datasets.DatasetDict({"train": ds}).save_to_disk(str(tmp_path / "dd"))
        HuggingFaceSource(str(tmp_path / "dd"), "validation")


def test_huggingface_nested_image_feature(tmp_path):
    import datasets

    pixels = generated(3, (24, 32))
    features = datasets.Features(
        {"data": {"img": datasets.Image(), "cap": datasets.Value("string")}})
    ds = datasets.Dataset.from_dict(
        {"data": [{"img": {"bytes": encode(pixels, "png"), "path": None}, "cap": "deep"}]},
        features=features)
    ds.save_to_disk(str(tmp_path / "hf"))
    src = HuggingFaceSource(str(tmp_path / "hf"), image_column="data.img",
                            caption_column="data.cap")
    (item,) = src.items(0, 1)
    assert item.caption == "deep" and item.skip is None
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(item.image)).convert("RGB")), pixels)


def test_huggingface_parquet_binary_images_missing_values(tmp_path):
    import datasets

    rows = _hf_rows(6)
    rows["image"] = [r["bytes"] for r in rows["image"]]  # a plain binary column
    rows["image"][2] = None
    rows["text"][4] = None
    rows.pop("meta")
    datasets.Dataset.from_dict(rows).to_parquet(str(tmp_path / "d.parquet"))
    src = HuggingFaceSource(str(tmp_path / "d.parquet"))
    items = list(src.items(0, 6))
    assert src.image_column == "image"
    assert [it.skip for it in items] == [None, None, "missing_image", None, "missing_caption", None]
    with pytest.raises(ConfigError, match=r"could not be loaded|does not exist"):
        HuggingFaceSource(str(tmp_path / "nope.parquet"))


# ---- webdataset --------------------------------------------------------------------------
def _wds(tmp_path, n_tars=3, per=4):
    root = tmp_path / "wds"
    i = 0
    for t in range(n_tars):
        with ShardWriter(root, shard_size=per, first_shard=t) as w:
            for _ in range(per):
                parts = {"png": encode(generated(i, (48, 64)), "png")} if i % 2 else {
                    "jpg": encode(generated(i, (48, 64)), "jpg")}
                parts["json"] = json.dumps({"caption": f"wds {i}", "n": i}).encode()
                if i % 3 == 0:
                    parts["txt"] = f"txt {i}".encode()
                if i == 5:
                    parts = {"json": parts["json"]}  # no image
                w.write(f"s{i:05d}", parts)
                i += 1
    return root


def test_webdataset_order_parts_and_windows(tmp_path):
    root = _wds(tmp_path)
    src = WebDatasetSource(str(root / "*.tar"))
    items = list(src.items(0, len(src)))
    assert len(items) == 12 and [it.index for it in items] == list(range(12))
    assert items[7].source.endswith("000001.tar:s00007")
    assert items[0].caption == "txt 0" and items[1].caption == "wds 1"  # txt, then json
    assert items[5].skip == "missing_image"
    assert [it.source for it in src.items(3, 9)] == [it.source for it in items[3:9]]
    by_json = WebDatasetSource(str(root), caption_field="json.caption", max_samples=7)
    assert [it.caption for it in by_json.items(0, 100)] == [
        None if i == 5 else f"wds {i}" for i in range(7)]
    missing = WebDatasetSource(str(root), caption_field="json.nope")
    assert {it.skip for it in missing.items(0, 12)} == {"missing_caption", "missing_image"}
    with pytest.raises(ConfigError, match="No tar files"):
        WebDatasetSource(str(tmp_path / "none-*.tar"))


# ---- end to end: each source kind through raw, finalize, validate, Energon ---------------
def _cfg(**kw):
    kw.setdefault("quiet", True)
    kw.setdefault("image_size", 64)
    kw.setdefault("workers", 2)
    return resolve(kw, set())


def _pillow_crop(arr: np.ndarray, size: int) -> np.ndarray:
    """Reference: short side to `size`, center crop (what the crop mode promises)."""
    h, w = arr.shape[:2]
    s = size / min(h, w)
    nh, nw = max(size, round(h * s)), max(size, round(w * s))
    im = Image.fromarray(arr).resize((nw, nh), Image.LANCZOS)
    top, left = (nh - size) // 2, (nw - size) // 2
    return np.asarray(im.crop((left, top, left + size, top + size)))


def _check_read_back(out, expected_captions: dict[str, str], size: int):
    got = energon_read(out)
    assert {s["key"]: s["txt"] for s in got} == expected_captions
    for s in got:
        assert s["image"].shape == (size, size, 3)
        assert s["meta"]["size"] == [size, size]
    rep = validate(out)
    assert rep.ok, rep.problems
    return got


def test_directory_end_to_end(tmp_path):
    from tests.helpers.raw import run_raw

    # every format the image core decodes, each through the whole pipeline
    make_folder(tmp_path / "in", 10, photos=4, fmts=("jpg", "png", "webp", "bmp", "gif", "tif"))
    out = tmp_path / "out"
    result = run_raw(_cfg(input_dir=str(tmp_path / "in"), output_dir=str(out), shard_size=4,
                          split="0.5,0.5,0"))
    assert result["num_written"] == 10 and result["shards"] == {
        "000000.tar": 4, "000001.tar": 4, "000002.tar": 2}
    got = _check_read_back(out, {f"{i:010d}": f"caption number {i}" for i in range(10)}, 64)
    # the pixels are the photo, resized and center-cropped
    ref = _pillow_crop(photo(0), 64).astype(float)
    assert np.abs(got[0]["image"].astype(float) - ref).mean() < 12
    assert got[0]["meta"]["orig_size"] == list(photo(0).shape[:2])
    assert json.loads((out / ".shardcook" / "manifest.json").read_text())["shards"] == result[
        "shards"]


def test_huggingface_end_to_end(tmp_path):
    import datasets

    from tests.helpers.raw import run_raw

    rows = {"image": [{"bytes": encode(photo(i) if i < 2 else generated(i), "jpg"), "path": None}
                      for i in range(6)],
            "caption": [f"hf {i}" for i in range(6)]}
    datasets.Dataset.from_dict(rows).cast_column("image", datasets.Image()).save_to_disk(
        str(tmp_path / "hf"))
    out = tmp_path / "out"
    run_raw(_cfg(source_type="huggingface", hf_dataset=str(tmp_path / "hf"),
                 output_dir=str(out), shard_size=4, image_format="png"))
    got = _check_read_back(out, {f"{i:010d}": f"hf {i}" for i in range(6)}, 64)
    assert got[0]["meta"]["source"].endswith("[train][0]")
    assert all(p.read_bytes()[:0] == b"" for p in out.glob("*.tar"))
    assert report(out)["shards"] == {"000000.tar": 4, "000001.tar": 2}


def test_webdataset_end_to_end(tmp_path):
    from tests.helpers.raw import run_raw

    root = _wds(tmp_path)
    out = tmp_path / "out"
    run_raw(_cfg(source_type="webdataset", input_path=str(root / "*.tar"), output_dir=str(out),
                 shard_size=5, caption_column="json.caption", image_format="webp"))
    expected = {f"{i:010d}": f"wds {i}" for i in range(12) if i != 5}
    _check_read_back(out, expected, 64)
    rep = report(out)
    assert rep["skipped_by_reason"] == {"missing_image": 1}
    assert rep["skipped"][0]["key"] == "0000000005"
