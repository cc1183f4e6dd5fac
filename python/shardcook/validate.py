"""Proves a dataset whole: metadata present and consistent with a fresh Rust scan of every shard,
unique keys, splits that exist, and samples that load through Energon's own Python API."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from shardcook import _native
from shardcook.errors import DatasetError, ShardcookError
from shardcook.finalize import FINALIZE_RECORD, META, OURS, list_shards
from shardcook.inspect import DatasetSummary, read_metadata, summarize
from shardcook.tensorinfo import tensor_info

log = logging.getLogger(__name__)

#: The parts every sample of an encoding must have (FORMAT.md §3); a tuple means one of them.
REQUIRED_PARTS: dict[str, list[str | tuple[str, ...]]] = {
    "preencoded": [
        "latents.pth",
        "prompt_embeds.pth",
        "pooled_prompt_embeds.pth",
        "caption.txt",
        "meta.json",
    ],
    "raw": [("jpg", "png", "webp"), "txt", "meta.json"],
    "chatml": [("image.jpg", "image.png", "jpgs"), "conversation.json"],
}


@dataclass
class ValidationReport:
    """`ok` is True when no problem was found; each problem is one sentence."""

    directory: str
    problems: list[str] = field(default_factory=list)
    summary: DatasetSummary | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "ok": self.ok,
            "problems": self.problems,
            "warnings": self.warnings,
            "summary": self.summary.to_dict() if self.summary else None,
        }


def missing_parts(parts: set[str] | dict, encoding: str | None) -> list[str]:
    """The required parts of `encoding` that a sample lacks."""
    missing = []
    for need in REQUIRED_PARTS.get(encoding or "", []):
        options = need if isinstance(need, tuple) else (need,)
        if not any(o in parts for o in options):
            missing.append("|".join(options))
    return missing


def _excluded_patterns(root: Path) -> list[str]:
    record = root / OURS / FINALIZE_RECORD
    try:
        return list(json.loads(record.read_text()).get("exclude") or [])
    except (OSError, ValueError):
        return []


def _check_metadata_files(root: Path, problems: list[str]) -> None:
    meta = root / META
    for name in ("dataset.yaml", "split.yaml"):
        path = meta / name
        if not path.is_file():
            problems.append(f"{META}/{name} is missing; run `shardcook finalize --force {root}`")
            continue
        try:
            loaded = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            problems.append(f"{META}/{name} is not valid YAML ({e})")
            continue
        key = "__class__" if name == "dataset.yaml" else "split_parts"
        if not isinstance(loaded, dict) or key not in loaded:
            problems.append(
                f"{META}/{name} has no {key!r}; run `shardcook finalize --force {root}`"
            )


def _load_one_per_split(
    root: Path, splits: dict[str, list[str]], encoding: str | None
) -> list[str]:
    """Loads the first sample of each non-empty split through Energon, raw bytes only (no
    unpickling), and checks it has the parts its encoding needs."""
    from megatron.energon import (
        Cooker,
        DefaultTaskEncoder,
        Sample,
        WorkerConfig,
        basic_sample_keys,
        get_loader,
        get_val_dataset,
        reraise_exception,
        stateless,
    )
    from megatron.energon.edataclass import edataclass

    @edataclass
    class PartNames(Sample):
        parts: list

    @stateless
    def cook(crude: dict) -> PartNames:
        names = [k for k in crude if not k.startswith("__")]
        return PartNames(**basic_sample_keys(crude), parts=names)

    class PartNamesEncoder(DefaultTaskEncoder):
        decoder = None
        cookers = [Cooker(cook)]  # noqa: RUF012 (Energon's declaration style)

        def batch(self, samples):
            return samples

    problems = []
    for split, shards in splits.items():
        if not shards:
            continue
        config = WorkerConfig(
            rank=0, world_size=1, num_workers=0, global_error_handler=reraise_exception
        )
        try:
            # Energon prints each failure before its handler re-raises it; keep that off stdout.
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*pin_memory.*")
                dataset = get_val_dataset(
                    root,
                    split_part=split,
                    worker_config=config,
                    batch_size=1,
                    task_encoder=PartNamesEncoder(),
                )
                sample = next(iter(get_loader(dataset)))[0]
        except Exception as e:  # noqa: BLE001 (any failure inside Energon is the finding)
            problems.append(f"Energon cannot load the {split} split: {type(e).__name__}: {e}")
            continue
        missing = missing_parts(set(sample.parts), encoding)
        if missing:
            problems.append(
                f"sample {sample.__key__} of the {split} split lacks the {encoding} part(s) "
                f"{', '.join(missing)}"
            )
    return problems


def _unimportable_sample_class(dataset: dict) -> str | None:
    """`module.Class` of dataset.yaml's sample class when its module cannot be imported here
    (e.g. Megatron-Bridge's ChatMLWebdataset without Megatron-Bridge installed), else None."""
    import importlib.util

    module = dataset.get("__module__") or "megatron.energon"
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{module}.{dataset.get('__class__')}"


def _first_sample_per_split(
    root: Path, splits: dict[str, list[str]], encoding: str | None
) -> list[str]:
    """Reads the first sample of each non-empty split with our reader and checks its parts."""
    problems = []
    for split, shards in splits.items():
        if not shards:
            continue
        try:
            key, parts = next(iter(_native.read_shard(root / shards[0])))
        except (ShardcookError, StopIteration) as e:
            problems.append(f"cannot read the first sample of the {split} split: {e}")
            continue
        missing = missing_parts(parts, encoding)
        if missing:
            problems.append(
                f"sample {key} of the {split} split lacks the {encoding} part(s) "
                f"{', '.join(missing)}"
            )
    return problems


def _deep_check(root: Path, shards: list[str], encoding: str | None) -> list[str]:
    """Reads every sample: required parts present and every tensor part loadable."""
    problems = []
    for shard in shards:
        try:
            for key, parts in _native.read_shard(root / shard):
                missing = missing_parts(parts, encoding)
                if missing:
                    problems.append(f"{shard}: sample {key} lacks {', '.join(missing)}")
                for name, data in parts.items():
                    if name.endswith(".pth") and tensor_info(data, name) is None:
                        problems.append(
                            f"{shard}: sample {key} part {name} is not a plain saved tensor"
                        )
        except ShardcookError as e:
            problems.append(str(e))
    return problems


def validate(
    directory: str | Path, *, encoding: str | None = None, deep: bool = False
) -> ValidationReport:
    """Checks a finalized dataset and summarizes it.

    Args:
        directory: The dataset folder.
        encoding: `preencoded` or `raw` (default: the dataset.yaml subflavor); decides which
            parts every sample must have.
        deep: Read every sample, not only one per split.

    Returns:
        A report; `report.ok` is False when any problem was found.
    """
    root = Path(directory)
    report = ValidationReport(str(root))
    problems = report.problems
    if not root.is_dir():
        problems.append(f"{root} is not a folder")
        return report
    try:
        counts, splits, dataset = read_metadata(root)
    except DatasetError as e:
        problems.append(str(e))
        return report
    _check_metadata_files(root, problems)
    encoding = encoding or (dataset.get("subflavors") or {}).get("encoding")
    if encoding is None and dataset.get("__class__") == "ChatMLWebdataset":
        encoding = "chatml"

    present = set(list_shards(root, _excluded_patterns(root)))
    listed = [s for s in counts if (root / s).is_file()]
    problems += [
        f"shard {s} is listed in .info.json but missing"
        for s in counts
        if s not in present and not (root / s).is_file()
    ]
    problems += [
        f"shard {s} is not listed in .info.json; run `shardcook finalize --force {root}` to index it"
        for s in sorted(present - set(counts))
    ]
    reports, dataset_problems = _native.verify_shards(root, [(s, counts[s]) for s in listed])
    for _, _, shard_problems in reports:
        problems += shard_problems
    problems += dataset_problems
    for split, shards in splits.items():
        unknown = [s for s in shards if s not in counts]
        if unknown:
            problems.append(
                f"split {split} names {len(unknown)} shard(s) not in .info.json, e.g. {unknown[0]}"
            )

    report.summary = summarize(root, counts, splits, dataset)
    if not problems:
        # Only a structurally sound dataset is worth handing to Energon.
        missing_class = _unimportable_sample_class(dataset)
        if missing_class is None and encoding != "chatml":
            problems += _load_one_per_split(root, splits, encoding)
        else:  # our part-name cooker cannot run on a sample class such as Bridge's ChatML
            why = (
                f"the sample class {missing_class} is not importable here"
                if missing_class
                else "ChatML samples are Megatron-Bridge's class, not checked part by part"
            )
            report.warnings.append(
                f"Energon's load check was skipped: {why}; each split's first sample was read "
                "with shardcook's reader"
            )
            problems += _first_sample_per_split(root, splits, encoding)
        if deep:
            problems += _deep_check(root, listed, encoding)
    return report
