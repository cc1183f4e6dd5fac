"""The exceptions shardcook raises, all rooted at `ShardcookError`.

The native core raises these same classes, so one ``except ShardcookError`` catches everything.
Each carries a machine-readable `kind` (one of `ErrorKind`) to branch on instead of the message.
"""

from typing import Literal

#: Why an image could not be used or made: `ImageError.kind` and `ImageResult.error_kind`.
ImageErrorKind = Literal[
    "bad_option",  # a mode, filter, size or other image option is wrong
    "bad_input",  # an input is neither bytes nor a path
    "unreadable",  # an input path cannot be read
    "unsupported_format",  # empty bytes, or not a format the core decodes
    "decode_error",  # a known format that cannot be decoded
    "too_large",  # more pixels than max_pixels, or than memory allows
    "too_small",  # too small for the mode
    "encode_error",  # the pixels cannot be resized or encoded
    "internal",  # a bug in the core
]
#: Why an input was skipped: `reason` in report.json's `skipped` and the keys of its
#: `skipped_by_reason` (docs/FORMAT.md, report.json).
SkipReason = Literal[
    # decided by the source
    "missing_image", "missing_caption", "caption_not_utf8", "duplicate_image",
    "duplicate_caption", "bad_index_row", "image_outside_folder", "unsafe_name",
    # chatml's records
    "bad_json", "bad_conversation", "image_count_mismatch", "media_count_mismatch",
    "media_outside_folder",
    # reading the input and the image core (an `ImageErrorKind` other than these is a decode error)
    "unreadable_image", "decode_error", "too_large", "too_small", "encode_error",
    # chatml's video and audio
    "video_count", "video_decode_error", "too_few_frames", "not_mp4",
    "audio_count", "audio_decode_error", "empty_audio", "audio_format",
    # no processor said why (a bug)
    "unknown",
]
#: Every value of `ShardcookError.kind`.
ErrorKind = Literal[
    "error", "io", "shard", "invalid_name", "duplicate_key", "dataset", "config", "sqlite",
    # a tar's bytes that a header walk has not been given yet (never reaches a user)
    "not_fetched",
    ImageErrorKind,
    # `ingest`: a file not downloaded whole, an Arrow file not MLCommons's
    "download", "conversion",
    # the loader side (`shardcook.energon.errors`)
    "sample_decode", "unsafe_sample", "empty_loader", "not_checkpointable", "loader_state",
]


class ShardcookError(Exception):
    """Base of every error shardcook raises."""

    kind: ErrorKind = "error"


class ShardcookIOError(ShardcookError, OSError):
    """A file could not be opened, read or written."""

    kind: ErrorKind = "io"


class ShardError(ShardcookError):
    """A shard's bytes are not a tar we can read: truncated, corrupt, or not a tar at all."""

    kind: ErrorKind = "shard"


class InvalidNameError(ShardcookError, ValueError):
    """A sample key or part name that docs/FORMAT.md forbids."""

    kind: ErrorKind = "invalid_name"


class DuplicateKeyError(ShardcookError):
    """The same sample key occurs twice in one dataset."""

    kind: ErrorKind = "duplicate_key"


class DatasetError(ShardcookError):
    """A dataset folder is not in a state the operation can work with."""

    kind: ErrorKind = "dataset"


class ConfigError(ShardcookError, ValueError):
    """An option or configuration value is wrong; the message says what to change."""

    kind: ErrorKind = "config"


class ImageError(ShardcookError, ValueError):
    """An image option is wrong, or an image cannot be encoded (bad images in a batch are
    reported per item by `shardcook.imaging.preprocess`, with `error_kind`, not raised)."""

    kind: ErrorKind = "bad_option"


class SaidByRankZero:
    """Mixed into the error a rank other than 0 of a process group stops with when the whole run
    stops for one reason, which rank 0 says: the command line then says it once, not once per
    worker (`cli.app.fail`)."""
