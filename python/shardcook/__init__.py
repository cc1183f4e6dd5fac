"""shardcook: image+text collections into Megatron-Energon WebDataset shards, and the loaders
that read them back."""

from importlib.metadata import PackageNotFoundError, version

from shardcook.dataset import build_index, finalize, validate, validate_energon_dataset
from shardcook.errors import (
    ConfigError,
    DatasetError,
    DuplicateKeyError,
    InvalidNameError,
    ShardcookError,
    ShardcookIOError,
    ShardError,
)
from shardcook.shards import ShardWriter, count_samples, read_shard

try:
    __version__ = version("shardcook")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0"

__all__ = [
    "ConfigError",
    "DatasetError",
    "DuplicateKeyError",
    "InvalidNameError",
    "ShardError",
    "ShardWriter",
    "ShardcookError",
    "ShardcookIOError",
    "__version__",
    "build_index",
    "count_samples",
    "finalize",
    "read_shard",
    "validate",
    "validate_energon_dataset",
]
