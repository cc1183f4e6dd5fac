"""A resumed run is compared with the earlier one on every option of every section of the
config (`report.compare_manifest`), read from `RunConfig`'s fields, so a section added later is
compared without a list to update (a video run's section was not: its options went unchecked)."""

from __future__ import annotations

import dataclasses

from shardcook.config import RunConfig
from shardcook.config.checks import RUNTIME_ONLY
from shardcook.config.sections import (
    _SECTION_CLASSES,
    AutoModelConfig,
    ChatmlConfig,
    VideoConfig,
)
from shardcook.pipeline.report import compare_manifest


def _manifest(cfg: RunConfig) -> dict:
    return {"encoding": "x", "config": cfg.to_dict(), "num_inputs": 1}


def test_every_option_of_every_section_is_compared():
    """Each option that is not runtime-only, changed alone, is named; the model's options are
    compared through the encoder facts the job records instead (not here)."""
    sections = {f.name for f in dataclasses.fields(RunConfig)} - {"layout", "chosen"}
    assert set(_SECTION_CLASSES) == sections
    def every_section() -> RunConfig:
        return RunConfig(chatml=ChatmlConfig(), video=VideoConfig(), automodel=AutoModelConfig())

    base = every_section()
    # ingest's section is not recorded: its inputs are the manifest's source, the rest how
    # downloads run
    for name, cls in _SECTION_CLASSES.items():
        if name in ("model", "ingest"):
            continue
        for f in dataclasses.fields(cls):
            if f.name in RUNTIME_ONLY:
                continue
            other = every_section()
            value = getattr(getattr(base, name), f.name)
            changed = (not value if isinstance(value, bool) else value + 1
                       if isinstance(value, int | float) else [*value, 0.5]
                       if isinstance(value, list) else f"{value}-other")
            setattr(getattr(other, name), f.name, changed)
            diffs = compare_manifest(_manifest(base), _manifest(other))
            assert len(diffs) == 1 and f.name in diffs[0], (name, f.name, diffs)


def test_a_section_only_one_run_has_is_compared():
    video = RunConfig(video=VideoConfig(height=48, width=80))
    diffs = compare_manifest(_manifest(RunConfig()), _manifest(video))
    assert "height: None -> 48" in diffs and "video_mode: None -> 'video'" in diffs
    diffs = compare_manifest(_manifest(video), _manifest(RunConfig()))
    assert "height: 48 -> None" in diffs
    assert compare_manifest(_manifest(video), _manifest(video)) == []


def test_what_a_finished_run_recorded_of_its_results_is_not_an_option():
    from shardcook.pipeline.report import finish_manifest

    new = _manifest(RunConfig())
    report = {"num_written": 3, "num_skipped": 0, "shards": ["000000.tar"],
              "media_totals": {"images": 3}}
    assert compare_manifest(finish_manifest(new, report), new) == []
    assert compare_manifest(new, {**new, "compile": True}) == ["compile: None -> True"]
