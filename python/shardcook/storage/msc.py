"""The Multi-Storage Client's private parts shardcook uses, all here: MSC has no public call
for a conditional put (`If-None-Match: *`) nor for its Rust client's own awaitable reads, so
`provider_of(client)` reaches through the storage client to its one store's provider. Where MSC
renames them, `provider_of` finds none and the callers fall back to MSC's public calls (a put
read back, a thread per read); tests/storage/test_msc_internals.py fails naming what moved."""

from __future__ import annotations

from typing import Any

__all__ = ["INTERNALS", "Provider", "provider_of"]

#: The private names used, on what they are read from (for the test that they still exist).
INTERNALS = {
    "StorageClient": ("_delegate",),
    "SingleStorageClient": ("_storage_provider", "_metadata_provider"),
    "S3StorageProvider": ("_rust_client", "_prepend_base_path", "_translate_errors"),
}


class Provider:
    """One store's MSC storage provider, as shardcook asks it."""

    def __init__(self, provider: Any) -> None:
        self._provider = provider

    def put_if_absent(self, path: str, body: bytes) -> bool:
        """Puts `body` at `path` only when nothing is there (False when something was).

        Raises:
            NotImplementedError: the store takes no conditional writes.
        """
        from multistorageclient.types import PreconditionFailedError

        try:
            self._provider.put_object(path, body, if_none_match="*")
        except PreconditionFailedError:
            return False
        return True

    @property
    def rust(self) -> Any | None:
        """MSC's `RustClient` when the profile turns it on (`rust_client`), else None."""
        try:
            from multistorageclient.utils import split_path  # noqa: F401 - `bucket_key`'s
        except ImportError:
            return None
        return getattr(self._provider, "_rust_client", None)

    def bucket_key(self, path: str) -> tuple[str, str]:
        """The bucket and the key `path` (a path on the storage client) is read from, as the
        provider's own GET resolves it: its base path, then the bucket and the key inside it."""
        from multistorageclient.utils import split_path

        bucket, key = split_path(self._provider._prepend_base_path(path))
        return str(bucket), str(key)

    def translated(self, error: Exception, bucket: str, key: str) -> Exception:
        """`error`, raised by the Rust client reading `key`, as MSC's own read says it
        (404: FileNotFoundError, 403: PermissionError ...)."""
        def again() -> None:
            raise error
        try:
            self._provider._translate_errors(again, operation="GET", bucket=bucket, key=key)
        except Exception as said:  # noqa: BLE001 - what MSC raises is the answer
            return said
        return error


def provider_of(client: Any) -> Provider | None:
    """The provider behind MSC storage client `client` when it is one store with no metadata
    provider (no path mapping to honour); None otherwise, or where MSC's parts moved."""
    single = getattr(client, "_delegate", None)
    provider = getattr(single, "_storage_provider", None)
    if provider is None or getattr(single, "_metadata_provider", None) is not None:
        return None
    return Provider(provider)
