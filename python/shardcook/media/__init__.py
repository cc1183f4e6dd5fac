"""Video and audio inputs of `chatml`: frames sampled from videos (PyAV) and audio headers
(soundfile). Images go through the Rust image core (`shardcook.imaging`)."""

from __future__ import annotations

from shardcook.errors import SkipReason


class MediaError(ValueError):
    """A video or audio input that cannot be used: `reason` is the skip reason for report.json,
    the message one sentence saying why."""

    def __init__(self, reason: SkipReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
