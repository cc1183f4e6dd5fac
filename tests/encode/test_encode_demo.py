"""`shardcook demo` runs end to end here (no GPU, no network) and leaves valid datasets; it
replaces only what an earlier demo wrote, never a user's files."""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.helpers.encode import encode_args, run_in_process
from tests.helpers.files import tree_state
from tests.helpers.raw import make_folder, run_cli


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
    # the video part: generated clips through tiny Wan encoders, loaded through Energon
    assert validate(root / "wan", deep=True).ok
    assert json.loads((root / "wan" / ".shardcook" / "manifest.json").read_text())[
        "num_samples"] == 3
    assert re.search(r"energon: 00000\d: latents \[16, 3, 8, 12\], text \[226, \d+\], caption "
                     r"\"a (red|green|blue) square moving right\"", r.output)
    # the AutoModel part: a cache file per image, as NeMo AutoModel's dataset reads it
    metadata = json.loads((root / "automodel" / "metadata.json").read_text())
    assert metadata["total_items"] == 24 and metadata["model_type"] == "flux"
    assert len(list((root / "automodel").glob("*x*/*.pt"))) == 24
    assert re.search(r"automodel: \S+: 24 cache files in \d bucket", r.output)
    # its own earlier output: replaced
    r = run_in_process(["demo", "--output-dir", str(root)])
    assert "finalized and validated" in r.output
    # a file it did not write, or one changed since: the folder is refused as it is
    (root / "raw" / "notes.txt").write_text("mine")
    before = tree_state(root)
    r = run_in_process(["demo", "--output-dir", str(root)], expect=2)
    assert "holds raw/notes.txt, which the demo did not write there" in r.output
    (root / "raw" / "notes.txt").unlink()
    (root / "images" / "shape_000.txt").write_text("my caption\n")
    r = run_in_process(["demo", "--output-dir", str(root)], expect=2)
    assert "holds images/shape_000.txt, which the demo did not write there" in r.output
    del before["raw/notes.txt"]
    before["images/shape_000.txt"] = tree_state(root)["images/shape_000.txt"]
    assert tree_state(root) == before


@pytest.mark.parametrize("user_folder", ["raw", "encoded", "chatml", "."])
def test_demo_refuses_a_folder_holding_a_users_dataset(tmp_path, user_folder):
    src = make_folder(tmp_path / "in", 6, photos=0)
    root = tmp_path / "demoX"
    run_cli("raw", "--input-dir", str(src), "--output-dir", str(root / user_folder), "--quiet")
    before = tree_state(root)
    r = run_cli("demo", "--output-dir", str(root), check=False)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "the demo did not write" in r.stderr and "nothing was changed" in r.stderr
    assert tree_state(root) == before


def test_preview_contact_sheets(tmp_path, tiny_flux):
    """raw: the images themselves; encoded: false colour of channels 0-2, or VAE-decoded."""
    import numpy as np
    import torch
    from diffusers import AutoencoderKL
    from PIL import Image
    from shardcook.dataset.view import DatasetView
    from shardcook.demo import make_images
    from shardcook.energon.cookers import load_tensor
    from shardcook.preview import TILE, _first_samples

    images = tmp_path / "images"
    make_images(images, 6)
    for kind in ("raw", "encode"):
        args = [a for a in encode_args(tiny_flux, images, tmp_path / kind)
                if kind == "encode" or a not in ("--precision", "fp32", "--t5-max-length", "32",
                                                 "--model-path", str(tiny_flux))]
        run_in_process([kind, *args[1:]])
    sheets = {}
    for name, src, extra in (("raw", "raw", []), ("fc", "encode", []),
                             ("vae", "encode", ["--model-path", str(tiny_flux)])):
        out = tmp_path / f"{name}.png"
        r = run_in_process(["preview", str(tmp_path / src), "--out", str(out), "--count", "4",
                            *extra])
        assert f"wrote {out}" in r.output
        sheets[name] = np.asarray(Image.open(out).convert("RGB"))
        assert sheets[name].shape[1] == 2 * (TILE + 8) + 8  # 4 samples: 2 columns, 2 rows
    # raw tile 0 is the dataset's first image, enlarged to the tile (64 px -> 192 px, nearest)
    first = _first_samples(DatasetView(tmp_path / "raw", "raw"), 1)[0][1]
    img = np.asarray(Image.open(__import__("io").BytesIO(first["jpg"])).convert("RGB"))
    assert np.array_equal(sheets["raw"][8:8 + TILE:3, 8:8 + TILE:3], img)
    # false colour: channel 0 of the first latent, min..max stretched, 8x8 blocks enlarged 3x
    first_encoded = _first_samples(DatasetView(tmp_path / "encode", "encode"), 1)[0][1]
    lat = load_tensor(first_encoded["latents.pth"], key="k", part="latents.pth")
    c0 = lat[0].numpy()
    want = np.round((c0 - c0.min()) / (c0.max() - c0.min()) * 255)
    got = sheets["fc"][8:8 + TILE:24, 8:8 + TILE:24, 0].astype(float)
    assert np.abs(got - want).max() <= 1
    # VAE-decoded: what the tiny VAE decodes from the unscaled latent
    vae = AutoencoderKL.from_pretrained(tiny_flux / "vae").eval()
    with torch.no_grad():
        x = vae.decode(lat[None].float() / 0.5 + 0.25).sample[0]
    dec = ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).numpy()
    tile = sheets["vae"][8:8 + TILE:3, 8:8 + TILE:3]
    assert np.abs(tile.astype(int) - dec.astype(int)).max() <= 1
    assert not np.array_equal(sheets["vae"], sheets["fc"])


def test_demo_refuses_a_fifo_in_its_folder_without_reading_it(tmp_path):
    root = tmp_path / "demo"
    root.mkdir()
    os.mkfifo(root / "pipe")
    (root / ".shardcook-demo.json").write_text(json.dumps({"files": {"pipe": "0" * 64}}))
    # a child with a timeout: reading the FIFO would block forever
    r = run_cli("demo", "--output-dir", str(root), check=False)
    assert r.returncode == 2
    assert "holds pipe, which the demo did not write there" in r.stderr
