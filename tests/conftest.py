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


def _tiny_models(tmp_path_factory, name: str) -> Path:
    """The tiny random-weight encoders `shardcook.encoders.tiny.build_<name>` makes, built once
    per session (per worker) under its base folder."""
    from shardcook.encoders import tiny

    root = tmp_path_factory.getbasetemp() / name
    if not (root / "DEMO_WEIGHTS.txt").is_file():
        getattr(tiny, f"build_{name}")(root)
    return root


@pytest.fixture(scope="session")
def tiny_flux(tmp_path_factory) -> Path:
    """Tiny random-weight FLUX-layout encoders (the module shared with `shardcook demo`)."""
    return _tiny_models(tmp_path_factory, "tiny_flux")


@pytest.fixture(scope="session")
def tiny_wan(tmp_path_factory) -> Path:
    """Tiny random-weight Wan encoders (vae/, text_encoder/, tokenizer/)."""
    return _tiny_models(tmp_path_factory, "tiny_wan")


@pytest.fixture(scope="session")
def tiny_qwen_image(tmp_path_factory) -> Path:
    """A tiny random-weight Qwen-Image pipeline folder (vae/, text_encoder/, tokenizer/,
    scheduler/, model_index.json)."""
    return _tiny_models(tmp_path_factory, "tiny_qwen_image")


@pytest.fixture(scope="session")
def tiny_ltx2(tmp_path_factory) -> Path:
    """A tiny random-weight LTX-2 pipeline folder (vae/, audio_vae/, text_encoder/, tokenizer/,
    connectors/, model_index.json)."""
    return _tiny_models(tmp_path_factory, "tiny_ltx2")


@pytest.fixture(scope="session")
def tiny_hunyuan_video(tmp_path_factory) -> Path:
    """A tiny random-weight HunyuanVideo-1.5 image-to-video pipeline folder (vae/,
    text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/, image_encoder/,
    feature_extractor/, scheduler/, guider/, model_index.json)."""
    return _tiny_models(tmp_path_factory, "tiny_hunyuan_video")


@pytest.fixture(scope="session")
def tiny_flux2(tmp_path_factory) -> Path:
    """Tiny random-weight FLUX.2 models in a pipeline folder (tests/helpers/tiny_flux2.py)."""
    from tests.helpers.tiny_flux2 import build_tiny_flux2

    root = tmp_path_factory.getbasetemp() / "tiny_flux2"
    if not (root / "DEMO_WEIGHTS.txt").is_file():
        build_tiny_flux2(root)
    return root


@pytest.fixture(scope="session")
def s3_server():
    """One S3-compatible server over HTTP on 127.0.0.1 for the whole session."""
    from tests.helpers.s3server import S3Server

    server = S3Server()
    yield server
    server.stop()


@pytest.fixture
def s3_store(s3_server, tmp_path, monkeypatch, request):
    """A fresh bucket and an MSC profile on it (`s3_store.url(path)` is `msc://PROFILE/path`);
    MSC_CONFIG and the AWS variables are set for this test and for the commands it starts. The
    profile's name is new for each test because MSC keeps one client per profile name for the
    life of a process."""
    import re

    from tests.helpers.s3server import make_store

    bucket = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    bucket = f"{bucket}-{abs(hash(request.node.nodeid)) % 10**8}"
    store = make_store(s3_server, tmp_path, bucket, profile=f"t{bucket.rsplit('-', 1)[1]}")
    for key, value in store.env.items():
        monkeypatch.setenv(key, value)
    return store


#: A test slower than this is named as soon as it ends, so a CI log that is cut off by the time
#: limit still says where the time went.
SLOW_SECONDS = 30.0


def pytest_runtest_logreport(report):
    import os

    # under pytest-xdist the controller gets every worker's reports: say it once, there
    if report.duration >= SLOW_SECONDS and "PYTEST_XDIST_WORKER" not in os.environ:
        import sys
        import time

        sys.stderr.write(f"\n[slow {report.when} {report.duration:.0f}s at "
                         f"{time.strftime('%H:%M:%S')}] {report.nodeid}\n")
