"""Datasets in the forms older Energon versions wrote, made from one that today's `energon
prepare` wrote by converting its `.nv-meta` files exactly as those versions wrote them (checked by
running Energon 5.2.0, 6.0.1, 7.0.0 and 7.2.2 on the same shards):

- Energon 5: `.info.yaml` = `yaml.dump({"shard_counts": ...})` (sorted keys, no energon_version),
  `split.yaml` = `yaml.dump` of `{exclude, split_parts}` (sorted keys, every shard listed, no
  brace ranges); no index.sqlite, no index.uuid.
- Energon 6: the same plus index.uuid and an index.sqlite with only a `samples` table (with an
  `id` column) and its key index.
- Energon 7.0: `.info.json` = `json.dump({"shard_counts": ...})` (one line, no energon_version),
  index.sqlite (the same rows; its table schema then had no NOT NULL/UNIQUE) and index.uuid.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import yaml

META = ".nv-meta"


def _counts(root: Path) -> dict[str, int]:
    return json.loads((root / META / ".info.json").read_text())["shard_counts"]


def _old_split_yaml(root: Path) -> None:
    import braceexpand

    current = yaml.safe_load((root / META / "split.yaml").read_text())
    parts = {name: [n for pattern in (names or []) for n in braceexpand.braceexpand(pattern)]
             for name, names in current["split_parts"].items()}
    (root / META / "split.yaml").write_text(
        yaml.dump({"split_parts": parts, "exclude": current.get("exclude") or []}))


def _info_yaml(root: Path) -> None:
    (root / META / ".info.yaml").write_text(yaml.dump({"shard_counts": _counts(root)}))
    (root / META / ".info.json").unlink()


def _energon6_sqlite(root: Path) -> None:
    with sqlite3.connect(root / META / "index.sqlite") as db:
        db.executescript("""
            CREATE TEMP TABLE rows AS SELECT * FROM samples ORDER BY tar_file_id, sample_index;
            DROP TABLE sample_parts;
            DROP TABLE samples;
            CREATE TABLE samples (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                tar_file_id INTEGER,
                sample_key TEXT,
                sample_index INTEGER,
                byte_offset INTEGER,
                byte_size INTEGER
            );
            INSERT INTO samples (tar_file_id, sample_key, sample_index, byte_offset, byte_size)
                SELECT tar_file_id, sample_key, sample_index, byte_offset, byte_size FROM rows;
            CREATE INDEX idx_samples_sample_key ON samples(sample_key);
        """)
    with sqlite3.connect(root / META / "index.sqlite") as db:
        db.execute("VACUUM")


def as_energon5(root: Path) -> Path:
    _old_split_yaml(root)
    _info_yaml(root)
    (root / META / "index.sqlite").unlink()
    (root / META / "index.uuid").unlink()
    return root


def as_energon6(root: Path) -> Path:
    _old_split_yaml(root)
    _info_yaml(root)
    _energon6_sqlite(root)
    return root


def as_energon70(root: Path) -> Path:
    (root / META / ".info.json").write_text(json.dumps({"shard_counts": _counts(root)}))
    return root


def as_energon70_without_uuid(root: Path) -> Path:
    """Energon 7.0's `.info.json` with index.uuid lost (no version leaves it out on its own, but
    a copied `.nv-meta` may)."""
    as_energon70(root)
    (root / META / "index.uuid").unlink()
    return root


FORMS = {"energon5": as_energon5, "energon6": as_energon6, "energon7.0": as_energon70,
         "energon7.0-no-uuid": as_energon70_without_uuid}
