"""The demo's ChatML part: generated clips and images into a validated ChatML dataset."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from tests.helpers.chatml import media_of, read_all, turns_of


def test_chatml_demo_writes_a_valid_video_dataset(tmp_path, monkeypatch):
    from shardcook import validate
    from shardcook.demo import COLOURS, make_images
    from shardcook.demo.chatml import CLIP_SIZE, run_chatml_demo
    from shardcook.layouts.chatml import load_videos

    # a relative output folder, as `shardcook demo --output-dir demo` gives: the JSONL's media
    # paths must still resolve (they are relative to the JSONL's folder)
    monkeypatch.chdir(tmp_path)
    root = Path("demo")
    made = make_images(root / "images")
    lines = run_chatml_demo(root, made, root / "images")
    out = tmp_path / "demo" / "chatml"
    assert "finalized and validated" in lines[0]
    assert validate(out, deep=True).ok
    samples = read_all(out)
    assert len(samples) == len(COLOURS)
    for parts in samples.values():
        media = media_of(parts["conversation.json"])
        (video,) = load_videos(parts["videos"])
        assert len(video) == media["num_frames"] == 4  # 1.5 s at 4 fps: 6, spread to 4
        for frame in video:
            assert np.asarray(Image.open(io.BytesIO(frame))).shape == (*CLIP_SIZE, 3)
        answer = turns_of(parts["conversation.json"])[-1]["content"][0]["text"]
        assert any(c in answer for c in COLOURS)
