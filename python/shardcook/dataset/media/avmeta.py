"""The metadata Energon 7.4 records for a video or audio file (`AVDecoder.get_metadata` with
the audio's sample count), computed the same way with PyAV so that every value, float artefacts
included, is Energon's: durations from the stream headers (else the last packet's end), frame
counts by demuxing (no decoding), the size of the first decoded frame, and the audio's sample
count by decoding its audio stream."""

from __future__ import annotations

from collections.abc import Iterable
from typing import IO, Any

__all__ = ["av_metadata"]

#: Energon's `AVMetadata` fields, in its dataclass order (the order of the stored JSON).
FIELDS = ("video_duration", "video_num_frames", "video_fps", "video_width", "video_height",
          "audio_duration", "audio_channels", "audio_sample_rate", "audio_num_samples")


def _last_end(items: Iterable[Any]) -> tuple[int, Any]:
    """How many of the packets or frames `items` have a timestamp, and where the last of them
    ends (None when it has no duration)."""
    count, last = 0, None
    for item in items:
        if item.pts is not None:
            count, last = count + 1, item
    return count, None if last is None or last.duration is None else last.pts + last.duration


def _seconds(duration: Any, stream: Any) -> Any:
    """`duration` (in `stream`'s time base, from its start) in seconds, as Energon computes it."""
    if duration is not None:
        if stream.start_time is not None:
            duration -= stream.start_time
        if stream.time_base is not None:
            duration *= float(stream.time_base)
    return duration


def _video(container: Any, found: dict[str, Any]) -> None:
    stream = container.streams.video[0]
    duration, frames = stream.duration, None
    if duration is None:  # not in the header: where the last packet ends
        frames, duration = _last_end(container.demux(video=0))
    duration = _seconds(duration, stream)
    if frames is None:
        frames = _last_end(container.demux(video=0))[0]
    found["video_duration"], found["video_num_frames"] = duration, frames
    if stream.average_rate is not None:
        found["video_fps"] = float(stream.average_rate)
    elif duration is not None:
        found["video_fps"] = frames / duration
    container.seek(0)
    for frame in container.decode(video=0):  # the first frame only
        found["video_width"], found["video_height"] = frame.width, frame.height
        break
    else:
        found["video_width"], found["video_height"] = stream.width, stream.height


def _audio(container: Any, found: dict[str, Any]) -> None:
    stream = container.streams.audio[0]
    found["audio_sample_rate"] = stream.sample_rate
    duration = stream.duration
    samples, last = 0, None
    container.seek(0)
    for frame in container.decode(audio=0):
        if frame.pts is not None:
            last = frame
        samples += frame.samples
    found["audio_num_samples"] = samples
    if last is not None and last.duration is not None:
        duration = last.pts + last.duration
    if duration is None:  # neither the header nor the last frame: where the last packet ends
        container.seek(0)
        duration = _last_end(container.demux(audio=0))[1]
    found["audio_duration"] = _seconds(duration, stream)
    found["audio_channels"] = stream.channels


def av_metadata(stream: IO[bytes]) -> dict[str, Any]:
    """Energon's metadata fields of the video or audio file `stream`, in its order, without
    those it leaves None (PyAV's errors propagate: Energon records no row then)."""
    import av

    found: dict[str, Any] = {}
    with av.open(stream, "r") as container:
        for s in container.streams:  # Energon's containers run no extra threads
            if s.codec_context is not None:
                s.codec_context.thread_type = "NONE"
                s.codec_context.thread_count = 0
        if container.streams.video:
            _video(container, found)
        if container.streams.audio:
            _audio(container, found)
    return {name: found[name] for name in FIELDS if found.get(name) is not None}
