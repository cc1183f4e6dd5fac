"""Writing Energon MetadatasetV2 files that blend datasets by weight (`shardcook blend`)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shardcook.dataset import metadata
from shardcook.errors import ConfigError, DatasetError
from shardcook.layouts.names import INFO_JSON, META_DIR

__all__ = ["BlendEntry", "parse_blend_entry", "write_blend"]


@dataclass(frozen=True)
class BlendEntry:
    """One dataset of a blend and its sampling weight.

    Attributes:
        path: A prepared dataset folder or another metadataset `.yaml`.
        weight: Relative sampling weight (> 0); weights need not sum to 1.
    """

    path: Path
    weight: float = 1.0


def parse_blend_entry(spec: str) -> BlendEntry:
    """Parses `PATH=WEIGHT` (or a bare `PATH`, weight 1) into a `BlendEntry`.

    The split is at the last `=`, so paths may contain `=`.

    Raises:
        ConfigError: The weight is not a positive finite number.
    """
    path, sep, weight_text = spec.rpartition("=")
    if not sep:
        return BlendEntry(Path(spec), 1.0)
    try:
        weight = float(weight_text)
    except ValueError:
        raise ConfigError(
            f"Blend entry {spec!r}: write PATH=WEIGHT with a number as WEIGHT."
        ) from None
    if not (math.isfinite(weight) and weight > 0):
        raise ConfigError(f"Blend entry {spec!r}: the weight must be a positive number.")
    if not path:
        raise ConfigError(f"Blend entry {spec!r}: the path before '=' is empty.")
    return BlendEntry(Path(path), weight)


def _check_dataset(path: Path) -> None:
    if path.is_file() and path.suffix in (".yaml", ".yml"):
        return
    try:
        info = metadata.read_info_json(path)
    except DatasetError as e:
        raise ConfigError(f"{path} is not a usable Energon dataset: {e}") from None
    if info is None:
        raise ConfigError(
            f"{path} is not a prepared Energon dataset (no {META_DIR}/{INFO_JSON}) nor a "
            "metadataset .yaml; run `shardcook finalize` on it first."
        )


def write_blend(
    out: str | Path,
    entries: Sequence[BlendEntry | str],
    *,
    split: str = "train",
    check: bool = True,
) -> Path:
    """Writes a MetadatasetV2 YAML that samples the given datasets by weight.

    Paths are written relative to the YAML's folder (Energon resolves them from there), so the
    file keeps working when the folder tree moves as a whole.

    Args:
        out: The `.yaml` file to write.
        entries: `BlendEntry`s or `PATH=WEIGHT` strings.
        split: The split part the blend defines (and reads from every dataset).
        check: Load the written file with Energon to make sure it is valid.

    Returns:
        The path written.

    Raises:
        ConfigError: No entries, a bad entry, a path that is not a dataset, or `out` not `.yaml`.

    Example:
        >>> write_blend("mix.yaml", ["data/laion=0.7", "data/cc12m=0.3"])
    """
    import yaml

    out = Path(out)
    if out.suffix != ".yaml":
        raise ConfigError(f"{out}: the blend file must end in .yaml (Energon requires it).")
    parsed = [parse_blend_entry(e) if isinstance(e, str) else e for e in entries]
    if not parsed:
        raise ConfigError("Give at least one PATH=WEIGHT to blend.")
    base = out.resolve().parent
    blend = []
    for entry in parsed:
        target = entry.path.resolve()
        _check_dataset(target)
        if not (math.isfinite(entry.weight) and entry.weight > 0):
            raise ConfigError(f"{entry.path}: the weight must be a positive number.")
        blend.append({"path": os.path.relpath(target, base), "weight": float(entry.weight)})
    doc = {
        "__module__": "megatron.energon",
        "__class__": "MetadatasetV2",
        "splits": {split: {"blend": blend}},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    os.replace(tmp, out)
    if check:
        from megatron.energon import load_dataset

        try:
            load_dataset(str(out))
        except Exception as e:
            raise ConfigError(f"Energon cannot load the blend written to {out}: {e}") from e
    return out
