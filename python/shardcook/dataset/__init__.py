"""Everything done to a finished folder of shards: index it (`build_index`), make it an Energon
dataset (`finalize`), prove it whole (`validate`) and describe it (`info`). Its metadata files are
read and written only by `metadata`; the rules of each layout come from `shardcook.layouts`."""

from shardcook.dataset.check.validate import ValidationReport, validate
from shardcook.dataset.check.verdict import validate_energon_dataset
from shardcook.dataset.finalize import FinalizeResult, finalize
from shardcook.dataset.index.build import IndexResult, build_index, list_shards
from shardcook.dataset.summary import DatasetSummary, info

__all__ = [
    "DatasetSummary",
    "FinalizeResult",
    "IndexResult",
    "ValidationReport",
    "build_index",
    "finalize",
    "info",
    "list_shards",
    "validate",
    "validate_energon_dataset",
]
