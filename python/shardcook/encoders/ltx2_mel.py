"""The log-mel spectrogram LTX-2's audio VAE encodes: 16 kHz audio, a 1024-point Hann-windowed
STFT every 160 samples (centred, reflect-padded), magnitudes (power 1) projected onto 64
slaney-scale, slaney-normalised mel bands from 0 to 8 kHz. It is torchaudio's
`MelSpectrogram(sample_rate=16000, n_fft=1024, hop_length=160, f_max=8000, n_mels=64,
power=1.0, mel_scale="slaney", norm="slaney")` in plain torch, each step in the order AutoModel's
`LTX2MelSpectrogram` takes it, so the cache holds its values bit for bit."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

SAMPLE_RATE = 16000
N_FFT = 1024
HOP = 160
F_MAX = 8000.0
N_MELS = 64
#: The slaney scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
_LINEAR_STEP, _BREAK_HZ, _LOG_STEP = 200.0 / 3, 1000.0, math.log(6.4) / 27.0


def _mel(hz: float) -> float:
    if hz >= _BREAK_HZ:
        return _BREAK_HZ / _LINEAR_STEP + math.log(hz / _BREAK_HZ) / _LOG_STEP
    return hz / _LINEAR_STEP


def _hz(mels: torch.Tensor) -> torch.Tensor:
    import torch

    hz = _LINEAR_STEP * mels
    high = mels >= _BREAK_HZ / _LINEAR_STEP
    hz[high] = _BREAK_HZ * torch.exp(_LOG_STEP * (mels[high] - _BREAK_HZ / _LINEAR_STEP))
    return hz


def mel_filterbank() -> torch.Tensor:
    """[513, 64]: the triangular filters, each scaled to about the same energy."""
    import torch

    freqs = torch.linspace(0, SAMPLE_RATE // 2, N_FFT // 2 + 1)
    edges = _hz(torch.linspace(_mel(0.0), _mel(F_MAX), N_MELS + 2))
    widths = edges[1:] - edges[:-1]
    slopes = edges.unsqueeze(0) - freqs.unsqueeze(1)
    down = (-1.0 * slopes[:, :-2]) / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    bank = torch.max(torch.zeros(1), torch.min(down, up))
    bank *= (2.0 / (edges[2:N_MELS + 2] - edges[:N_MELS])).unsqueeze(0)
    return bank


class MelSpectrogram:
    """Waveforms [..., samples] at 16 kHz -> magnitude mel spectrograms [..., 64, frames],
    `frames = samples // 160 + 1`, on `device`."""

    def __init__(self, device: str) -> None:
        import torch

        self.window = torch.hann_window(N_FFT).to(device)
        self.bank = mel_filterbank().to(device)

    def __call__(self, waveform: torch.Tensor) -> torch.Tensor:
        import torch

        shape = waveform.size()
        spec = torch.stft(waveform.reshape(-1, shape[-1]), n_fft=N_FFT, hop_length=HOP,
                          win_length=N_FFT, window=self.window, center=True, pad_mode="reflect",
                          normalized=False, onesided=True, return_complex=True)
        spec = spec.reshape(shape[:-1] + spec.shape[-2:]).abs()
        return torch.matmul(spec.transpose(-1, -2), self.bank).transpose(-1, -2)
