"""Host <-> device copies of the encoders (shardcook.encoders.transfer): the values arrive
whole, in the stored dtype; and Wan's pixels, scaled on the device from a table, are Bridge's
host-side division to the bit on any device."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from shardcook.encoders.transfer import HostCopy, to_device
from shardcook.encoders.wan import scaled_clips, unit_values

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")


def test_cpu_copies_are_plain_conversions() -> None:
    a = torch.arange(12, dtype=torch.float32).reshape(3, 4) / 7
    (got,) = HostCopy([a], torch.bfloat16).get()
    assert got.dtype == torch.bfloat16 and torch.equal(got, a.to(torch.bfloat16))
    assert torch.equal(to_device(a, "cpu"), a)


@needs_gpu
def test_gpu_copies_wait_for_the_queued_work() -> None:
    # a long queue of kernels ahead of the copy: get() must return the finished values
    x = torch.full((2048, 2048), 1.0, device="cuda")
    for _ in range(50):
        x = x @ torch.eye(2048, device="cuda") + 1.0
    copy = HostCopy([x, x.sum(dim=0)], torch.float32)
    del x
    big, col = copy.get()
    assert big.device.type == "cpu" and big.is_pinned()
    assert torch.equal(big, torch.full((2048, 2048), 51.0))
    assert torch.equal(col, torch.full((2048,), 51.0 * 2048))
    host = torch.arange(1 << 20, dtype=torch.int64)
    assert torch.equal(to_device(host, "cuda").cpu(), host)


DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def bridge_unit(frames: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """Bridge's Wan script: `frame.astype(np.float32) / 255.0`, then the model's dtype."""
    return torch.from_numpy(frames.astype(np.float32) / 255.0).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unit_values_are_bridges_division(dtype: torch.dtype) -> None:
    every = np.arange(256, dtype=np.uint8)
    assert torch.equal(unit_values(dtype), bridge_unit(every, dtype))
    clips = np.random.default_rng(0).integers(0, 256, (2, 3, 8, 10, 3), dtype=np.uint8)
    got = scaled_clips(list(clips), unit_values(dtype), "cpu")
    assert got.shape == (2, 3, 8, 10, 3) and torch.equal(got, bridge_unit(clips, dtype))


@needs_gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_scaled_clips_are_the_same_on_the_gpu(dtype: torch.dtype) -> None:
    clips = np.random.default_rng(1).integers(0, 256, (2, 5, 16, 24, 3), dtype=np.uint8)
    table = unit_values(dtype)
    got = scaled_clips(list(clips), table.cuda(), "cuda")
    assert torch.equal(got.cpu(), scaled_clips(list(clips), table, "cpu"))
