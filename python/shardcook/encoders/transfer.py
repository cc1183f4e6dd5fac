"""Copies between the host and a CUDA device that do not stall the GPU's queue.

A copy from ordinary (pageable) host memory to the GPU first waits for every kernel queued
before it, and a copy back to ordinary memory waits for the batch to finish: either leaves the
GPU idle while the encoder thread prepares the next batch. Copies through pinned memory are
queued like kernels instead, so the next batch's work is queued while the GPU still runs this
one, and the thread waits only when it needs the values. On the CPU both are plain copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    """`t` (on the host) on `device`, without waiting for the kernels queued there."""
    if not device.startswith("cuda"):
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


class HostCopy:
    """Device tensors on their way to the host in `dtype`: `get()` returns them once copied.

    On CUDA the copies go into pinned memory behind an event, and `get()` waits for that event
    only; the device tensors may be dropped at once (the allocator reuses their memory only for
    work queued after the copies)."""

    def __init__(self, tensors: Sequence[torch.Tensor], dtype: torch.dtype) -> None:
        import torch

        self._event: torch.cuda.Event | None = None
        if not tensors or not tensors[0].is_cuda:
            self._host = tuple(t.to("cpu", dtype=dtype) for t in tensors)
            return
        host = []
        for t in tensors:
            h = torch.empty(t.shape, dtype=dtype, pin_memory=True)
            h.copy_(t.to(dtype), non_blocking=True)
            host.append(h)
        self._host = tuple(host)
        self._event = torch.cuda.Event()  # type: ignore[no-untyped-call]
        self._event.record()

    def get(self) -> tuple[torch.Tensor, ...]:
        """The host tensors, once their copies are done."""
        if self._event is not None:
            self._event.synchronize()
        return self._host
