"""The native core's build in words, for `shardcook --version`: what it was built from
(rust/build_info.rs) and what its JPEG decoder and resizer use on this CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardcook import _native


def build_info() -> dict[str, Any]:
    """The native core's build, plus the Python ABI its extension module was built for."""
    info: dict[str, Any] = _native.build_info()
    stable = ".abi3." in Path(_native.__file__).name
    info["python_abi"] = "abi3 (every CPython >= 3.10)" if stable else "this CPython only"
    return info


def build_lines(info: dict[str, Any]) -> list[str]:
    """`info` as the lines `shardcook --version` prints under the version."""
    jpeg, resize = info["jpeg"], info["resize"]
    if jpeg["simd_active"]:
        simd = f"SIMD on (built with {jpeg['nasm']})" if jpeg["nasm"] else "SIMD on"
    elif jpeg["simd_compiled"]:
        simd = "SIMD compiled in but not in use on this CPU"
    else:
        simd = "SIMD off (a portable build, SHARDCOOK_ALLOW_SLOW_JPEG=1)"
    build = (
        f"native core: {info['profile']} build (opt-level {info['opt_level']}) for "
        f"{info['target']}, {info['rustc']}, PyO3 {info['pyo3']}, Python ABI {info['python_abi']}"
    )
    return [
        build,
        f"JPEG decoder: {jpeg['library']}, {simd}",
        f"WebP decoder: {info['webp']}",
        f"PNG decoder: {info['png']}",
        f"resizer: {resize['library']}, CPU extensions {resize['cpu_extensions']}",
    ]
