"""`shardcook preview` on damaged samples and unwritable targets: a sample that cannot be read is a
grey tile saying why (one log line in all), and a sheet that cannot be written is one sentence,
exit 2, with nothing left behind."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch
from PIL import Image
from shardcook.preview import TILE

from tests.helpers.dataset import cli, one_error_line, pth, raw_parts, write_dataset

GREY = (200, 200, 200)


def _tile_pixel(sheet: Image.Image, n: int, columns: int) -> tuple[int, int, int]:
    """The centre pixel of tile n of a sheet laid out as `preview` does."""
    cell_h = TILE + 4 * 12 + 8
    x = 8 + (n % columns) * (TILE + 8) + TILE // 2
    y = 8 + (n // columns) * cell_h + TILE // 2
    rgb = sheet.convert("RGB").getpixel((x, y))
    assert isinstance(rgb, tuple)
    return rgb[0], rgb[1], rgb[2]


def test_corrupt_png_among_the_first_samples_is_an_unreadable_tile(tmp_path, caplog):
    def parts(i: int) -> dict[str, bytes]:
        p = raw_parts(i)
        if i == 1:  # a PNG signature, then garbage
            del p["jpg"]
            p["png"] = b"\x89PNG\r\n\x1a\n" + b"\x00garbage" * 20
        return p

    ds = write_dataset(tmp_path / "ds", parts, n_shards=1, per_shard=4, validate=False)
    out = tmp_path / "sheet.png"
    r = cli("preview", ds, "--out", out, "--count", "4")
    assert r.code == 0 and r.escaped is None, (r.code, r.stderr, r.escaped)
    sheet = Image.open(out)
    assert _tile_pixel(sheet, 1, 2) == GREY
    assert _tile_pixel(sheet, 0, 2) != GREY and _tile_pixel(sheet, 2, 2) != GREY
    warnings = [rec.getMessage() for rec in caplog.records if rec.name == "shardcook.preview"]
    assert warnings == ["1 of the 4 samples could not be read; their tiles say why."]


def _bridge_parts(i: int) -> dict[str, bytes]:
    embeddings = {"prompt_embeds": torch.zeros(8, 32), "pooled_prompt_embeds": torch.zeros(24)}
    meta = b'{"caption": "cut' if i == 0 else json.dumps({"caption": f"caption {i}"}).encode()
    return {"pth": pth(torch.rand(16, 4, 4, generator=torch.Generator().manual_seed(i))),
            "pickle": pickle.dumps(embeddings), "json": meta}


def test_bridge_flux_sample_with_a_corrupt_json_part_still_shows_its_latent(tmp_path):
    ds = write_dataset(tmp_path / "ds", _bridge_parts, n_shards=1, per_shard=2,
                       encoding="bridge-flux", validate=False)
    out = tmp_path / "sheet.png"
    r = cli("preview", ds, "--out", out, "--count", "2")
    assert r.code == 0 and r.escaped is None, (r.code, r.stderr, r.escaped)
    sheet = np.asarray(Image.open(out).convert("RGB"))
    # the 4x4 latent's false colours, one per latent cell, not a grey unreadable tile
    assert len({tuple(px) for px in sheet[8:8 + TILE, 8:8 + TILE].reshape(-1, 3)}) == 16


@pytest.mark.parametrize("target", ["/proc/version.png", "/proc/no-such-folder-x.png"])
def test_preview_out_that_cannot_be_written_is_one_sentence(tmp_path, target):
    ds = write_dataset(tmp_path / "ds", n_shards=1, per_shard=2)
    r = cli("preview", ds, "--out", target)
    assert r.code == 2, (r.code, r.stderr, r.escaped)
    line = one_error_line(r)
    assert f"--out '{target}' cannot be written" in line or "does not exist" in line, line


def test_preview_leaves_no_temporary_file_when_the_write_fails(tmp_path):
    from shardcook import ConfigError
    from shardcook.preview import preview

    ds = write_dataset(tmp_path / "ds", n_shards=1, per_shard=2)
    folder = tmp_path / "sheets"
    (folder / "taken.png").mkdir(parents=True)  # the rename onto a folder fails
    with pytest.raises(ConfigError, match="cannot be written"):
        preview(ds, folder / "taken.png")
    assert [p.name for p in folder.iterdir()] == ["taken.png"]


def _tiny_vae_parts(i: int) -> dict[str, bytes]:
    """A preencoded sample whose latent fits the tiny test VAE (4 channels)."""
    return {"latents.pth": pth(torch.rand(4, 4, 4, generator=torch.Generator().manual_seed(i))),
            "prompt_embeds.pth": pth(torch.zeros(8, 32)),
            "pooled_prompt_embeds.pth": pth(torch.zeros(24)),
            "caption.txt": f"caption {i}".encode()}


def test_preview_takes_an_hf_token_file_checks_it_first_and_never_prints_it(tmp_path, tiny_flux):
    secret = "hf_previewTESTtoken0123456789abcdef"
    ds = write_dataset(tmp_path / "ds", _tiny_vae_parts, n_shards=1, per_shard=2,
                       encoding="preencoded", validate=False)
    token = tmp_path / "token"
    token.write_text(secret + "\n")
    token.chmod(0o644)
    out = tmp_path / "sheet.png"
    r = cli("preview", ds, "--out", out, "--model-path", tiny_flux, "--hf-token-file", token)
    assert r.code == 2 and "chmod 600" in one_error_line(r) and not out.exists()
    token.chmod(0o600)
    r = cli("preview", ds, "--out", out, "--model-path", tiny_flux, "--hf-token-file", token)
    assert r.code == 0, (r.code, r.stderr, r.escaped)
    assert secret not in r.stdout + r.stderr
    assert _tile_pixel(Image.open(out), 0, 2) != GREY  # decoded by the VAE, not unreadable
