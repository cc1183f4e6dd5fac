"""`encode --layout mlperf`: a team's own images in MLPerf Flux.1's `preencoded_numpy` layout
(bf16 tensors as uint16 `.npy`, the VAE posterior), bit for bit the tensors `--layout primus
--latent-mode resample` stores for the same inputs, and readable by the loaders."""

from __future__ import annotations

import io

import numpy as np
import torch
from shardcook.dataset import validate

from tests.helpers.encode import encode_args, load_tensor, run_in_process, samples
from tests.helpers.raw import make_folder

BF16 = ("--precision", "bf16")


def _bf16(data: bytes) -> torch.Tensor:
    array = np.load(io.BytesIO(data), allow_pickle=False)
    assert array.dtype == np.uint16
    return torch.from_numpy(array.copy()).view(torch.bfloat16)


def test_mlperf_layout_holds_the_posterior_of_the_primus_resample_layout(tiny_flux, tmp_path):
    src = make_folder(tmp_path / "in", 4, photos=4)
    mlperf, primus = tmp_path / "mlperf", tmp_path / "primus"
    run_in_process(encode_args(tiny_flux, src, mlperf, *BF16, "--layout", "mlperf"))
    run_in_process(encode_args(tiny_flux, src, primus, *BF16, "--latent-mode", "resample"))
    ours, theirs = samples(mlperf), samples(primus)
    assert sorted(ours) == sorted(theirs) and len(ours) == 4
    for key, parts in ours.items():
        assert list(parts) == ["t5.bytes", "clip.bytes", "mean.bytes", "logvar.bytes", "json"]
        for part, pth in (("t5.bytes", "prompt_embeds.pth"),
                          ("clip.bytes", "pooled_prompt_embeds.pth"),
                          ("mean.bytes", "mean.pth"), ("logvar.bytes", "logvar.pth")):
            assert torch.equal(_bf16(parts[part]), load_tensor(theirs[key][pth])), (key, part)
        assert parts["json"] == f'{{"key": "{key}"}}'.encode()
    assert (mlperf / ".nv-meta" / "dataset.yaml").read_text().count("preencoded_numpy") == 1
    report = validate(mlperf, deep=True)
    assert report.ok, report.problems


def test_mlperf_layout_refuses_what_it_cannot_store(tiny_flux, tmp_path):
    src = make_folder(tmp_path / "in", 1, photos=1)
    sentence = ("error: --layout mlperf stores the posterior in bfloat16, as MLCommons's data: "
                "use --latent-mode resample and bf16 (--precision or --stored-dtype).")
    for extra in ((*BF16, "--latent-mode", "sample"), ("--precision", "fp32")):
        r = run_in_process(encode_args(tiny_flux, src, tmp_path / "out", "--layout", "mlperf",
                                       *extra), expect=2)
        assert r.output.strip() == sentence
    assert not (tmp_path / "out").exists()


def test_preview_decodes_the_posterior_mean(tiny_flux, tmp_path):
    from PIL import Image
    from shardcook.preview import preview

    src = make_folder(tmp_path / "in", 2, photos=2)
    out = tmp_path / "mlperf"
    run_in_process(encode_args(tiny_flux, src, out, *BF16, "--layout", "mlperf"))
    decoded = preview(out, tmp_path / "decoded.png", model_path=str(tiny_flux))
    false_colour = preview(out, tmp_path / "false.png")
    with Image.open(decoded) as a, Image.open(false_colour) as b:
        assert a.size == b.size and a.tobytes() != b.tobytes()
