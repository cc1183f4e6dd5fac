"""The exceptions shardcook raises, all rooted at `ShardcookError`.

The native core raises these same classes, so one ``except ShardcookError`` catches everything.
"""


class ShardcookError(Exception):
    """Base of every error shardcook raises."""


class ShardcookIOError(ShardcookError, OSError):
    """A file could not be opened, read or written."""


class ShardError(ShardcookError):
    """A shard's bytes are not a tar we can read: truncated, corrupt, or not a tar at all."""


class InvalidNameError(ShardcookError, ValueError):
    """A sample key or part name that docs/FORMAT.md forbids."""


class DuplicateKeyError(ShardcookError):
    """The same sample key occurs twice in one dataset."""


class DatasetError(ShardcookError):
    """A dataset folder is not in a state the operation can work with."""


class ConfigError(ShardcookError, ValueError):
    """An option or configuration value is wrong; the message says what to change."""


class ImageError(ShardcookError, ValueError):
    """An image option is wrong, or an image cannot be encoded (bad images in a batch are
    reported per item by `shardcook.imaging.preprocess`, not raised)."""
