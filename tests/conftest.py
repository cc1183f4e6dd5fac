"""Fixtures shared by the tests (helper functions live in tests/helpers/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture
def twin(tmp_path):
    """Returns (ours, theirs): call it after filling `ours` to get an identical copy."""

    def copy(ours: Path) -> Path:
        theirs = tmp_path / "energon"
        shutil.copytree(ours, theirs, ignore=shutil.ignore_patterns(".shardcook"))
        return theirs

    return copy


@pytest.fixture(scope="session")
def tiny_flux(tmp_path_factory) -> Path:
    """Tiny random-weight FLUX-layout encoders (the module shared with `shardcook demo`)."""
    from shardcook.encoders.tiny import build_tiny_flux

    root = tmp_path_factory.getbasetemp() / "tiny_flux"
    if not (root / "DEMO_WEIGHTS.txt").is_file():
        build_tiny_flux(root)
    return root
