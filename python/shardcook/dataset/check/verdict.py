"""`validate_energon_dataset`: `validate` as the yes/no answer Primus's function of that name gives,
with each problem logged."""

from __future__ import annotations

import logging
from pathlib import Path

from shardcook.dataset.check.validate import validate

__all__ = ["validate_energon_dataset"]

log = logging.getLogger(__name__)


def validate_energon_dataset(
    output_dir: str | Path, encoding: str | None = None, *, deep: bool = False
) -> bool:
    """Checks a finalized dataset, logging each problem; True when it is whole.

    The counterpart of Primus's `validate_energon_dataset(output_dir, encoding=...)`; unlike it,
    `encoding` defaults to the one the dataset records.

    Args:
        output_dir: The dataset folder.
        encoding: The layout its samples must follow (one of `shardcook.layouts.encodings()`);
            default: what dataset.yaml or the manifest say.
        deep: Read and decode every sample, not only the first of each split.

    Returns:
        True when `validate` found no problem (a missing folder is False).

    Raises:
        ConfigError: `encoding` names no known layout.

    Example:
        >>> ok = validate_energon_dataset("/data/pokemon", encoding="preencoded")
    """
    report = validate(output_dir, encoding=encoding, deep=deep)
    for problem in report.problems:
        log.error("%s: %s", report.directory, problem)
    for warning in report.warnings:
        log.warning("%s: %s", report.directory, warning)
    return report.ok
