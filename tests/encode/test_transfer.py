"""Host <-> device copies of the encoders (shardcook.encoders.transfer): the values arrive
whole, in the stored dtype, and the pixel arithmetic gives the same bits on the GPU as on
the CPU (the reason it may run on the device)."""

from __future__ import annotations

import pytest
import torch

from shardcook.encoders.transfer import HostCopy, to_device

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


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_pixel_arithmetic_is_the_same_on_the_gpu(dtype: torch.dtype) -> None:
    # every uint8 value, as Bridge's Wan script scales it: [0, 1] in float32, the model's
    # dtype, [-1, 1]
    px = torch.arange(256, dtype=torch.uint8).repeat(64)

    def scaled(t: torch.Tensor) -> torch.Tensor:
        return (t.to(torch.float32) / 255.0).to(dtype) * 2.0 - 1.0

    assert torch.equal(scaled(px.cuda()).cpu(), scaled(px))
