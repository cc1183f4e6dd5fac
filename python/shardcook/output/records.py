"""How a run's records (manifest.json, report.json, the unit markers) are written: one JSON
text, the same bytes in a local folder and in a bucket."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from shardcook.errors import DatasetError
from shardcook.layouts.names import is_shard_path


def recorded_shards(read_manifest: Callable[[], dict[str, Any] | None],
                    markers: Iterable[dict[str, Any] | None]) -> set[str]:
    """The shards an earlier run's manifest (`read_manifest`) or unit `markers` name."""
    try:
        manifest = read_manifest()
    except DatasetError:
        manifest = None  # damaged: the markers still name every finished unit's shard
    names = set((manifest or {}).get("shards") or {})
    names.update(m["shard"] for m in markers if m is not None and isinstance(m.get("shard"), str))
    return {n for n in names if is_shard_path(n)}


def record_json(obj: Any) -> str:
    """`obj` as a record's text: indented JSON, non-ASCII characters as they are."""
    return json.dumps(obj, indent=2, ensure_ascii=False)
