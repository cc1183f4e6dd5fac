"""The native core tells what it is: `shardcook --version` shows the build, the JPEG decoder has
its SIMD code on this (CI) build, the resizer uses an extension this CPU has, and the extension
module is the abi3 one that serves every CPython >= 3.10."""

from __future__ import annotations

import platform
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from shardcook import ShardWriter, __version__, _native, read_shard
from shardcook.buildinfo import build_info


def test_version_prints_the_build():
    out = subprocess.run(
        [sys.executable, "-m", "shardcook", "--version"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.splitlines()
    info = build_info()
    assert out[0] == f"shardcook {__version__}"
    assert info["rustc"] in out[1] and f"PyO3 {info['pyo3']}" in out[1]
    assert out[2].startswith("JPEG decoder: libjpeg-turbo (mozjpeg-sys ")
    assert out[3] == f"WebP decoder: {info['webp']}" and out[4] == f"PNG decoder: {info['png']}"
    assert out[5].endswith(f"CPU extensions {info['resize']['cpu_extensions']}")


def test_the_ci_build_decodes_jpeg_with_simd():
    jpeg = build_info()["jpeg"]
    assert jpeg["simd_compiled"], (
        "this build has no JPEG SIMD: build with nasm installed (SHARDCOOK_ALLOW_SLOW_JPEG=1 "
        "builds without it on purpose)"
    )
    assert jpeg["simd_active"], "libjpeg-turbo's SIMD is compiled in but this CPU does not run it"
    if platform.machine() in ("x86_64", "AMD64"):
        assert jpeg["nasm"].startswith("NASM version ")
    line = subprocess.run(
        [sys.executable, "-m", "shardcook", "--version"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout.splitlines()[2]
    assert ", SIMD on" in line


@pytest.mark.skipif(not Path("/proc/cpuinfo").exists(), reason="reads Linux's /proc/cpuinfo")
def test_the_resizer_uses_an_extension_this_cpu_has():
    picked = build_info()["resize"]["cpu_extensions"]
    flags = set(
        " ".join(line for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith(("flags", "Features"))).split()
    )
    aliases = {"neon": "asimd"}  # Linux calls arm64's NEON "asimd"
    assert picked == "none" or aliases.get(picked, picked) in flags
    if platform.machine() == "x86_64" and "avx2" in flags:
        assert picked == "avx2"


def test_the_extension_is_abi3():
    assert Path(_native.__file__).name.endswith(".abi3.so") or sys.platform == "win32"
    assert build_info()["python_abi"].startswith("abi3")


def test_any_byte_buffer_is_accepted_and_other_buffers_are_not(tmp_path):
    pixels = np.arange(12, dtype=np.uint8)
    strided = memoryview(bytes(range(10)))[::2]
    with ShardWriter(tmp_path) as w:
        w.write("k", [("a", pixels), ("b", strided), ("c", bytearray(b"xy"))])
        with pytest.raises(TypeError, match="not bytes"):
            w.write("f", [("a", np.zeros(3, dtype=np.float32))])
    with tarfile.open(tmp_path / "000000.tar") as tar:
        assert tar.getnames() == ["k.a", "k.b", "k.c"]
    [(_, parts)] = list(read_shard(tmp_path / "000000.tar"))
    assert parts == {"a": pixels.tobytes(), "b": bytes(range(0, 10, 2)), "c": b"xy"}
