"""The run's lock is asked of the store: a folder whose objects are no local files (here a
`MemoryStore`) is held by a lease, as a bucket is, and a local folder by an flock."""

from __future__ import annotations

import json

import pytest
from shardcook.errors import ConfigError
from shardcook.output.flock import Flock
from shardcook.output.lock import Holder, lock_of
from shardcook.storage.local import LocalStore
from shardcook.storage.memory import MemoryStore


def _call(doing, call):
    call()


def test_a_memory_store_is_held_by_a_lease_that_refuses_a_second_run():
    store = MemoryStore("memory://runs")
    me = Holder.this_run()
    first = lock_of(store, "memory://runs")
    first.acquire(me, _call)
    try:
        assert json.loads(store.read(".shardcook/lock.json"))["run_id"] == me.run_id
        with pytest.raises(ConfigError) as refused:
            lock_of(store, "memory://runs").check_free()
        assert str(refused.value).startswith(
            f"Output folder 'memory://runs' is in use by {me.describe()}; wait for it to end")
        first.check_held()
    finally:
        first.release()
    assert not store.exists(".shardcook/lock.json")


def test_a_local_folder_is_held_by_an_flock(tmp_path):
    assert isinstance(lock_of(LocalStore(tmp_path), str(tmp_path)), Flock)
