"""`validate --deep` checks that the samples of a split agree on what their layout says they
share (`Reading.agreement`): the parts, the latent's rank, channels and dtype, the text
embeddings' whole shapes. A latent's height and width follow each image (--resize-mode
variable); two runs' shards mixed in one split, each sample sound alone, are a problem. (The
Wan layout's case, clips mixed with frames, is in tests/video/test_encode_wan.py.)"""

from __future__ import annotations

import shutil

import pytest
from shardcook import validate

from tests.helpers.encode import encode_args, run_in_process
from tests.helpers.raw import make_folder


@pytest.mark.parametrize(("layout", "embeddings"), [
    ("primus", "prompt_embeds.pth shape"), ("megatron-bridge", "pickle's prompt_embeds shape")])
def test_latent_sizes_may_vary_but_not_the_text_length(tiny_flux, tmp_path, layout, embeddings):
    src = make_folder(tmp_path / "in", 6, photos=4)  # photos of several sizes, then generated
    variable = ("--layout", layout, "--resize-mode", "variable", "--max-size", "64",
                "--shard-size", "3", "--latent-mode", "mode")
    out = tmp_path / "out"
    run_in_process(encode_args(tiny_flux, src, out, *variable))
    report = validate(out, deep=True)
    assert report.ok, report.problems
    other = tmp_path / "other"
    args = encode_args(tiny_flux, src, other, *variable, "--no-finalize")
    args[args.index("--t5-max-length") + 1] = "16"
    run_in_process(args)
    mixed = tmp_path / "mixed"  # as another tool leaves it: no run record to compare with
    shutil.copytree(out, mixed, ignore=shutil.ignore_patterns(".shardcook", ".nv-meta"))
    shutil.copyfile(other / "000001.tar", mixed / "000001.tar")
    encoding = "preencoded" if layout == "primus" else "bridge-flux"
    run_in_process(["finalize", "--encoding", encoding, str(mixed)])
    assert validate(mixed).ok  # each split's first sample is sound
    report = validate(mixed, deep=True)
    assert len(report.problems) == 3, report.problems  # the second shard's 3 samples
    assert all("does not match sample 0000000000 (000000.tar), the first of the train split"
               in p for p in report.problems)
    assert f"{embeddings} [16, " in report.problems[0] and "not [32, " in report.problems[0]
    assert "latent" not in report.problems[0] and "rank" not in report.problems[0]
