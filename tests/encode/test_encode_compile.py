"""`encode --compile`: the VAE's encoder and the text encoders go through torch.compile (here with
a backend that runs the captured graphs as they are: inductor takes half a minute per shape on
this CPU), the manifest records it, and a resume with the other setting is refused in one
sentence."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.encode import encode_args, load_tensor, run_in_process, samples
from tests.helpers.raw import make_folder, manifest


@pytest.fixture
def captured(monkeypatch):
    """The graphs torch.compile captures, each run as captured."""
    from shardcook.encoders import compiled

    graphs: list[torch.fx.GraphModule] = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    monkeypatch.setattr(compiled, "BACKEND", backend)
    torch._dynamo.reset()
    yield graphs
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    return make_folder(tmp_path_factory.mktemp("compile") / "in", 4, photos=2)


def test_compiled_modules_are_the_vae_encoder_and_text_encoders(tiny_flux):
    from diffusers.models.autoencoders.vae import Encoder
    from shardcook.encoders.compiled import compiled_modules
    from shardcook.encoders.flux import FluxEncoders
    from transformers import CLIPTextModel, T5EncoderModel

    enc = FluxEncoders.load(model_path=str(tiny_flux), precision="fp32")
    assert [type(m) for m in compiled_modules(enc)] == [Encoder, CLIPTextModel, T5EncoderModel]
    assert compiled_modules(enc)[0] is enc.vae.encoder


def test_compile_runs_compiled_and_is_recorded(tiny_flux, photos, tmp_path, captured):
    args = ("--latent-mode", "mode", "--batch-size", "4")
    run_in_process(encode_args(tiny_flux, photos, tmp_path / "eager", *args))
    assert not captured
    run_in_process(encode_args(tiny_flux, photos, tmp_path / "compiled", *args, "--compile"))
    assert len(captured) >= 3  # the VAE's encoder, CLIP and T5, at least a graph each
    compiled = manifest(tmp_path / "compiled")
    assert compiled["compile"] is True and compiled["config"]["model"]["compile"] is True
    eager = manifest(tmp_path / "eager")
    assert "compile" not in eager and eager["config"]["model"]["compile"] is False
    got, want = samples(tmp_path / "compiled"), samples(tmp_path / "eager")
    assert list(got) == list(want)
    for key, parts in got.items():
        for name in ("latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth"):
            torch.testing.assert_close(load_tensor(parts[name]), load_tensor(want[key][name]),
                                       atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("first, then", [((), ("--compile",)), (("--compile",), ())])
def test_resume_with_the_other_compile_setting_is_refused(tiny_flux, photos, tmp_path, captured,
                                                          first, then):
    out = tmp_path / "out"
    run_in_process(encode_args(tiny_flux, photos, out, "--no-finalize", *first))
    before = {p.name: p.read_bytes() for p in out.glob("*.tar")}
    r = run_in_process(encode_args(tiny_flux, photos, out, *then), expect=2)
    assert "holds a run made with different options" in r.output, r.output
    assert "compile" in r.output and r.output.strip().count("\n") == 0, r.output
    assert {p.name: p.read_bytes() for p in out.glob("*.tar")} == before


def test_cudnn_autotuner_only_for_cuda_with_compile():
    """Setting the flag needs no GPU: on for a CUDA device with --compile, the caller's after."""
    from shardcook.encoders.compiled import cudnn_autotuned

    callers = torch.backends.cudnn.benchmark
    for device, on, inside in (("cuda:0", True, True), ("cuda", False, callers),
                               ("cpu", True, callers)):
        with cudnn_autotuned(device, on):
            assert torch.backends.cudnn.benchmark is inside, (device, on)
        assert torch.backends.cudnn.benchmark is callers
