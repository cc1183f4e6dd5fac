"""`encode` on images runs each distinct caption of an encoder batch through the text encoders
once: T5 sees only the distinct captions (rows counted by a forward hook on the real model), and
the samples are byte for byte those of a run in which every caption is encoded alone."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch

from tests.helpers.encode import TINY, encode_args, run_in_process, samples
from tests.helpers.raw import make_folder

#: Eight inputs, four distinct captions (one of them empty).
CAPTIONS = ["a red circle", "a dog on a blue square", "a red circle", "", "a red circle",
            "a dog on a blue square", "", "a big yellow star"]


#: The part holding the latents, by layout (the text encodings are in the others).
LATENTS = {"primus": "latents.pth", "megatron-bridge": "pth"}


@contextmanager
def t5_rows():
    """The rows of every T5 encoder forward in the block, in order."""
    from transformers import T5EncoderModel

    rows: list[int] = []

    def hook(module, args, kwargs, output):
        if isinstance(module, T5EncoderModel):
            ids = args[0] if args else kwargs["input_ids"]
            rows.append(int(ids.shape[0]))

    handle = torch.nn.modules.module.register_module_forward_hook(hook, with_kwargs=True)
    try:
        yield rows
    finally:
        handle.remove()


@pytest.fixture(scope="module")
def repeated(tmp_path_factory):
    src = make_folder(tmp_path_factory.mktemp("shared_captions") / "in", len(CAPTIONS), photos=2)
    for i, caption in enumerate(CAPTIONS):
        (src / "captions" / f"{i:04d}.txt").write_text(caption, encoding="utf-8")
    return src


@pytest.mark.parametrize("layout", ["primus", "megatron-bridge"])
def test_repeated_captions_encoded_once_same_bytes(tiny_flux, repeated, tmp_path, layout):
    args = ("--layout", layout, "--latent-mode", "mode", "--shard-size", "8")
    with t5_rows() as shared:
        run_in_process(encode_args(tiny_flux, repeated, tmp_path / "shared", *args,
                                   "--batch-size", "8"))
    with t5_rows() as alone:
        run_in_process(encode_args(tiny_flux, repeated, tmp_path / "alone", *args,
                                   "--batch-size", "1"))
    distinct = len(set(CAPTIONS))
    # the empty caption's encodings (empty_encodings/) and one encoder batch of all eight images
    assert sorted(shared) == sorted([1, distinct]), shared
    assert alone == [1] * (len(CAPTIONS) + 1), alone
    got, want = samples(tmp_path / "shared"), samples(tmp_path / "alone")
    assert list(got) == list(want) and len(got) == len(CAPTIONS)
    for key, parts in got.items():  # not the latents: a batch of 8 convolves with other rounding
        assert list(parts) == list(want[key])
        differ = [name for name, data in parts.items()
                  if name != LATENTS[layout] and data != want[key][name]]
        assert not differ, (key, differ)


def test_shared_text_equals_encoding_every_row(tiny_flux):
    """The rows `shared_text` gathers are byte for byte those of encoding the whole list, in the
    same process and thread count; and they are copies, not views of one another."""
    from shardcook.encoders.flux import FluxEncoders
    from shardcook.jobs.encode.job import shared_text

    for mask in (False, True):
        enc = FluxEncoders.load(model_path=str(tiny_flux), precision="fp32",
                                t5_max_length=TINY["t5_max_length"], t5_attention_mask=mask)
        every = enc.encode_text(CAPTIONS)
        with t5_rows() as rows:
            once = shared_text(enc, CAPTIONS)
        assert rows == [len(set(CAPTIONS))]
        assert list(once) == list(every)
        for name, t in once.items():
            assert t.shape == every[name].shape
            assert torch.equal(t, every[name]), (mask, name)
            assert t.untyped_storage().data_ptr() != every[name].untyped_storage().data_ptr()
