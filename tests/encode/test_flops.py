"""Model FLOPs per sample (shardcook.encoders.flops) and the GPU bench's MFU arithmetic: the
counts at the real models' shapes (FLUX.1's VAE, T5-XXL, CLIP-L; Wan 2.1's VAE and UMT5-XXL, built
on the meta device from encoders/fullsize.py), how they scale, that the meta count is what the
model really runs, and benches/encode_gpu.py's peak table and --peak-tflops."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from shardcook.encoders import flops
from shardcook.encoders.fullsize import flux_encoders, wan_encoders

BENCH = Path(__file__).resolve().parents[2] / "benches" / "encode_gpu.py"
T = 1e12


@pytest.fixture(scope="module")
def flux() -> dict[str, torch.nn.Module]:
    with torch.device("meta"):
        return flux_encoders()


@pytest.fixture(scope="module")
def wan() -> dict[str, torch.nn.Module]:
    with torch.device("meta"):
        return wan_encoders()


@pytest.fixture(scope="module")
def flux_counts(flux) -> dict[str, int]:
    """FLUX's counts at 1024 px and T5 at 512 tokens, and the VAE's at 512 px."""
    return {**flops.flux_flops(flux, 1024, 512),
            "vae_512": flops.vae_encode_flops(flux["vae"], (512, 512))}


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("encode_gpu", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_flux_counts_at_the_real_shapes(flux_counts) -> None:
    assert flux_counts["vae"] / T == pytest.approx(4.88, rel=0.02)
    assert flux_counts["t5"] / T == pytest.approx(4.84, rel=0.02)
    assert flux_counts["clip"] / T == pytest.approx(0.0133, rel=0.02)
    assert flux_counts["vae_512"] / T == pytest.approx(1.12, rel=0.02)


def test_wan_counts_at_the_real_shape(wan) -> None:
    counted = flops.wan_flops(wan, 81, 480, 832)
    assert counted["vae"] / T == pytest.approx(164, rel=0.02)
    assert counted["umt5"] / T == pytest.approx(2.11, rel=0.02)  # 226 tokens


def test_counts_scale_with_pixels_tokens_and_frames(flux, flux_counts, wan) -> None:
    # convolutions scale with the pixels, the mid-block attention with their square: a quarter
    # of the pixels costs a little less than a quarter
    assert 0.2 < flux_counts["vae_512"] / flux_counts["vae"] < 0.25
    # the linear layers scale with the tokens, attention with their square
    assert 0.45 < flops.text_encoder_flops(flux["t5"], 256) / flux_counts["t5"] < 0.5
    # Wan's causal VAE encodes the first frame, then 4 at a time
    ratio = (flops.vae_encode_flops(wan["vae"], (41, 64, 96))
             / flops.vae_encode_flops(wan["vae"], (81, 64, 96)))
    assert 0.45 < ratio < 0.55


def test_counts_are_per_sample_whatever_the_batch(flux) -> None:
    vae, t5 = flux["vae"], flux["t5"]
    # per sample, whatever the batch
    assert flops.vae_encode_flops(vae, (256, 256), batch=3) == flops.vae_encode_flops(
        vae, (256, 256))
    assert flops.text_encoder_flops(t5, 64, batch=2) == flops.text_encoder_flops(t5, 64)
    assert flops.count_flops(lambda: vae.encode(torch.zeros(2, 3, 64, 64, device="meta"))) == (
        2 * flops.vae_encode_flops(vae, (64, 64)))


def test_the_meta_count_is_what_the_loaded_model_runs(tiny_flux, tiny_wan) -> None:
    """Loaded models (on the CPU) are counted on a meta copy, left as they were, and the count
    equals FlopCounterMode's over a real forward; a folder's configs give the same count."""
    from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKL
    from diffusers.models.autoencoders.autoencoder_kl_wan import AutoencoderKLWan
    from transformers import T5EncoderModel

    vae = AutoencoderKL.from_pretrained(tiny_flux / "vae").eval()
    t5 = T5EncoderModel.from_pretrained(tiny_flux / "text_encoder_2").eval()
    wan_vae = AutoencoderKLWan.from_pretrained(tiny_wan / "vae").eval()
    counted = flops.vae_encode_flops(vae, (64, 64))
    assert counted == flops.count_flops(lambda: vae.encode(torch.zeros(1, 3, 64, 64)))
    assert counted == flops.flux_flops(flops.meta_encoders(tiny_flux, "flux"), 64, 32)["vae"]
    assert flops.text_encoder_flops(t5, 32) == flops.count_flops(
        lambda: t5(torch.zeros(1, 32, dtype=torch.long)))
    assert flops.vae_encode_flops(wan_vae, (9, 48, 80)) == flops.count_flops(
        lambda: wan_vae.encode(torch.zeros(1, 3, 9, 48, 80))) == flops.wan_flops(
        flops.meta_encoders(tiny_wan, "wan"), 9, 48, 80)["vae"]
    for model in (vae, t5, wan_vae):
        assert all(p.device.type == "cpu" for p in model.parameters())


@pytest.mark.parametrize(("name", "peak"), [
    ("NVIDIA H100 80GB HBM3", 989), ("NVIDIA H100 PCIe", 756), ("NVIDIA H200", 989),
    ("NVIDIA B200", 2250)])
def test_the_peak_is_the_devices(bench, name: str, peak: float) -> None:
    assert bench.peak_tflops(name, None) == peak
    assert bench.peak_tflops(name, 500.0) == 500.0  # --peak-tflops wins


@pytest.mark.parametrize("name", ["NVIDIA H100 NVL", "NVIDIA H200 NVL", "NVIDIA GH200 480GB",
                                  "NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"])
def test_an_unknown_device_needs_peak_tflops(bench, name: str) -> None:
    with pytest.raises(SystemExit) as refused:
        bench.peak_tflops(name, None)
    message = str(refused.value.code)
    assert "\n" not in message and name in message and "--peak-tflops" in message
    assert bench.peak_tflops(name, 835.0) == 835.0


def test_peak_tflops_values(bench) -> None:
    assert bench.tflops_arg("989") == 989.0
    assert bench.tflops_arg("0.5") == 0.5
    for bad in ("0", "-3", "abc", "nan", "inf", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="positive number of TFLOP/s"):
            bench.tflops_arg(bad)


def test_mfu_is_flops_per_second_over_the_peak(bench, monkeypatch) -> None:
    monkeypatch.setattr(bench, "PEAK", 989.0)
    per_image = {"vae": 4.88e12, "t5": 4.84e12, "clip": 0.0133e12}
    assert bench.whole_mfu(18.6, per_image) == pytest.approx(18.6 * 9.7333 / 989, abs=1e-4)
    assert bench.whole_mfu(18.6, None) is None
    monkeypatch.setattr(bench, "PEAK", None)
    assert bench.whole_mfu(18.6, per_image) is None


def test_deadline_skips_what_would_start_past_it(bench, monkeypatch) -> None:
    monkeypatch.setattr(bench, "STARTED", time.perf_counter() - 100)
    assert bench.overdue(None) is None and bench.overdue(1000) is None
    assert bench.overdue(50) == "skipped: 100 s passed, past --deadline 50"


def test_encoder_times_wrap_and_unwrap(bench) -> None:
    """Each wrapped call is timed once and returns what it returned; unwrapping leaves no
    attribute on the model (which would hold it in a reference cycle)."""
    model = torch.nn.Linear(8, 8)
    x = torch.ones(2, 8)
    expected = model(x)
    times = bench.EncoderTimes("cpu")
    times.wrap("linear", model, "forward")
    assert torch.equal(model(x), expected)
    model(x)
    assert len(times.calls["linear"]) == 2 and times.ms_per_call()["linear"] >= 0
    times.unwrap()
    assert "forward" not in vars(model)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_encoder_times_read_cuda_events(bench) -> None:
    model = torch.nn.Linear(4096, 4096, device="cuda")
    x = torch.ones(4096, 4096, device="cuda")
    times = bench.EncoderTimes("cuda")
    times.wrap("linear", model, "forward")
    for _ in range(3):
        model(x)
    ms = times.ms_per_call()["linear"]
    times.unwrap()
    assert ms > 0 and len(times.calls["linear"]) == 3


def test_bench_options(tmp_path) -> None:
    shown = subprocess.run([sys.executable, str(BENCH), "--help"], capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "--peak-tflops" in shown.stdout
    assert "H100 SXM 989" in shown.stdout and "B200 2250" in shown.stdout
    refused = subprocess.run([sys.executable, str(BENCH), "--peak-tflops", "lots", "--work",
                              str(tmp_path / "w")], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "argument --peak-tflops: must be a positive number of TFLOP/s, not 'lots'" in (
        refused.stderr)
    assert "Traceback" not in refused.stderr and not (tmp_path / "w").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")
def test_bench_on_cuda_without_a_gpu_says_so(tmp_path) -> None:
    refused = subprocess.run([sys.executable, str(BENCH), "--work", str(tmp_path / "w")],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1
    assert refused.stderr.strip() == ("encode_gpu.py: --device cuda but no CUDA device is "
                                      "visible; run it on a GPU machine, or with --device cpu.")
    assert not (tmp_path / "w").exists()
