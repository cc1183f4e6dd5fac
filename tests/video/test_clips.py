"""Frames for video encoders, pinned to Megatron-Bridge's Wan prep script (re-typed in
tests/helpers/bridge_wan.py); the captions of a video folder in each convention; `encode`'s
refusals of video options. No encoder runs here."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from shardcook.config.sections import MAX_CLIP_PIXELS
from shardcook.encoders.wan import prompt_clean
from shardcook.media import MediaError
from shardcook.media.clips import (
    Framing,
    clips_of,
    decode_frames,
    frame_picks,
    packet_count,
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
    (("--layout", "wan", "--num-frames", "4"), "--num-frames is for --video-mode frames"),
    (("--layout", "wan", "--video-mode", "frames", "--frame-stride", "2"),
     "--frame-stride is for --video-mode video"),
    (("--layout", "wan", "--t5-max-length", "600"),
     "Wan's UMT5 text encoder always pads captions to 226 tokens"),
    (("--video-mode", "frames"), "--video-mode is for video inputs (--layout wan)"),
    (("--resize-mode", "bilinear"), "--resize-mode bilinear is for video inputs"),
])
def test_video_options_are_refused_in_one_sentence(tmp_path, args, says):
    (tmp_path / "in").mkdir()
    r = run_in_process(["encode", "--input-dir", str(tmp_path / "in"), "--output-dir",
                        str(tmp_path / "out"), "--print-config", *args], expect=2)
    assert says in r.output and "Traceback" not in r.output
    assert "FLUX T5 tokenizer" not in r.output


def test_a_wan_run_records_its_video_section_and_an_image_run_none(tmp_path):
    (tmp_path / "in").mkdir()
    base = ["encode", "--input-dir", str(tmp_path / "in"), "--output-dir", str(tmp_path / "o"),
            "--print-config"]
    wan = run_in_process([*base, "--layout", "wan", "--center-crop"]).output
    assert "video:" in wan and "center_crop: true" in wan and "resize_mode: bilinear" in wan
    assert "model_path: Wan-AI/" in wan
    assert "video:" not in run_in_process(base).output


def _all_frames_first(data: bytes, framing: Framing, span: tuple[int, int] | None = None
                      ) -> tuple[list[np.ndarray], list[list[int]]]:
    """`clips_of` as it was: every frame of the span decoded and held, then the picks."""
    held = list(decode_frames(data, span))
    picks = frame_picks(len(held), framing)
    used = sorted({i for clip in picks for i in clip})
    order = {i: n for n, i in enumerate(used)}
    return ([resize_frame(rgb(held[i]), framing) for i in used],
            [[order[i] for i in clip] for clip in picks])


def _cut_at_a_non_keyframe(source: Path, out: Path) -> Path:
    """`source` remuxed without its first two packets, as a clip cut by stream copy is: the
    decoder drops the frames before the next keyframe, so packets outnumber frames."""
    import av

    with av.open(str(source)) as given, av.open(str(out), "w") as cut:
        stream = given.streams.video[0]
        copy = cut.add_stream_from_template(stream)
        for n, packet in enumerate(given.demux(stream)):
            if packet.size and n >= 2:
                packet.stream = copy
                cut.mux(packet)
    return out


def _keyframes_every_6(path: Path, n: int) -> Path:
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=8, options={"g": "6", "bf": "0"})
        stream.width, stream.height, stream.pix_fmt = 80, 48, "yuv420p"
        for f in frames(n):
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


FRAMINGS = [Framing(None), Framing(None, stride=2), Framing(None, stride=3, max_frames=3),
            Framing(None, max_frames=100), Framing((24, 40), "bicubic", max_frames=4),
            Framing((32, 32), center_crop=True, stride=2),
            Framing(None, mode="frames", num_frames=4), Framing(None, mode="frames", num_frames=1),
            Framing((24, 40), mode="frames", num_frames=5)]


@pytest.mark.parametrize("clip", ["x264", "ffv1", "cut"])
def test_frames_kept_as_decoded_are_the_picks_of_every_frame_held(tmp_path, clip):
    """Each used frame resized as it is decoded, the others dropped, decoding stopped after the
    last one: the same picks and the same bytes as decoding every frame first, in every mode,
    with spans, and for a clip whose packets outnumber its frames (the count is checked)."""
    if clip == "cut":
        data = _cut_at_a_non_keyframe(_keyframes_every_6(tmp_path / "whole.mkv", 20),
                                      tmp_path / "cut.mkv").read_bytes()
        assert packet_count(data) == 18 and len(list(decode_frames(data))) == 15
    else:
        data = write_clip(tmp_path / "c.mkv", 17, "libx264" if clip == "x264" else "ffv1",
                          seed=3).read_bytes()
    for framing in FRAMINGS:
        for span in (None, (2, 11), (5, 100)):
            got, want = clips_of(data, framing, span), _all_frames_first(data, framing, span)
            assert got[1] == want[1], (framing, span)
            assert len(got[0]) == len(want[0]) and all(
                a.tobytes() == b.tobytes() and a.shape == b.shape
                for a, b in zip(got[0], want[0], strict=True)), (framing, span)


def _long_clip(path: Path, n: int, h: int, w: int) -> Path:
    """`n` frames of a square moving over black, written one at a time."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for t in range(n):
            f = np.zeros((h, w, 3), np.uint8)
            f[40:56, (t * 3) % (w - 16):(t * 3) % (w - 16) + 16] = 255
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


