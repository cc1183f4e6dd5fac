"""Broken tensors are found, never loaded blind and never run: plain validate (and finalize's check)
cooks each split's first sample through Energon with its layout's safe cooker, so garbage or a
pickle in a `.pth` part is a problem; `--deep` reads every `.pth` archive member against its CRC
and checks the storages its pickle names, and the storages inside Megatron-Bridge's `pickle`."""

from __future__ import annotations

import io
import json
import pickle
import struct
import warnings
import zipfile
from collections import OrderedDict

import pytest
import torch
from shardcook import DatasetError, ShardWriter, finalize, validate

from tests.helpers.dataset import preencoded_parts, pth, raw_parts


class Runs:
    """Pickles as a call that would leave `marker` behind if anything unpickled it unsafely."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


class Rebuilt:
    """Pickles as the tensor `size`/`stride` over `storage`, as torch writes one."""

    def __init__(self, storage, size, stride):
        self.storage, self.size, self.stride = storage, size, stride

    def __reduce__(self):
        return (torch._utils._rebuild_tensor_v2,
                (self.storage, 0, self.size, self.stride, False, OrderedDict()))


def storage(t: torch.Tensor):
    """The typed storage torch itself pickles for `t` (its deprecation warning silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return t.storage()


def saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def bridge_parts(i: int) -> dict[str, bytes]:
    embeddings = {"prompt_embeds": torch.zeros(8, 32), "pooled_prompt_embeds": torch.zeros(24)}
    meta = {"processed_height": 32, "processed_width": 32, "caption": f"caption {i}"}
    return {"pth": pth(torch.zeros(16, 4, 4)), "pickle": pickle.dumps(embeddings),
            "json": json.dumps(meta).encode()}


LAYOUT_PARTS = {"preencoded": preencoded_parts, "bridge-flux": bridge_parts, "raw": raw_parts}


def shards(d, encoding, damage, at=0):
    """Two shards of two samples of `encoding`, sample `at` changed by `damage(parts)`."""
    with ShardWriter(d, shard_size=2) as w:
        for i in range(4):
            parts = LAYOUT_PARTS[encoding](i)
            if i == at:
                damage(parts)
            w.write(f"{i:010d}", parts)
    return d


# ---- plain validate: the first sample of each split goes through the layout's cooker ----------


def first_sample_cases(marker):
    evil = saved(Runs(marker))
    return {
        "latents.pth garbage": ("preencoded", {"latents.pth": b"not a tensor at all"}),
        "latents.pth a pickle": ("preencoded", {"latents.pth": evil}),
        "mean.pth a pickle": ("preencoded", {"mean.pth": evil,
                                             "logvar.pth": pth(torch.zeros(16, 4, 4))}),
        "bridge pth garbage": ("bridge-flux", {"pth": b"\x00" * 64}),
        "bridge pth a pickle": ("bridge-flux", {"pth": evil}),
        "raw jpg garbage": ("raw", {"jpg": b"\xff\xd8 not a jpeg"}),
    }


@pytest.mark.parametrize("case", list(first_sample_cases("x")))
def test_plain_validate_cooks_the_first_sample(tmp_path, case):
    marker = tmp_path / "ran"
    encoding, replaced = first_sample_cases(marker)[case]
    d = shards(tmp_path / "ds", encoding, lambda parts: parts.update(replaced))
    with pytest.raises(DatasetError, match="does not validate with the new index"):
        finalize(d, encoding=encoding)
    finalize(d, encoding=encoding, validate=False)  # a failed finalize leaves no metadata
    report = validate(d)
    assert not marker.exists()
    assert not report.ok
    assert report.problems[0].startswith("Energon cannot load the train split: "), report.problems
    part = next(iter(replaced))
    assert f"part '{part}'" in report.problems[0]
    assert len(report.problems) == 1, report.problems


@pytest.mark.parametrize("encoding", list(LAYOUT_PARTS))
def test_sound_first_samples_still_validate(tmp_path, encoding):
    d = shards(tmp_path / "ds", encoding, lambda parts: None)
    assert finalize(d, encoding=encoding).validation.ok


# ---- --deep: every .pth archive against its CRCs, and the storages its pickle names ------------


def flip_inside(data: bytes, member_suffix: str) -> bytes:
    """`data` (a torch.save archive) with one bit flipped in the stored bytes of a member."""
    out = bytearray(data)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(member_suffix))
    off = info.header_offset
    name_len, extra_len = struct.unpack("<HH", out[off + 26:off + 30])
    out[off + 30 + name_len + extra_len + 5] ^= 0x40
    return bytes(out)


def shortened(data: bytes, member_suffix: str) -> bytes:
    """`data` rewritten with a member four bytes short (its CRC made to match)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(buf, "w") as dst:
        for info in src.infolist():
            body = src.read(info)
            dst.writestr(info.filename, body[:-4] if info.filename.endswith(member_suffix)
                         else body)
    return buf.getvalue()


def short_storage_pickle() -> bytes:
    """Bridge's embeddings pickle with the prompt's storage four bytes short."""
    t = torch.zeros(8, 32)
    load, (blob,) = storage(t).__reduce__()

    class Short:
        def __reduce__(self):
            return (load, (blob[:-4],))

    return pickle.dumps({"prompt_embeds": Rebuilt(Short(), (8, 32), (32, 1)),
                         "pooled_prompt_embeds": torch.zeros(24)})


LATENT = pth(torch.zeros(16, 4, 4, dtype=torch.bfloat16))
BRIDGE_LATENT = pth(torch.zeros(16, 4, 4))
DEEP_CASES = {
    "latents.pth bit flipped": (
        "preencoded", "latents.pth", flip_inside(LATENT, "data/0"),
        "part latents.pth is damaged: its archive member archive/data/0 fails its CRC check"),
    "latents.pth storage short": (
        "preencoded", "latents.pth", shortened(LATENT, "data/0"),
        ("part latents.pth is damaged: its tensor's storage archive/data/0 should hold 512 bytes, "
        "the archive holds 508")),
    "latents.pth past its storage": (
        "preencoded", "latents.pth",
        saved(Rebuilt(storage(torch.zeros(8, dtype=torch.bfloat16)), (16, 4, 4), (16, 4, 1))),
        ("part latents.pth is damaged: its tensor reaches past the end of its storage "
        "archive/data/0")),
    "bridge pth bit flipped": (
        "bridge-flux", "pth", flip_inside(BRIDGE_LATENT, "data/0"),
        "part pth is damaged: its archive member archive/data/0 fails its CRC check"),
    "bridge pickle storage short": (
        "bridge-flux", "pickle", short_storage_pickle(),
        ("part pickle is not a readable pickle (ValueError: a tensor's storage should hold 1024 "
        "bytes, the pickle holds 1020)")),
    "bridge pickle past its storage": (
        "bridge-flux", "pickle",
        pickle.dumps({"prompt_embeds": Rebuilt(storage(torch.zeros(6)), (8, 32), (32, 1)),
                      "pooled_prompt_embeds": torch.zeros(24)}),
        ("part pickle is not a readable pickle (ValueError: a tensor reaches past the end of its "
        "storage)")),
}


@pytest.mark.parametrize("case", list(DEEP_CASES))
def test_deep_finds_damage_inside_a_tensor(tmp_path, case):
    encoding, part, data, expected = DEEP_CASES[case]
    d = shards(tmp_path / "ds", encoding, lambda parts: parts.update({part: data}), at=1)
    finalize(d, encoding=encoding)  # the first sample of the split is sound
    assert validate(d, deep=True).problems == [f"000000.tar: sample 0000000001 {expected}"]
