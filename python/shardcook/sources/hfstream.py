"""`--hf-streaming`: a Hugging Face dataset's parquet files read in place, one row group at a
time, instead of downloaded whole and converted to Arrow cache files first.

The files are the ones `datasets` itself would load for the split (hub repositories through
`hf://`, local folders and files), in the same order, so the rows and their values are the same
as a non-streaming load's: each row group is decoded with the dataset's features exactly as a
`datasets.Dataset` formats a slice (`to_pydict`, then `Features.decode_batch`). The row counts
come from the parquet footers, so work units and torchrun ranks cut the rows as they cut a
loaded dataset, and a unit reads only the row groups its rows lie in; one row group is held in
memory at a time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from shardcook.errors import ConfigError
from shardcook.hftoken import redact

if TYPE_CHECKING:
    import pyarrow as pa
    from datasets import Features

__all__ = ["ParquetRows", "stream"]


@dataclass(frozen=True)
class _RowGroup:
    file: int
    index: int
    start: int
    rows: int


@dataclass
class ParquetRows:
    """The rows of a split's parquet files, read on demand, with the few `datasets.Dataset`
    calls `HuggingFaceSource` makes (`features`, `select_columns`, `cast_column`, `len`, slices).
    """

    files: list[str]
    features: Features
    groups: list[_RowGroup]
    token: str | None = None
    _starts: list[int] = field(default_factory=list)
    _cached: tuple[_RowGroup, pa.Table] | None = None

    def __post_init__(self) -> None:
        self._starts = [g.start for g in self.groups]

    def __len__(self) -> int:
        return self.groups[-1].start + self.groups[-1].rows if self.groups else 0

    def select_columns(self, columns: list[str]) -> ParquetRows:
        from datasets import Features

        return replace(self, features=Features({c: self.features[c] for c in columns}),
                       _cached=None)

    def cast_column(self, column: str, feature: Any) -> ParquetRows:
        from datasets import Features

        return replace(self, features=Features({**self.features, column: feature}), _cached=None)

    def __getitem__(self, rows: slice) -> dict[str, list[Any]]:
        import pyarrow as pa

        start, stop, _ = rows.indices(len(self))
        pieces = []
        g = bisect.bisect_right(self._starts, start) - 1
        while start < stop:
            group = self.groups[g]
            table = self._group(group)
            n = min(stop, group.start + group.rows) - start
            pieces.append(table.slice(start - group.start, n))
            start, g = start + n, g + 1
        batch = pa.concat_tables(pieces).to_pydict() if pieces else {
            c: [] for c in self.features}
        return self.features.decode_batch(batch)  # type: ignore[no-any-return]

    def _group(self, group: _RowGroup) -> pa.Table:
        """One row group's columns; the last one read is kept (a unit reads on in order)."""
        if self._cached is not None and self._cached[0] == group:
            return self._cached[1]
        import pyarrow.parquet as pq

        with _open(self.files[group.file], self.token) as f:
            table = pq.ParquetFile(f).read_row_group(group.index, columns=list(self.features))
        self._cached = (group, table)
        return table


def _open(path: str, token: str | None) -> Any:
    import fsspec  # type: ignore[import-untyped]

    fs, inner = fsspec.core.url_to_fs(path, token=token)
    return fs.open(inner, "rb")


def _data_files(name: str, split: str, builder_name: str, data_files: list[str] | None,
                token: str | None) -> list[str]:
    """The parquet files `datasets` would load for `split`, in its order."""
    import datasets

    try:
        builder = datasets.load_dataset_builder(builder_name, data_files=data_files, token=token)
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds, all mean "cannot load"
        first = redact((str(e).splitlines() or [type(e).__name__])[0], token)
        raise ConfigError(f"Hugging Face dataset {name!r} could not be opened for streaming: "
                          f"{first}") from None
    if builder.name != "parquet":
        raise ConfigError(f"--hf-streaming reads parquet files, and {name!r} is not stored as "
                          "parquet; drop --hf-streaming to load it.")
    by_split = {str(k): list(v) for k, v in (builder.config.data_files or {}).items()}
    if split not in by_split:
        raise ConfigError(f"Dataset {name!r} has no split {split!r} (it has "
                          f"{', '.join(by_split) or 'none'}); check --hf-split.")
    return by_split[split]


def stream(name: str, split: str, builder: str, data_files: list[str] | None = None, *,
           token: str | None = None) -> ParquetRows:
    """The rows of split `split` of dataset `name` (`builder` and `data_files` as
    `datasets.load_dataset_builder` takes them), read from its parquet files as they are needed
    (the footers are read now, for the row counts and the features)."""
    import pyarrow.parquet as pq
    from datasets import Features

    files = _data_files(name, split, builder, data_files, token)
    groups: list[_RowGroup] = []
    features: Features | None = None
    start = 0
    for n, path in enumerate(files):
        try:
            with _open(path, token) as f:
                parquet = pq.ParquetFile(f)
                meta = parquet.metadata
                if features is None:
                    features = Features.from_arrow_schema(parquet.schema_arrow)
        except Exception as e:  # noqa: BLE001 - not parquet, unreadable: one sentence
            raise ConfigError(
                f"Parquet file {path!r} of {name!r} cannot be read "
                f"({redact(str(e).splitlines()[0] if str(e) else type(e).__name__, token)}).",
            ) from None
        for i in range(meta.num_row_groups):
            rows = meta.row_group(i).num_rows
            if rows:
                groups.append(_RowGroup(n, i, start, rows))
                start += rows
    if features is None:
        raise ConfigError(f"Hugging Face dataset {name!r} split {split!r} has no parquet files.")
    return ParquetRows(files, features, groups, token)
