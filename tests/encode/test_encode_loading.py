"""Loading the encoders: a text encoder is read in its stored dtype and widened on the device, so
an fp32 run of a bf16 checkpoint never holds an fp32 copy on the host, with the values and
buffers `from_pretrained(dtype=torch.float32)` gives, for every family's text encoder."""

from __future__ import annotations

import importlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.encode import TINY

#: family -> (its tiny models' fixture, its module in shardcook.encoders, the module's loader of
#: its text encoder, the source's name in `resolve_sources`, the transformers class)
TEXT_ENCODERS = {
    "flux-t5": ("tiny_flux", "flux", "load_encoder", "t5", "T5EncoderModel"),
    "flux-clip": ("tiny_flux", "flux", "load_encoder", "clip", "CLIPTextModel"),
    "wan": ("tiny_wan", "wan", "load_umt5", "umt5", "UMT5EncoderModel"),
    "qwen-image": ("tiny_qwen_image", "qwen_image", "load_text_encoder", "qwen2.5-vl",
                   "Qwen2_5_VLForConditionalGeneration"),
    "flux2": ("tiny_flux2", "flux2", "load_mistral", "mistral",
              "Mistral3ForConditionalGeneration"),
}


def _in_bf16(root: Path, tmp: Path, sub: str, cls) -> Path:
    """A copy of the models folder `root` whose `sub` model is stored in bf16."""
    copy = tmp / root.name
    shutil.copytree(root, copy)
    model = cls.from_pretrained(copy / sub, dtype=torch.bfloat16)
    shutil.rmtree(copy / sub)
    model.save_pretrained(copy / sub)
    return copy


@pytest.mark.parametrize("case", list(TEXT_ENCODERS))
def test_fp32_run_of_a_bf16_checkpoint_has_the_widened_values(case, request, tmp_path):
    import transformers

    fixture, module, loader, name, cls_name = TEXT_ENCODERS[case]
    cls = getattr(transformers, cls_name)
    family = importlib.import_module(f"shardcook.encoders.{module}")
    sources = family.resolve_sources(str(request.getfixturevalue(fixture)))
    folder = _in_bf16(Path(sources[name].source), tmp_path, sources[name].subfolder, cls)
    src = family.resolve_sources(str(folder))[name]
    model = getattr(family, loader)(src, None, torch.float32, "cpu")[0]
    want = cls.from_pretrained(folder / src.subfolder, dtype=torch.float32).eval()
    assert next(iter(want.parameters())).dtype == torch.float32
    got_tensors = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    want_tensors = {**dict(want.named_parameters()), **dict(want.named_buffers())}
    assert list(got_tensors) == list(want_tensors)
    for key, t in got_tensors.items():
        assert t.dtype == want_tensors[key].dtype, key
        assert torch.equal(t, want_tensors[key]), key
    assert model.config._attn_implementation == want.config._attn_implementation
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_fp32_flux_encoders_of_a_bf16_checkpoint_encode_as_before(tiny_flux, tmp_path):
    """The whole FLUX text path, byte for byte, against encoders read straight in fp32."""
    from shardcook.encoders.flux import FluxEncoders
    from transformers import CLIPTextModel, T5EncoderModel

    folder = _in_bf16(tiny_flux, tmp_path, "text_encoder_2", T5EncoderModel)
    folder = _in_bf16(folder, tmp_path / "again", "text_encoder", CLIPTextModel)
    ours = FluxEncoders.load(model_path=str(folder), precision="fp32",
                             t5_max_length=TINY["t5_max_length"])
    assert {p.dtype for p in ours.t5.parameters()} == {torch.float32}
    want = FluxEncoders(
        ours.vae, ours.clip_tokenizer,
        CLIPTextModel.from_pretrained(folder / "text_encoder", dtype=torch.float32).eval(),
        ours.t5_tokenizer,
        T5EncoderModel.from_pretrained(folder / "text_encoder_2", dtype=torch.float32).eval(),
        device="cpu", dtype=torch.float32, t5_max_length=TINY["t5_max_length"])
    captions = ["a red circle", "", "a dog on a blue square with a big yellow star"]
    got, expected = ours.encode_text(captions), want.encode_text(captions)
    for name, t in got.items():
        assert torch.equal(t, expected[name]), name


#: Loads the T5 of a FLUX folder with shardcook's loader in a fresh process and prints the growth
#: of its peak RSS over the load (Linux: /proc/self/clear_refs resets the peak), the parameters'
#: dtypes and devices. On the CPU every parameter is read, so the file's pages count.
MEASURE = """
import json, sys, torch
from shardcook.encoders.loading import EncoderSource, load_encoder
import transformers.models.t5.modeling_t5  # imported before the peak is reset

def peak():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

src = EncoderSource("t5", sys.argv[1], True, "text_encoder_2", "tokenizer_2", None, "--model-path")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = peak()
model, _ = load_encoder(src, None, getattr(torch, sys.argv[2]), sys.argv[3])
if sys.argv[3] == "cpu":
    for p in model.parameters():
        p.sum()
print(json.dumps({"growth": peak() - before,
                  "dtypes": sorted({str(p.dtype) for p in model.parameters()}),
                  "devices": sorted({p.device.type for p in model.parameters()})}))
"""


@pytest.fixture(scope="module")
def bf16_t5(tiny_flux, tmp_path_factory):
    """A FLUX folder whose T5 is stored in bf16 and large enough to see in the RSS: 28M
    parameters, 52 MiB in bf16 and 105 MiB in fp32; and its fp32 size in bytes."""
    from transformers import T5Config, T5EncoderModel

    root = tmp_path_factory.mktemp("bf16_t5") / "flux"
    shutil.copytree(tiny_flux, root)
    torch.manual_seed(0)
    t5 = T5EncoderModel(T5Config(vocab_size=256, d_model=512, d_kv=64, d_ff=1536, num_layers=8,
                                 num_heads=8, feed_forward_proj="gated-gelu",
                                 is_encoder_decoder=False, use_cache=False))
    n = sum(p.numel() for p in t5.parameters())
    shutil.rmtree(root / "text_encoder_2")
    t5.to(torch.bfloat16).save_pretrained(root / "text_encoder_2")
    del t5
    return root, 4 * n


def _measured(folder: Path, precision: str, device: str) -> dict:
    r = subprocess.run([sys.executable, "-c", MEASURE, str(folder), precision, device],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    return dict(json.loads(r.stdout.strip().splitlines()[-1]))


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="Linux's peak RSS reset")
def test_no_fp32_copy_on_the_host(bf16_t5):
    folder, fp32_bytes = bf16_t5
    # an fp32 run on a device (meta stands for the GPU: any device not the host) widens there
    widened = _measured(folder, "float32", "meta")
    assert widened["dtypes"] == ["torch.float32"] and widened["devices"] == ["meta"]
    assert widened["growth"] < fp32_bytes / 2, widened
    # a bf16 run stays bf16: at most the file's bf16 pages, read on the CPU
    kept = _measured(folder, "bfloat16", "cpu")
    assert kept["dtypes"] == ["torch.bfloat16"] and kept["devices"] == ["cpu"]
    assert kept["growth"] < 0.75 * fp32_bytes, kept
