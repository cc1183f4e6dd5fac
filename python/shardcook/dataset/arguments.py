"""The dataset commands' options (finalize, validate, info, preview; blend's in `BlendOptions`),
declared once: the command line is made from these fields (`cli.dataset`), and the Python API's
`finalize` and `build_index` check their arguments against the same fields before anything is read
or written: the command line's parser guarantees the types, a Python caller may not
(`shuffle_seed="x"` used to be recorded in finalize.json, `sqlite="no"` broke the dataset).

A field's `rules` are what the library takes (`field_map` a mapping, which the command line
parses from JSON); a field without rules is checked against its type."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardcook.dataset.media.meta import MediaFilter
from shardcook.fields import RULES, Rule, bounded, check_rules, option, setting, typed
from shardcook.layouts import encodings
from shardcook.layouts.names import DATASET_YAML, INFO_YAML, SPLIT_YAML
from shardcook.storage.location import Location, locate

#: More tiles than this make a sheet too large to look at (and to hold in memory).
MAX_PREVIEW_COUNT = 1024
#: The help of `--scratch-dir` on a dataset command. A run's `--scratch-dir` (`output.scratch_dir`)
#: is another folder: where a run into a bucket stages its shards until they are uploaded.
DATASET_SCRATCH_HELP = (
    "A dataset URL only: the local folder in which the command makes its view of the dataset "
    "(the small files, a few shards at a time, index.sqlite while it is built; removed "
    "afterwards; default: the system temp folder). --tmp-path is the same option under "
    "`energon prepare`'s name.")


def _encoding_help() -> str:
    return f"{', '.join(encodings())} (default: from dataset.yaml or the manifest)."


def _plain_yaml_name(value: Any) -> bool:
    return (isinstance(value, str) and value.endswith(".yaml") and "/" not in value
            and "\\" not in value and not value.startswith(".")
            and value not in (SPLIT_YAML, INFO_YAML))


def _names_to_text(value: Any) -> bool:
    return isinstance(value, Mapping) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items())


@dataclass
class DatasetOptions:
    """The options of finalize, validate, info and preview, and the arguments of the library's
    `finalize`, `build_index`, `validate` and `info` they stand for."""

    encoding: str | None = option(None, _encoding_help)
    split: str | None = option(
        None, "train,val,test ratios by whole shard (default: as recorded, else by "
              "train-/val-/test- shard names, else 1,0,0).",
        rules=[Rule(lambda v: isinstance(v, (str, Sequence)),
                    "train,val,test ratios such as '0.8,0.1,0.1' or (0.8, 0.1, 0.1)")])
    split_parts: list[str] | None = option(
        None, "NAME:PATTERN, repeatable; replaces --split.", flags=("--split-parts",))
    shuffle_seed: int | None = option(None, "Shuffle shards with this seed before cutting splits.")
    shuffle_tars: bool = option(
        False, "Shuffle shards as `energon prepare --shuffle-tars` does before cutting a ratio "
               "split (= --shuffle-seed 42).",
        flags=("--shuffle-tars",))
    # a str is refused by index.compile_excludes, with the fix
    exclude: list[str] | None = option(
        None, "Leave out shards whose path matches, repeatable (default: as recorded).",
        rules=[Rule(lambda v: isinstance(v, Sequence), "a list of patterns")])
    sample_type: str | None = option(
        None, "dataset.yaml's class: CrudeWebdataset, a sample class of megatron.energon such "
              "as CaptioningSample (with --field-map), or module:Class (default: the "
              "encoding's).",
        rules=[Rule(lambda v: isinstance(v, str) and v != "",
                    "a class name ('CrudeWebdataset' or 'module:Class')")])
    field_map: str | None = option(
        None, "JSON object of sample field to part name for a sample class, e.g. "
              '\'{"image": "jpg", "caption": "txt"}\'.',
        rules=[Rule(_names_to_text, "a mapping of field names to part names")])
    subflavors: dict[str, Any] | None = setting(
        None, Rule(lambda v: isinstance(v, Mapping) and all(isinstance(k, str) for k in v),
                   "a mapping with names as keys"))
    force: bool = option(False, "Rebuild an indexed folder, replacing damaged metadata.")
    sqlite: bool = option(True, "Write index.sqlite (key lookups only).",
                          flags=("--sqlite/--no-sqlite",))
    sample_tables: bool = option(
        True, "Write index.sqlite's samples and sample_parts tables; --no-sample-tables writes "
              "the .tar.idx files, .info.json and split.yaml only, keeping any media tables "
              "(Energon's --no-sample-tables, for training-only datasets).",
        flags=("--sample-tables/--no-sample-tables",))
    tar_index_only: bool = option(
        False, "Only rewrite the .tar.idx files and index.sqlite's sample rows (and index.uuid) "
               "of the shards .info.json lists, as `energon prepare --tar-index-only`.",
        flags=("--tar-index-only",))
    fix_duplicates: bool = option(
        False, "Rename every member of every shard in place to <shard path>/<name> when keys "
               "repeat across shards, as `energon prepare --fix-duplicates`.",
        flags=("--fix-duplicates",))
    dataset_yaml_name: str = option(
        DATASET_YAML, "The file in .nv-meta/ to write the dataset config to (a metadataset "
                      "names another one with dataset_config).",
        rules=[Rule(_plain_yaml_name, "a file name ending in .yaml, without a folder, not one "
                                      "of Energon's own files")])
    skip_dataset_yaml: bool = option(
        False, "Write the index only; leave the dataset config as it is (or missing).",
        flags=("--skip-dataset-yaml",))
    validate: bool = option(True, "Validate after indexing.", flags=("--validate/--no-validate",))
    deep: bool = option(False, "Read every sample, not one per split.")
    as_json: bool = option(False, "Print as JSON.", flags=("--json",),
                           help_for={"validate": "Print the report as JSON."})
    scratch_dir: Path | None = option(None, DATASET_SCRATCH_HELP,
                                      flags=("--scratch-dir", "--tmp-path"))
    out: Path | None = option(None, "The PNG to write (default: DIRNAME-preview.png here).")
    count: int = option(16, "How many samples.", rules=[bounded(1, MAX_PREVIEW_COUNT)])
    media_metadata_by_extension: bool = option(
        False, "Record the media metadata (size, format, duration) of image, video and audio "
               "files in index.sqlite, taking them by their extension, as energon prepare does.")
    media_metadata_by_glob: str | None = option(
        None, "As --media-metadata-by-extension, taking the files whose lowercased name "
              "matches one of these comma-separated glob patterns (e.g. '*.jpg,*.png').")
    media_metadata_by_header: bool = option(
        False, "As --media-metadata-by-extension, taking files by their content's header "
               "(then their extension).")
    model_path: str | None = option(
        None, "Encoded datasets: decode latents with this FLUX folder's VAE (or a hub id).")


#: How many samples a report page shows by default, and at most (each is an inline picture: the
#: page stays a few MB).
DEFAULT_REPORT_SAMPLES, MAX_REPORT_SAMPLES = 48, 1000


@dataclass
class ReportOptions:
    """The options of `report` (`htmlreport.write_report`)."""

    out: Path | None = option(
        None, "The .html file to write (default: the dataset's own .shardcook/report.html, "
              "where a run's --report-html writes it).")
    samples: int = option(DEFAULT_REPORT_SAMPLES, "How many samples the page shows.",
                          rules=[bounded(1, MAX_REPORT_SAMPLES)])
    split_part: str | None = option(None, "Show only this split part's samples (default: "
                                          "all).", flags=("--split-part",))
    scratch_dir: Path | None = option(None, DATASET_SCRATCH_HELP)


@dataclass
class BlendOptions:
    """The options of blend (`energon.blend.write_blend`)."""

    split_part: str = option("train", "The split part the blend defines and reads.",
                             flags=("--split-part",))
    force: bool = option(False, "Replace an existing file (never a dataset's own).")
    aux: list[str] | None = option(
        None, "NAME=SOURCE, repeatable: an auxiliary source for each blended dataset that is no "
              "metadataset (a JSONL file, a crude dataset), which cookers receive as their "
              "argument NAME. SOURCE is a folder of files (written as filesystem://), a prepared "
              "dataset, or a URL written as given (filesystem+msc://..., msc://...).")


def check_arguments(**values: Any) -> None:
    """Raises the one sentence (`fields.refusal`) for the first of `values`, arguments named as
    `DatasetOptions`' fields, that its field refuses; None is "not given" unless the type says
    otherwise."""
    fields = {f.name: f for f in dataclasses.fields(DatasetOptions)}
    hints = typing.get_type_hints(DatasetOptions)
    for name, value in values.items():
        if fields[name].metadata.get(RULES):
            check_rules(name, value, fields[name])
        else:
            typed(name, value, hints[name])


def check_index_arguments(split: object, shuffle_seed: object, exclude: object, sqlite: object,
                          force: object, sample_tables: object, tar_index_only: object,
                          fix_duplicates: object) -> None:
    """`build_index`'s arguments (exclude's items and a str as exclude are
    `index.compile_excludes`' to refuse)."""
    check_arguments(split=split, shuffle_seed=shuffle_seed, exclude=exclude, sqlite=sqlite,
                    force=force, sample_tables=sample_tables, tar_index_only=tar_index_only,
                    fix_duplicates=fix_duplicates)


def check_finalize_arguments(directory: object, sample_type: object, field_map: object,
                             subflavors: object, validate: object, dataset_yaml_name: object,
                             skip_dataset_yaml: object) -> Location:
    """The dataset's location, or ConfigError naming the first of finalize's own arguments of
    a wrong type (the rest are `check_index_arguments`')."""
    location = locate(directory, "The dataset folder")
    check_arguments(sample_type=sample_type, field_map=field_map, subflavors=subflavors,
                    validate=validate, dataset_yaml_name=dataset_yaml_name,
                    skip_dataset_yaml=skip_dataset_yaml)
    return location


def media_filter(glob: object, header: object, extension: object) -> MediaFilter | None:
    """The media filter the `media_metadata_by_*` arguments ask for; None when none is given.

    Raises:
        ConfigError: an argument of a wrong type, more than one strategy, no glob pattern.
    """
    check_arguments(media_metadata_by_glob=glob, media_metadata_by_header=header,
                    media_metadata_by_extension=extension)
    return MediaFilter.from_flags(glob if isinstance(glob, str) else None, bool(header),
                                  bool(extension))
