"""Frames for video encoders, pinned to Megatron-Bridge's Wan prep script (re-typed in
tests/helpers/bridge_wan.py); the captions of a video folder in each convention; `encode`'s
refusals of video options. No encoder runs here."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from shardcook.encoders.wan import prompt_clean
from shardcook.media.clips import (
    Framing,
    clips_of,
    decode_frames,
    frame_picks,
    resize_dimensions,
    resize_frame,
)
from shardcook.media.video import rgb

from tests.helpers import bridge_wan
from tests.helpers.encode import run_in_process
from tests.helpers.video import frames, write_clip

SIZES = [(48, 80), (80, 48), (100, 100), (37, 201), (720, 1280), (1080, 1920), (481, 833)]
TARGETS = [(48, 80), (480, 832), (64, 64)]


@pytest.mark.parametrize("crop", [False, True])
@pytest.mark.parametrize("keep", [True, False])
def test_resize_dimensions_are_bridges(keep, crop):
    for h, w in SIZES:
        for target in TARGETS:
            framing = Framing(target, keep_aspect=keep, center_crop=crop)
            assert resize_dimensions(h, w, framing) == bridge_wan.calculate_resize_dimensions(
                h, w, target, keep, crop), (h, w, target)


def test_fit_crop_and_stretch_give_bridges_frame_sizes():
    frame = frames(1, 60, 160)[0]  # wider than 48 x 80
    assert resize_frame(frame, Framing((48, 80))).shape == (30, 80, 3)  # fitted inside
    assert resize_frame(frame, Framing((48, 80), center_crop=True)).shape == (48, 80, 3)
    assert resize_frame(frame, Framing((48, 80), keep_aspect=False)).shape == (48, 80, 3)
    assert resize_frame(frame, Framing(None)) is frame
    # the crop keeps the middle: resized to 48 x 128, columns 24..104
    cropped = resize_frame(frame, Framing((48, 80), "nearest", center_crop=True))
    full = resize_frame(frame, Framing((48, 128), "nearest", keep_aspect=False))
    assert np.array_equal(cropped, full[:, 24:104])


def test_frames_mode_takes_bridges_linspace_picks():
    framing = Framing(None, mode="frames", num_frames=4)
    assert frame_picks(9, framing) == [[0], [2], [5], [8]]  # np.linspace(0, 8, 4, dtype=int)
    assert frame_picks(4, framing) == [[0], [1], [2], [3]]
    with pytest.raises(ValueError, match="fewer than --num-frames 4"):
        frame_picks(3, framing)
    assert frame_picks(7, Framing(None, mode="frames", num_frames=1)) == [[0]]


def test_video_mode_keeps_every_frame_unless_stride_or_max_frames_say():
    assert frame_picks(5, Framing(None)) == [[0, 1, 2, 3, 4]]
    assert frame_picks(9, Framing(None, stride=2)) == [[0, 2, 4, 6, 8]]
    assert frame_picks(9, Framing(None, stride=2, max_frames=3)) == [[0, 2, 4]]
    with pytest.raises(ValueError, match="no frames"):
        frame_picks(0, Framing(None))


def test_a_span_decodes_only_its_frames_and_each_used_frame_once(tmp_path):
    data = write_clip(tmp_path / "c.mkv", 9, "ffv1").read_bytes()
    want = [rgb(f) for f in decode_frames(data)]
    assert len(want) == 9
    used, picks = clips_of(data, Framing(None), span=(2, 5))
    assert picks == [[0, 1, 2, 3]] and all(
        np.array_equal(f, want[2 + i]) for i, f in enumerate(used))
    used, picks = clips_of(data, Framing(None, mode="frames", num_frames=3))
    assert picks == [[0], [1], [2]] and np.array_equal(used[1], want[4])


@pytest.mark.parametrize("codec", ["libx264", "ffv1", "mjpeg", "libvpx-vp9"])
def test_rgb_is_pyavs_own_conversion_in_every_thread_and_size(tmp_path, codec):
    """The kept reformatter gives the pixels `to_ndarray(format="rgb24")` gives, for clips of
    two sizes decoded alternately in two threads (each thread's context re-made on a size
    change)."""
    clips = [write_clip(tmp_path / f"{codec}-{h}.mkv", 5, codec, h=h, w=w).read_bytes()
             for h, w in [(48, 80), (64, 32)]]

    def both(data: bytes) -> list[tuple[np.ndarray, np.ndarray]]:
        return [(rgb(f), f.to_ndarray(format="rgb24")) for f in decode_frames(data)]

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(both, clips * 3))
    assert all(len(r) == 5 for r in results)
    assert all(np.array_equal(a, b) for r in results for a, b in r)
    assert {r[0][0].shape for r in results} == {(48, 80, 3), (64, 32, 3)}


def test_prompt_clean_is_bridges():
    for text in ["  a &amp;amp; b  ", "tab\tand\nnewline", "plain", "&lt;b&gt;  x"]:
        assert prompt_clean(text) == bridge_wan.prompt_clean(text)
    assert prompt_clean("a &amp;amp;  b\n") == "a & b"


def test_each_caption_convention_names_its_clip(tmp_path):
    from shardcook.sources.caption_index import VIDEO_INDEX_FILES, CaptionIndexSource, find_index
    from shardcook.sources.directory import VIDEOS, DirectorySource

    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("a.mp4", "b.webm", "c.mov", "d.mkv"):
        (flat / name).write_bytes(b"v")
    (flat / "a.json").write_text(json.dumps({"caption": " from json "}), encoding="utf-8")
    (flat / "b.txt").write_text("from txt\n", encoding="utf-8")
    (flat / "c.json").write_text(json.dumps({"text": "no caption key"}), encoding="utf-8")
    items = list(DirectorySource(flat, media=VIDEOS).items(0, 4))
    assert [(i.caption, i.skip) for i in items] == [
        ("from json", None), ("from txt", None), (None, "missing_caption"),
        (None, "missing_caption")]
    indexed = tmp_path / "indexed"
    indexed.mkdir()
    (indexed / "x.mp4").write_bytes(b"v")
    rows = [{"file_name": "x.mp4", "caption": "whole"},
            {"file_name": "x.mp4", "caption": "part", "start_frame": 2, "end_frame": 5},
            {"file_name": "x.mp4", "caption": "bad", "start_frame": 5, "end_frame": 2}]
    (indexed / "meta.jsonl").write_text("\n".join(map(json.dumps, rows)), encoding="utf-8")
    source = CaptionIndexSource(indexed, find_index(DirectorySource(indexed, media=VIDEOS).folder,
                                                    VIDEO_INDEX_FILES))
    got = list(source.items(0, 3))
    assert [(i.caption, i.span, i.skip) for i in got] == [
        ("whole", None, None), ("part", (2, 5), None), (None, None, "bad_index_row")]


@pytest.mark.parametrize(("args", "says"), [
    (("--layout", "wan", "--height", "48"), "--height and --width go together"),
    (("--layout", "wan", "--height", "44", "--width", "80"), "--height must be a multiple of 8"),
    (("--layout", "wan", "--resize-mode", "crop"), "--resize-mode must be one of bilinear"),
    (("--layout", "wan", "--video-mode", "frames", "--max-frames", "3"),
     "--max-frames is for --video-mode video"),
    (("--video-mode", "frames"), "--video-mode is for video inputs (--layout wan)"),
    (("--resize-mode", "bilinear"), "--resize-mode bilinear is for video inputs"),
])
def test_video_options_are_refused_in_one_sentence(tmp_path, args, says):
    (tmp_path / "in").mkdir()
    r = run_in_process(["encode", "--input-dir", str(tmp_path / "in"), "--output-dir",
                        str(tmp_path / "out"), "--print-config", *args], expect=2)
    assert says in r.output and "Traceback" not in r.output


def test_a_wan_run_records_its_video_section_and_an_image_run_none(tmp_path):
    (tmp_path / "in").mkdir()
    base = ["encode", "--input-dir", str(tmp_path / "in"), "--output-dir", str(tmp_path / "o"),
            "--print-config"]
    wan = run_in_process([*base, "--layout", "wan", "--center-crop"]).output
    assert "video:" in wan and "center_crop: true" in wan and "resize_mode: bilinear" in wan
    assert "model_path: Wan-AI/" in wan
    assert "video:" not in run_in_process(base).output
