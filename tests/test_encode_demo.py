"""`shardcook demo` runs end to end here (no GPU, no network) and leaves valid datasets."""

from __future__ import annotations

import json

from _encode_helpers import run_in_process


def test_demo_runs_and_leaves_valid_datasets(tmp_path):
    from shardcook import validate
    from shardcook.energon import get_diffusion_loader

    root = tmp_path / "demo"
    r = run_in_process(["demo", "--output-dir", str(root)])
    assert "DEMO WEIGHTS" in r.output and "finalized and validated" in r.output
    assert "encoded batch: latents [4, 4, 8, 8]" in r.output
    assert (root / "tiny-flux-DEMO-WEIGHTS" / "DEMO_WEIGHTS.txt").is_file()
    captions = sorted(p.read_text().strip() for p in (root / "images").glob("*.txt"))
    assert len(captions) == 24 and all(" on a " in c for c in captions)
    for name, encoding in (("raw", "raw"), ("encoded", "preencoded")):
        assert validate(root / name, deep=True).ok
        m = json.loads((root / name / ".shardcook" / "manifest.json").read_text())
        assert m["encoding"] == encoding and m["num_samples"] == 24
    batch = next(iter(get_diffusion_loader(root / "encoded", batch_size=3, num_workers=0,
                                           shuffle_buffer_size=None,
                                           max_samples_per_sequence=None)))
    assert all(c in captions for c in batch.captions)