PEAK = """
import sys
from pathlib import Path
from shardcook.media.clips import Framing, clips_of

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024

framing = Framing(None, mode=sys.argv[3], num_frames=5, max_frames=5)
# A short clip first: the decoder's libraries, codec and threads are loaded before the
# measured window (a short clip held whole is 2 MB, so this warm-up hides no leak).
clips_of(Path(sys.argv[1]).read_bytes(), framing)
data = Path(sys.argv[2]).read_bytes()
before = peak()
used, picks = clips_of(data, framing)
assert len(used) == 5, picks
print(peak() - before)
"""


@pytest.mark.parametrize("mode", ["video", "frames"])
def test_five_frames_of_a_3000_frame_video_hold_five_frames(tmp_path, mode):
    """--max-frames 5 (video mode) or --num-frames 5 (frames mode) of a 3,000-frame video:
    the process's peak memory grows by far less than the decoded video (3,000 frames held
    were 225 MB here; a 2-minute 720p clip's ran out of memory)."""
    import subprocess
    import sys

    h, w, n = 192, 256, 3000
    short = _long_clip(tmp_path / "short.mp4", 30, h, w)
    clip = _long_clip(tmp_path / "long.mp4", n, h, w)
    r = subprocess.run([sys.executable, "-c", PEAK, str(short), str(clip), mode],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr
    decoded = n * h * w * 3 // 2  # yuv420p
    assert int(r.stdout) < decoded // 8, (int(r.stdout), decoded)


def test_a_video_over_the_pixel_bound_is_too_large(tmp_path):
    """Kept frames x height x width over `max_pixels` (as the VAE would get them) is a
    `too_large` skip with the advice, found while decoding; the default bound lets Wan's own
    81 x 480 x 832 and 81 x 720 x 1280 clips through."""
    data = write_clip(tmp_path / "c.mkv", 9, "ffv1").read_bytes()  # 48 x 80
    assert clips_of(data, Framing(None, max_pixels=9 * 48 * 80))[1] == [list(range(9))]
    with pytest.raises(MediaError, match=r"9 frames of 48x80 already hold more than the 34,559 "
                                         "pixels.*pass --height and --width or --max-frames"
                       ) as e:
        clips_of(data, Framing(None, max_pixels=9 * 48 * 80 - 1))
    assert e.value.reason == "too_large"
    # resized to 24 x 40 the clip fits; frames mode counts its N frames
    assert len(clips_of(data, Framing((24, 40), max_pixels=9 * 24 * 40))[0]) == 9
    with pytest.raises(MediaError, match=r"a smaller --height and --width to encode it$"):
        clips_of(data, Framing((24, 40), mode="frames", num_frames=4, max_pixels=3 * 24 * 40))
    for wan_clip in (81 * 480 * 832, 81 * 720 * 1280, 121 * 704 * 1280):
        assert wan_clip <= MAX_CLIP_PIXELS
    assert MAX_CLIP_PIXELS < 81 * 1080 * 1920
