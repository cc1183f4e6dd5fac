"""The Multi-Storage Client's private parts that storage/msc.py reaches (a conditional put, the
Rust client's reads) are still where it looks: an MSC upgrade that moves them fails here, naming
them, instead of silently falling back to slower calls."""

import inspect

import multistorageclient as msc
from multistorageclient.client.single import SingleStorageClient
from multistorageclient.providers.s3 import S3StorageProvider
from shardcook.storage.msc import INTERNALS, provider_of


def _names_of(cls: type) -> set[str]:
    """The attributes `cls` has, its instances' ones too (those its `__init__` sets)."""
    source = "".join(inspect.getsource(c) for c in cls.__mro__ if c is not object)
    return set(dir(cls)) | {n for n in INTERNALS.get(cls.__name__, ()) if f"self.{n}" in source}


def test_the_private_parts_used_are_still_there():
    classes = {"StorageClient": msc.StorageClient, "SingleStorageClient": SingleStorageClient,
               "S3StorageProvider": S3StorageProvider}
    moved = [f"{cls}.{name}" for cls, names in INTERNALS.items() for name in names
             if name not in _names_of(classes[cls])]
    assert not moved, (f"multi-storage-client {msc.__version__} moved {', '.join(moved)}: "
                       "update python/shardcook/storage/msc.py")
    put = inspect.signature(S3StorageProvider.put_object).parameters
    assert "if_none_match" in put, ("S3StorageProvider.put_object takes no if_none_match: "
                                    "update Provider.put_if_absent")


def test_a_resolved_client_has_its_provider(tmp_path):
    client, _ = msc.resolve_storage_client(str(tmp_path))
    provider = provider_of(client)
    assert provider is not None, "storage/msc.py finds no provider behind a resolved client"
    assert provider.rust is None  # a local profile has no Rust client
    assert provider.put_if_absent(str(tmp_path / "a"), b"1")
    assert (tmp_path / "a").read_bytes() == b"1"
