"""Where a dataset command or API call finds its dataset: the one place its argument, a local
folder or a URL (`msc://PROFILE/path`, `s3://bucket/path`), or the `storage.Location` a run
parsed, becomes a `DatasetView`. A local folder is its own view; a dataset in any other store
is fetched (`dataset.fetched.Fetched`) under a scratch folder, removed when the command ends.
A NeMo AutoModel cache is seen the same way (`cache_view`): in place, or copied by
`dataset.cachecopy`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from shardcook.dataset.cachecopy import cache_copy
from shardcook.dataset.cachefolder import Fetched as CacheFetched
from shardcook.dataset.fetched import Fetched
from shardcook.dataset.view import DatasetView
from shardcook.errors import DatasetError, ShardcookError
from shardcook.files import file_kind
from shardcook.storage.local import check_local_path
from shardcook.storage.location import Location, locate

__all__ = ["CacheSeen", "cache_view", "dataset_folder", "dataset_view", "in_place", "readable"]


def in_place(location: Location) -> Path | None:
    """The folder on this machine that `location` is, which a dataset command reads in place
    (it is its own view); None for a store whose files a view fetches under scratch. The one
    place that picks how a dataset is seen: `dataset_view`, `readable` and `cache_view` ask
    here."""
    return location.store.file("")


def dataset_folder(directory: str | os.PathLike[str]) -> Path:
    """`directory` as a Path, once it is known to be a local folder that exists.

    Raises:
        ConfigError: `directory` is a URL.
        DatasetError: it does not exist, or is a file (an image, a shard, a .yaml).
    """
    check_local_path(directory, "The dataset folder")
    root = Path(directory)
    if not root.exists():
        raise DatasetError(f"{root} does not exist; give a dataset folder.")
    if not root.is_dir():
        kind = "a file" if root.is_file() else file_kind(root.stat().st_mode)
        raise DatasetError(f"{root} is {kind}, not a dataset folder; give the folder that holds "
                           "the .tar shards and .nv-meta/.")
    return root


@contextmanager
def dataset_view(value: str | os.PathLike[str] | Location, *,
                 scratch_dir: str | os.PathLike[str] | None = None) -> Iterator[DatasetView]:
    """The view of the dataset `value` names: a local folder that exists, or a URL.

    `scratch_dir` is where a URL's view is built (default: the system's temporary folder); it
    is removed when the block ends. A ShardcookError raised in the block names the URL, not
    the scratch folder.

    Raises:
        ConfigError: a URL no client can open, a bad path.
        DatasetError: the folder or URL holds no dataset folder.
    """
    location = locate(value, "The dataset folder")
    here = in_place(location)
    if here is not None:
        root = dataset_folder(here)
        yield DatasetView(root, str(root))
        return
    with Fetched.open(location.store, scratch_dir=scratch_dir) as fetched:
        view = DatasetView(fetched.root, fetched.name, fetched)
        try:
            yield view
        except ShardcookError as e:
            e.args = tuple(view.shown(a) if isinstance(a, str) else a for a in e.args)
            raise


@contextmanager
def readable(value: str | os.PathLike[str] | Location, *, first_sample_of: str | None = None
             ) -> Iterator[Path]:
    """Where shardcook's own checks read the files of `value` while a client that opens URLs
    itself (Energon) is given `value`: a local path as it is (a dataset folder or a metadataset
    file), or a dataset URL's view (its small files; with `first_sample_of`, the first sample
    of that split too), removed when the block ends.

    Raises:
        ConfigError, DatasetError: as `dataset_view`, for a URL.
    """
    location = locate(value, "The dataset folder")
    here = in_place(location)
    if here is not None:
        yield here
        return
    from shardcook.dataset import metadata

    with dataset_view(location) as view:
        split_yaml = metadata.read_split_yaml(view.root) if first_sample_of else None
        first = (split_yaml.parts.get(first_sample_of or "") or [])[:1] if split_yaml else []
        with view.fetched(first, first_sample=True):
            yield view.root


@dataclass(frozen=True)
class CacheSeen:
    """A NeMo AutoModel cache as the checks, the summary and the report read it: the local
    folder `root` that stands for it, the name it goes by (`name`: the argument as given, or
    the URL), a copy's `fetched` (`CacheCopy.fetched`; None when `root` is the cache itself)
    and `shown`, which names the cache again where a sentence names the copy."""

    root: Path
    name: str
    fetched: CacheFetched | None = None
    shown: Callable[[str], str] = str


@contextmanager
def cache_view(location: Location, scratch_dir: str | os.PathLike[str] | None = None
               ) -> Iterator[CacheSeen]:
    """The cache at `location` seen through a local folder: the folder itself on this machine,
    else `dataset.cachecopy.cache_copy`'s copy under `scratch_dir`, removed when the block
    ends.

    Raises:
        ConfigError: the store cannot be listed.
        DatasetError: an object cannot be downloaded, or scratch cannot be written.
    """
    here = in_place(location)
    if here is not None:
        yield CacheSeen(here, str(location))
        return
    with cache_copy(location.store, scratch_dir) as copy:
        yield CacheSeen(copy.root, copy.url, copy.fetched, copy.shown)
