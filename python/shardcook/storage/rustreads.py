"""Many ranged reads at once on the Multi-Storage Client's Rust client, for a profile that turns
it on (`rust_client` in its storage provider's options): each chain of reads (a tar's header walk)
is a task on one event loop in a thread of its own, awaiting the client the profile configured
(its credentials, endpoint, retries), its errors translated as MSC's own read translates them.
MSC's own `read` on that client starts an event loop per call in the calling thread; awaiting it
directly costs a fraction of the CPU per read, which is what a walk of one small read per sample
spends its time on."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from shardcook.runtime import waits
from shardcook.storage.msc import provider_of

__all__ = ["RustReads"]

_T = TypeVar("_T")


class RustReads:
    """Tasks on one event loop, at most `at_once` running, reading through `rust` (MSC's
    `RustClient`) the objects `key_of` names (bucket, key); `failed` is the client's error as
    MSC says it."""

    def __init__(self, rust: Any, key_of: Callable[[str], tuple[str, str]],
                 failed: Callable[[Exception, str, str], Exception], at_once: int) -> None:
        self._rust = rust
        self._key_of = key_of
        self._failed = failed
        self._at_once = at_once
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="shardcook-rust-reads")
        self._thread.start()
        self._slots = waits.result(asyncio.run_coroutine_threadsafe(self._semaphore(), self._loop))
        self._futures: list[Future[Any]] = []

    async def _semaphore(self) -> asyncio.Semaphore:
        return asyncio.Semaphore(self._at_once)

    @classmethod
    def of(cls, client: Any, path_of: Callable[[str], str], at_once: int) -> RustReads | None:
        """Reads on MSC storage client `client` of the objects whose paths on it `path_of`
        gives, when its profile has the Rust client on a single store with no metadata provider
        (no path mapping to honour: `msc.provider_of`); None otherwise."""
        provider = provider_of(client)
        rust = provider.rust if provider is not None else None
        if provider is None or rust is None:
            return None

        @functools.cache  # a walk reads its object once per sample: resolve its name once
        def key_of(name: str) -> tuple[str, str]:
            return provider.bucket_key(path_of(name))

        return cls(rust, key_of, provider.translated, at_once)

    async def read_range(self, name: str, offset: int, size: int) -> bytes:
        """`size` bytes of object `name` from `offset` (one ranged GET).

        Raises:
            Exception: what MSC's own read raises for the client's error (FileNotFoundError
                for no such object, PermissionError for a refusal, ...).
        """
        from multistorageclient.types import Range

        bucket, key = self._key_of(name)
        try:
            return bytes(await self._rust.get(key, Range(offset=offset, size=size)))
        except Exception as e:  # noqa: BLE001 - said as MSC says it
            raise self._failed(e, bucket, key) from None

    def submit(self, work: Callable[[], Awaitable[_T]]) -> Future[_T]:
        """Runs `work()` on the loop once fewer than `at_once` tasks run."""
        async def limited() -> _T:
            async with self._slots:
                return await work()

        future = asyncio.run_coroutine_threadsafe(limited(), self._loop)
        self._futures.append(future)
        return future

    def close(self) -> None:
        """Cancels what has not finished, waits for it to stop, and ends the loop."""
        for future in self._futures:
            future.cancel()

        async def settle() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            await asyncio.gather(*tasks, return_exceptions=True)

        waits.result(asyncio.run_coroutine_threadsafe(settle(), self._loop))
        self._loop.call_soon_threadsafe(self._loop.stop)
        waits.join(self._thread)
        self._loop.close()
