"""`--compile`: the modules `encode` runs, compiled in place with torch.compile (a VAE's encoder,
each text encoder), whatever the model family; and cuDNN's autotuner for a CUDA run.

Compiled kernels fuse and reorder the arithmetic, and the autotuner times the convolution
algorithms in each process and keeps the fastest, so the values agree with an eager run's to
rounding, not byte for byte, and two compiled runs need not agree byte for byte either: hence
an option, off by default, that the manifest records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: torch.compile's backend. Inductor needs a C compiler and, on a CPU, half a minute per shape
#: for the tiny test models, so the tests give a backend that runs the captured graphs as they
#: are (torch.compile's "eager" does the same).
BACKEND: str | Callable[..., Any] = "inductor"


def compiled_modules(encoders: object) -> list[torch.nn.Module]:
    """The modules of `encoders` (a family's `Encoders`) that `compile_encoders` compiles: of
    a diffusers autoencoder its `encoder` (`encode` runs no decoder), of a transformers model
    its inner `model` where it has one (a family may call that alone, as Qwen-Image does), else
    the model itself."""
    import torch
    from diffusers import ModelMixin

    found = []
    for value in vars(encoders).values():
        if not isinstance(value, torch.nn.Module):
            continue
        inner = getattr(value, "encoder" if isinstance(value, ModelMixin) else "model", None)
        found.append(inner if isinstance(inner, torch.nn.Module) else value)
    return found


def compile_encoders(encoders: object) -> None:
    """Compiles `compiled_modules(encoders)` in place (`Module.compile`: the same parameters, the
    compiled forward on each call; the first call of each shape compiles)."""
    for module in compiled_modules(encoders):
        module.compile(backend=BACKEND)


@contextmanager
def cudnn_autotuned(device: str, on: bool) -> Iterator[None]:
    """cuDNN's autotuner (`torch.backends.cudnn.benchmark`) on for the block when `on` and
    `device` is CUDA; the caller's setting restored after."""
    import torch

    if not (on and device.startswith("cuda")):
        yield
        return
    callers = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = callers
