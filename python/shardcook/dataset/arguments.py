"""Type checks of the Python API's `finalize` and `build_index` arguments, before anything is
read or written: the command line's parser guarantees these types, a Python caller may not
(`shuffle_seed="x"` used to be recorded in finalize.json, `sqlite="no"` broke the dataset)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shardcook.errors import ConfigError
from shardcook.storage.location import Location, locate


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_index_arguments(split: object, shuffle_seed: object, exclude: object, sqlite: object,
                          force: object) -> None:
    """Raises ConfigError naming the first argument of a wrong type (exclude's items and a str
    as exclude are `index.compile_excludes`' to refuse)."""
    if shuffle_seed is not None and not _whole(shuffle_seed):
        raise ConfigError(f"shuffle_seed must be a whole number or None, not {shuffle_seed!r}.")
    if split is not None and not isinstance(split, (str, Sequence)):
        raise ConfigError(f"split must be train,val,test ratios such as '0.8,0.1,0.1' or "
                          f"(0.8, 0.1, 0.1), not {split!r}.")
    if exclude is not None and not isinstance(exclude, Sequence):
        raise ConfigError(f"exclude must be a list of patterns, not {exclude!r}.")
    for name, value in (("sqlite", sqlite), ("force", force)):
        if not isinstance(value, bool):
            raise ConfigError(f"{name} must be True or False, not {value!r}.")


def check_finalize_arguments(directory: object, sample_type: object, field_map: object,
                             subflavors: object, validate: object) -> Location:
    """The dataset's location, or ConfigError naming the first of finalize's own arguments of
    a wrong type (the rest are `check_index_arguments`')."""
    location = locate(directory, "The dataset folder")
    if sample_type is not None and not (isinstance(sample_type, str) and sample_type):
        raise ConfigError(f"sample_type must name a class ('CrudeWebdataset' or 'module:Class'), "
                          f"not {sample_type!r}.")
    if field_map is not None and not (isinstance(field_map, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in field_map.items())):
        raise ConfigError(f"field_map must map field names to part names, not {field_map!r}.")
    if subflavors is not None and not (
            isinstance(subflavors, Mapping) and all(isinstance(k, str) for k in subflavors)):
        raise ConfigError(f"subflavors must be a mapping with names as keys, not {subflavors!r}.")
    if not isinstance(validate, bool):
        raise ConfigError(f"validate must be True or False, not {validate!r}.")
    return location
