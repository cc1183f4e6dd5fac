"""Errors raised by the loader side (`shardcook.energon`), rooted at `ShardcookError`."""

from shardcook.errors import ErrorKind, ShardcookError

__all__ = [
    "EmptyLoaderError",
    "LoaderStateError",
    "NotCheckpointableError",
    "SampleDecodeError",
    "UnsafeSampleError",
]


class SampleDecodeError(ShardcookError, ValueError):
    """A sample's part is missing or its bytes cannot be decoded; the message names the key."""

    kind: ErrorKind = "sample_decode"


class UnsafeSampleError(SampleDecodeError):
    """A `.pth` part holds pickled objects beyond plain tensors; it was refused, never run."""

    kind: ErrorKind = "unsafe_sample"


class EmptyLoaderError(ShardcookError, RuntimeError):
    """A loader yielded no batch in a whole pass, so cycling it would spin forever."""

    kind: ErrorKind = "empty_loader"


class NotCheckpointableError(ShardcookError, TypeError):
    """The wrapped loader has no `save_state_rank`/`restore_state_rank`."""

    kind: ErrorKind = "not_checkpointable"


class LoaderStateError(ShardcookError, ValueError):
    """A state given to `restore_state()` is not one this loader saved or can restore."""

    kind: ErrorKind = "loader_state"
