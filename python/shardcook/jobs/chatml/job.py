"""`chatml` as a job on the shared engine: the chat source (`sources/chat.py`), work units per
split, the media processor (`jobs/chatml/media.py`), and the generic finalize with split
parts by shard name and Megatron-Bridge's dataset.yaml (validate runs the layout's checker)."""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from contextlib import AbstractContextManager, nullcontext

from shardcook.config import ChatmlConfig, RunConfig
from shardcook.dataset.media.meta import MediaFilter
from shardcook.dataset.view import DatasetView
from shardcook.errors import ConfigError, DatasetError
from shardcook.jobs.chatml.media import ChatmlProcessor
from shardcook.layouts.chatml import CHATML
from shardcook.layouts.names import split_shard_prefix
from shardcook.output.folder import OutputFolder
from shardcook.pipeline.driver import JobBasics
from shardcook.pipeline.plan import SplitUnit, WorkUnit
from shardcook.pipeline.report import JsonObject
from shardcook.runtime.workers import Place
from shardcook.sources.base import Source
from shardcook.sources.chat import SPLITS, ChatmlSource

log = logging.getLogger(__name__)


def plan_split_units(split_sizes: dict[str, int], shard_size: int) -> list[SplitUnit]:
    """Each split's planned inputs (train, then val, then test, as the source orders them) in
    consecutive units of `shard_size`: unit j of a split becomes `<split>-shard-{j:06d}.tar`
    (Megatron-Bridge's names); units are numbered across the splits for distribution and resume
    markers."""
    units: list[SplitUnit] = []
    start = 0
    for split in SPLITS:
        size = split_sizes.get(split, 0)
        for j, a in enumerate(range(0, size, shard_size)):
            units.append(SplitUnit(len(units), start + a, start + min(a + shard_size, size),
                                   split=split, shard=j))
        start += size
    return units


def val_option(opts: ChatmlConfig) -> str:
    """The option that chose val's samples, for the sentences about an empty split."""
    if opts.train_rows is not None:
        return "--val-rows"
    return "--hf-val-split" if opts.hf_val_split is not None else "--val-fraction"


def finalize_chatml(view: DatasetView, shards: Collection[str], fields: dict[str, str], *,
                    media: MediaFilter | None = None, val_by: str = "--val-fraction",
                    ) -> list[str]:
    """`finalize` of the run's dataset `view` with split parts train/val by the names of the
    run's `shards` and Megatron-Bridge's dataset.yaml; its validation reads each split's first
    sample with the ChatML checker; `media` is the run's media filter; `val_by` the option that
    chose val (`val_option`). Returns the warnings (also logged).

    Raises:
        DatasetError: no shards, or validation found problems.
    """
    from shardcook.dataset.finalize import finalize_run

    patterns = {s: f"{split_shard_prefix(s)}.*" for s in SPLITS
                if any(n.startswith(split_shard_prefix(s)) for n in shards)}
    if "train" not in patterns:
        raise DatasetError(
            f"{view.name} holds no train shard (every sample was skipped or went to val), "
            f"so training would find no data; see report.json for the skips, or lower {val_by}"
        )
    result = finalize_run(view, CHATML, split_parts=patterns, sample_type=CHATML.sample_type,
                          field_map=fields, subflavors={}, media=media)
    new = [f"no sample went to val (see {val_by}); split.yaml has no val part"] if (
        "val" not in patterns) else []
    new += result.validation.warnings if result.validation else []
    for w in new:
        log.warning(w)
    return list(result.index.warnings) + new


class ChatmlJob(JobBasics):
    """`shardcook chatml` as a job; the processor and finalize use what the source found (image
    layout, video layout, audio format)."""

    layout = CHATML
    prefetch = 2
    backend = "gloo"
    manifest_extra: JsonObject | None = None

    def __init__(self, cfg: RunConfig) -> None:
        """Raises ConfigError without the chatml section (its options are checked with the
        config: `config.check_chatml`)."""
        if cfg.chatml is None:
            raise ConfigError("chatml needs the chatml section of the config.")
        self.cfg = cfg
        self.shard_size = cfg.output.shard_size
        self.batch_size = max(16, 4 * (cfg.image.workers or os.cpu_count() or 1))
        self.found: ChatmlSource | None = None

    def running(self, place: Place) -> AbstractContextManager[object]:
        return nullcontext()

    def source(self, cfg: RunConfig, folder: OutputFolder) -> ChatmlSource:
        """Opens and scans the inputs (bad setup raises ConfigError here, before any work)."""
        self.found = ChatmlSource(cfg)
        return self.found

    def units(self, source: Source) -> list[WorkUnit]:
        assert self.found is not None and source is self.found
        return list(plan_split_units(self.found.split_sizes, self.shard_size))

    def processor(self, cfg: RunConfig, folder: OutputFolder, place: Place,
                  units: list[WorkUnit]) -> ChatmlProcessor:
        assert self.found is not None
        s = self.found
        return ChatmlProcessor(cfg, s.images, s.video_layout, s.audio_extension)

    def finalize(self, view: DatasetView, report: JsonObject) -> None:
        assert self.found is not None
        finalize_chatml(view, report["shards"], self.found.field_map(),
                        media=self.cfg.output.media_filter, val_by=val_option(self.found.opts))
