"""Audio inputs: the format, sample rate and duration read from the file's header (soundfile);
the bytes themselves are stored unchanged."""

from __future__ import annotations

import io
from dataclasses import dataclass

from shardcook.media import MediaError

#: soundfile's format names and the extension each is stored under.
EXTENSIONS = {"WAV": "wav", "WAVEX": "wav", "FLAC": "flac", "MP3": "mp3"}


@dataclass(frozen=True)
class AudioInfo:
    """An audio file's header: the extension it is stored under, rate, length."""

    extension: str
    sample_rate: int
    frames: int

    @property
    def duration(self) -> float:
        return self.frames / self.sample_rate

    def record(self) -> dict[str, float | int | str]:
        """The sample JSON's entry for this audio file."""
        return {"format": self.extension, "sample_rate": self.sample_rate,
                "duration": round(self.duration, 6)}


def probe(data: bytes) -> AudioInfo:
    """The header of a wav/flac/mp3 file.

    Raises:
        MediaError: unreadable, another format, or no samples.
    """
    import soundfile

    try:
        info = soundfile.info(io.BytesIO(data))
    except (RuntimeError, soundfile.LibsndfileError, TypeError) as e:
        raise MediaError("audio_decode_error", f"not a readable audio file ({e})") from None
    extension = EXTENSIONS.get(info.format)
    if extension is None:
        raise MediaError("audio_format", f"the audio is {info.format}, not wav, flac or mp3")
    if info.frames <= 0 or info.samplerate <= 0:
        raise MediaError("empty_audio", "the audio file holds no samples")
    return AudioInfo(extension, int(info.samplerate), int(info.frames))
