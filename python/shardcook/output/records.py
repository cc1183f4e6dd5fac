"""How a run's records (manifest.json, report.json, the unit markers) are written: one JSON
text, the same bytes in a local folder and in a bucket."""

from __future__ import annotations

import json
from typing import Any


def record_json(obj: Any) -> str:
    """`obj` as a record's text: indented JSON, non-ASCII characters as they are."""
    return json.dumps(obj, indent=2, ensure_ascii=False)
