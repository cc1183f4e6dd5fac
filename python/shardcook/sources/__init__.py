"""Input sources: each yields `Item`s lazily in a deterministic order."""

from __future__ import annotations

from shardcook.sources.base import Extra, Item, Source

__all__ = ["Extra", "Item", "Source", "open_source"]


def open_source(cfg) -> Source:
    """The source a `RunConfig` names, opened and checked (raises ConfigError on bad setup)."""
    s, f = cfg.source, cfg.data_format
    if s.source_type == "directory":
        from shardcook.sources.directory import DirectorySource

        return DirectorySource(s.input_dir, s.max_samples)
    if s.source_type == "huggingface":
        from shardcook.sources.huggingface import HuggingFaceSource

        return HuggingFaceSource(s.hf_dataset, s.hf_split, s.hf_data_files or None, s.max_samples,
                                 f.image_column, f.caption_column)
    from shardcook.sources.webdataset import WebDatasetSource

    return WebDatasetSource(s.input_path, s.max_samples, f.image_column, f.caption_column)
