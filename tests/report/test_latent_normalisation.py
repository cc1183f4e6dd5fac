"""The report's latent check uses each model family's own normalisation, read from the
manifest: the demo's Wan output (latents normalised per channel by the VAE config's
`latents_mean` / `latents_std`) is not flagged, nor checked with FLUX's factors; the same
latents with the normalisation left out are; and a manifest that records none makes the check
say it is approximate."""

from __future__ import annotations

import io
import json
import re
import tarfile
from pathlib import Path

import pytest
import torch
from shardcook import ShardWriter, finalize
from shardcook.demo.wan import run_wan_demo
from shardcook.htmlreport import make_report

WARNING = re.compile(r'data-warning="latents">warning: ([^<]*)<')


@pytest.fixture(scope="module")
def wan_demo(tiny_wan, tmp_path_factory) -> Path:
    """The demo's Wan dataset (`shardcook demo`'s video part, with the tiny Wan encoders)."""
    root = tmp_path_factory.mktemp("demo")
    run_wan_demo(root, tiny_wan)
    return root / "wan"


def _rewritten(demo: Path, out: Path, latent, manifest=None) -> Path:
    """The demo's samples with `latent(tensor)` stored instead of each latent, in the demo's
    shards (names and counts), finalized, with the demo's manifest or `manifest`."""
    with ShardWriter(out, shard_size=2) as w:
        for shard in sorted(demo.glob("*.tar")):
            with tarfile.open(shard) as tar:
                samples: dict[str, dict[str, bytes]] = {}
                for member in tar.getmembers():
                    key, _, part = member.name.partition(".")
                    data = tar.extractfile(member)
                    assert data is not None
                    samples.setdefault(key, {})[part] = data.read()
            for key, parts in samples.items():
                stored = torch.load(io.BytesIO(parts["pth"]), weights_only=True)
                buf = io.BytesIO()
                torch.save(latent(stored), buf)
                w.write(key, {**parts, "pth": buf.getvalue()})
    finalize(out, encoding="wan")
    recorded = json.loads((demo / ".shardcook" / "manifest.json").read_text())
    (out / ".shardcook" / "manifest.json").write_text(
        json.dumps(recorded if manifest is None else manifest(recorded)))
    return out


def _latent_section(page: str) -> str:
    return page[page.index("<h3>Latent statistics</h3>"):page.index("<h2>Plots</h2>")]


def test_the_demos_wan_output_is_not_flagged(wan_demo):
    page = make_report(wan_demo)
    section = _latent_section(page)
    assert WARNING.findall(page) == []
    assert "<tr class=warn>" not in section  # no channel marked either
    assert "latents_mean" in section and "16 means and standard deviations" in section
    assert "0.3611" not in section and "scaling factor" not in section  # not FLUX's
    assert "data-approximate" not in section


def test_wan_latents_with_the_normalisation_left_out_are_flagged(wan_demo, tmp_path):
    norm = json.loads((wan_demo / ".shardcook" / "manifest.json").read_text())["normalisation"]
    view = (-1, 1, 1, 1)
    mean, std = (torch.tensor(norm[k]).view(view) for k in ("latents_mean", "latents_std"))
    d = _rewritten(wan_demo, tmp_path / "raw-z", lambda s: s * std + mean)  # the VAE's z
    warnings = WARNING.findall(make_report(d))
    assert len(warnings) == 1, warnings
    assert "the division by latents_std is probably left out or applied twice" in warnings[0]


def test_a_wan_manifest_without_its_normalisation_is_checked_approximately(wan_demo, tmp_path):
    def older(manifest: dict) -> dict:
        return {k: v for k, v in manifest.items() if k != "normalisation"}

    d = _rewritten(wan_demo, tmp_path / "older", lambda s: s, older)
    section = _latent_section(make_report(d))
    assert "data-approximate" in section and "the check is approximate" in section
    assert WARNING.findall(section) == []
    d = _rewritten(wan_demo, tmp_path / "older-scaled", lambda s: s * 4, older)
    assert "latents_std is probably left out" in WARNING.findall(make_report(d))[0]
