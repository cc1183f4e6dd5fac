"""Media metadata as Energon records it: which files, one file's row, the rows of a dataset's
shards, a run's per-shard records, the tables in index.sqlite, and `prepare-media`."""
