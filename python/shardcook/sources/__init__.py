"""Input sources: each yields `Item`s lazily in a deterministic order."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardcook.errors import ConfigError
from shardcook.sources.base import Extra, Item, Source

if TYPE_CHECKING:
    from shardcook.config import RunConfig

__all__ = ["Extra", "Item", "Source", "open_source"]


def _single(name: str, one: str | None, several: list[str] | None) -> str | None:
    """One field name for a source that takes one: `one`, or the only entry of `several`."""
    names = [*([one] if one else []), *(several or [])]
    if len(set(names)) > 1:
        raise ConfigError(
            f"A webdataset source takes one {name} (a tar part or json.<path>), not several "
            f"({', '.join(names)}); keep one."
        )
    return names[0] if names else None


def open_source(cfg: RunConfig) -> Source:
    """The source a `RunConfig` names, opened and checked (raises ConfigError on bad setup)."""
    s, f = cfg.source, cfg.data_format
    if s.source_type == "directory":
        from shardcook.sources.caption_index import (
            INDEX_FILES,
            VIDEO_INDEX_FILES,
            CaptionIndexSource,
            find_index,
        )
        from shardcook.sources.directory import IMAGES, VIDEOS, DirectorySource, input_folder

        videos = cfg.video is not None  # the run's model encodes video
        input_dir = input_folder(s.input_location())
        index = find_index(input_dir, VIDEO_INDEX_FILES if videos else INDEX_FILES)
        if index is not None:
            return CaptionIndexSource(input_dir, index, s.max_samples, f.caption_column)
        return DirectorySource(input_dir, s.max_samples, VIDEOS if videos else IMAGES)
    if s.source_type == "huggingface":
        from shardcook.hftoken import resolve_token
        from shardcook.sources.huggingface import HuggingFaceSource

        token, _ = resolve_token(cfg.auth.hf_token_file)
        return HuggingFaceSource(s.location(), s.hf_split, s.data_files(), s.max_samples,
                                 f.image_column, f.caption_column, image_columns=f.image_columns,
                                 caption_columns=f.caption_columns, token=token,
                                 streaming=s.hf_streaming)
    from shardcook.sources.webdataset import IMAGE_PARTS, VIDEO_PARTS, WebDatasetSource

    return WebDatasetSource(s.input_location(), s.max_samples,
                            _single("image column", f.image_column, f.image_columns),
                            _single("caption column", f.caption_column, f.caption_columns),
                            VIDEO_PARTS if cfg.video is not None else IMAGE_PARTS)
