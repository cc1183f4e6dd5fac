"""What a dataset argument is, decided here once for every command that takes one (`finalize`,
`validate`, `info`, `preview`, `report`, `blend` and the loader): a JSONL
file (a path or URL whose name ends in `.jsonl`), a NeMo AutoModel diffusion cache (a folder,
or its URL, holding `metadata.json` and no `.nv-meta/`), else an Energon dataset (a folder of
shards with `.nv-meta/`, or its URL), whose own reader says in one sentence when it is none."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from shardcook.dataset.jsonl import file as jsonl
from shardcook.errors import ConfigError
from shardcook.layouts.automodel import METADATA_FILE
from shardcook.layouts.names import META_DIR
from shardcook.storage.location import Location, locate
from shardcook.storage.store import Store

ENERGON: Literal["energon"] = "energon"
JSONL: Literal["jsonl"] = "jsonl"
AUTOMODEL_CACHE: Literal["automodel_cache"] = "automodel_cache"


@dataclass(frozen=True)
class DatasetKind:
    """A dataset argument, located, and what it is.

    Attributes:
        kind: `ENERGON`, `JSONL` or `AUTOMODEL_CACHE`.
        location: Where it is.
        records: The JSONL file, for `JSONL`.
    """

    kind: Literal["energon", "jsonl", "automodel_cache"]
    location: Location
    records: jsonl.JsonlFile | None = None

    def refuse_cache(self, command: str) -> None:
        """Refuses an AutoModel cache, in one sentence, for a `command` that works on Energon
        datasets.

        Raises:
            ConfigError: this is an AutoModel cache.
        """
        if self.kind == AUTOMODEL_CACHE:
            raise ConfigError(
                f"{self.location} is a NeMo AutoModel cache, which AutoModel's dataloader reads "
                f"as it is; {command} takes a folder of tar shards, and `shardcook validate` and "
                f"`info` take {self.location}.")


def dataset_kind(value: str | os.PathLike[str] | Location) -> DatasetKind:
    """What `value` is (reading at most two names of its folder).

    Raises:
        ConfigError: a bad path or a URL no client can open.
    """
    location = locate(value, "The dataset folder")
    records = jsonl.jsonl_file(location)
    if records is not None:
        return DatasetKind(JSONL, location, records)
    if _holds_cache(location.store):
        return DatasetKind(AUTOMODEL_CACHE, location)
    return DatasetKind(ENERGON, location)


def _holds_cache(store: Store) -> bool:
    """Whether the folder `store` holds an AutoModel cache: its `metadata.json` (an Energon
    dataset's metadata lives in `.nv-meta/`, a run's in `.shardcook/`) and no `.nv-meta/`
    folder. A store that cannot be read is taken for an Energon dataset, whose view then says
    why in one sentence."""
    try:
        return store.exists(METADATA_FILE) and store.what_is(META_DIR) != "folder"
    except Exception:  # noqa: BLE001 - the view's listing says what is wrong
        return False
