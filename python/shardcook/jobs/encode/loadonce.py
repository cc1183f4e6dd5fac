"""Encoders loaded on first use, the seconds the load took counted as a stage of the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["LoadedOnce"]

E = TypeVar("E")


class LoadedOnce(Generic[E]):
    """`get()` loads the encoders the first time and adds the seconds it took to
    `stage_seconds["load_encoders"]`; later calls return the same encoders."""

    def __init__(self, load: Callable[[], E], stage_seconds: dict[str, float]) -> None:
        self._load = load
        self._stage_seconds = stage_seconds
        self._loaded: E | None = None

    def get(self) -> E:
        if self._loaded is None:
            t0 = time.perf_counter()
            self._loaded = self._load()
            self._stage_seconds["load_encoders"] += time.perf_counter() - t0
        return self._loaded
