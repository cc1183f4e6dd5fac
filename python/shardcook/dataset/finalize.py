"""`finalize`: make a folder of shards a complete Energon dataset (the index of `build_index`
plus a dataset.yaml for its layout), then `validate` it; `finalize_run` is a run's, handed the
run's dataset view and its `Layout` by the engine."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from shardcook import _native
from shardcook.dataset import metadata
from shardcook.dataset.arguments import check_arguments, check_finalize_arguments, media_filter
from shardcook.dataset.check import trust
from shardcook.dataset.check.validate import ValidationReport, validate_view
from shardcook.dataset.index.build import IndexPlan, IndexResult, plan_index, write_index
from shardcook.dataset.jsonl import file as jsonl
from shardcook.dataset.kind import dataset_kind
from shardcook.dataset.location import dataset_view
from shardcook.dataset.media import records as mediarecords
from shardcook.dataset.media import tables as mediatables
from shardcook.dataset.media.meta import MediaFilter
from shardcook.dataset.sampletype import CLASS_KEYS, check_typed, class_keys
from shardcook.dataset.summary import jsonl_summary
from shardcook.dataset.undo import finish_interrupted, undone_on_failure
from shardcook.dataset.view import DatasetView
from shardcook.errors import ConfigError, DatasetError, ShardcookError
from shardcook.layouts import LAYOUTS, Layout, registry_function
from shardcook.layouts.names import DATASET_YAML, INDEX_SQLITE, META_DIR
from shardcook.storage.location import Location

log = logging.getLogger(__name__)


@dataclass
class FinalizeResult:
    """What `finalize` wrote, the validation of the result (None when skipped), and whether the
    dataset was a JSONL file (its index beside it) rather than a folder of shards."""

    index: IndexResult
    dataset_yaml: dict[str, Any]
    validation: ValidationReport | None
    jsonl: bool = False


def _current_dataset_yaml(root: Path, force: bool, name: str) -> dict[str, Any]:
    """The dataset.yaml (or the config named `name`) already there (empty when missing); a
    damaged one is replaced under `force` (with a warning) and refused otherwise."""
    try:
        current = metadata.read_dataset_yaml(root, name)
    except DatasetError as e:
        if not force:
            raise
        log.warning("%s; writing a new one", e)
        return {}
    return dict(current.content) if current else {}


def dataset_yaml(
    root: Path,
    *,
    layout: Layout | None = None,
    sample_type: str | None = None,
    field_map: Mapping[str, str] | None = None,
    subflavors: Mapping[str, Any] | None = None,
    force: bool = False,
    name: str = DATASET_YAML,
) -> dict[str, Any]:
    """The dataset.yaml content (of `.nv-meta/<name>`): the existing one updated, never losing
    a user's subflavors.

    `sample_type` is `CrudeWebdataset` (the layout's class by default), another class name from
    `megatron.energon` (a Sample class is written under `sample_type:` and needs a field_map, as
    `energon prepare` does), or `module:Class` for a class elsewhere (e.g. Megatron-Bridge's).
    """
    current = _current_dataset_yaml(root, force, name)
    out = dict(current)
    if sample_type is None and "__class__" not in out and "sample_type" not in out:
        sample_type = layout.sample_type if layout else "CrudeWebdataset"
    if sample_type is not None:
        rest = {k: v for k, v in out.items() if k not in CLASS_KEYS}
        out = {**class_keys(sample_type), **rest}
    if field_map is not None:
        out["field_map"] = dict(field_map)
    merged = dict(current.get("subflavors") or {})
    merged.update(subflavors or {})
    if layout is not None and layout.subflavored:
        merged.update(layout.dataset_yaml()["subflavors"])
    if merged or "subflavors" in current or subflavors is not None:
        out["subflavors"] = merged
    check_typed(out)
    return out


def _refuse_untrusted_code(root: Path, content: Mapping[str, Any],
                           sample_type: str | None) -> None:
    """Refuses, before anything is written, a dataset.yaml naming code that validating it would
    make Energon import or run (a module off the allowlist, a Python file)."""
    module = (sample_type or "").rpartition(":")[0]
    if module and not trust.is_trusted(module):
        raise ConfigError(f"sample_type {sample_type!r} names a class outside "
                          f"{', '.join(trust.TRUSTED_PACKAGES)}, which validate will not import; "
                          "name a class of one of them")
    label = f"{root}/{META_DIR}/{DATASET_YAML}"
    fix = (f"; finalize keeps the sample class it finds, so delete {label} (or pass a "
           "sample_type of megatron.energon) and run finalize again")
    untrusted = trust.code_problems(dict(content), label, fix)
    if untrusted:
        raise DatasetError(untrusted[0])


def _first_parts(view: DatasetView, shards: list[str]) -> dict[str, bytes] | None:
    """The parts of the first sample of the first shard; None when unreadable."""
    try:
        with view.fetched(shards[:1], first_sample=True):
            return next(iter(_native.read_shard(view.root / shards[0]))).parts
    except (ShardcookError, StopIteration):
        return None  # indexing names the damage


def _layouts_like(parts: dict[str, bytes] | None) -> list[Layout]:
    """The layouts whose required parts a sample with `parts` has."""
    return [lay for lay in LAYOUTS.values()
            if parts is not None and lay.required and not lay.missing_parts(parts)]


def _check_fits(view: DatasetView, shards: list[str], layout: Layout) -> None:
    """Refuses, before anything is written, a layout whose parts the first sample lacks."""
    root = view.root
    parts = _first_parts(view, shards)
    missing = layout.missing_parts(parts or {})
    if parts is None or not missing:
        return
    like = [lay.encoding for lay in _layouts_like(parts)]
    fix = (f"they fit the {' or '.join(like)} encoding: pass --encoding {like[0]}" if like
           else "no shardcook encoding fits them")
    raise ConfigError(
        f"{root}'s samples do not fit the {layout.encoding} encoding (the first sample of "
        f"{shards[0]} lacks {', '.join(missing)}); {fix}; nothing was changed"
    )


def _layouts_own_class(content: Mapping[str, Any], layout: Layout | None) -> bool:
    """True when dataset.yaml names just its layout's own sample class (no field map): the
    test suite loads every layout's samples through Energon, so finalize's validation checks the
    first samples' parts thoroughly without torch instead of importing Energon (and torch) to
    load them; `validate` still loads them."""
    if layout is None or "field_map" in content:
        return False
    named = {k: v for k, v in content.items() if k in CLASS_KEYS}
    return named == class_keys(layout.sample_type)


def _derived_field_map(root: Path, content: Mapping[str, Any], layout: Layout | None,
                       part_names: Collection[str]) -> dict[str, str] | None:
    """The field_map that the layout's sample class needs and `content` lacks (Energon's
    generic webdataset factory refuses a dataset.yaml with neither a field_map nor a
    sample_loader), from the part names the index found; None when nothing is to be added.

    Raises:
        ConfigError: the parts fit no field_map of the layout.
    """
    if layout is None or "sample_loader" in content or not _layouts_own_class(content, layout):
        return None
    if layout.field_map_from is None:
        return None
    try:
        fields: dict[str, str] = registry_function(layout.field_map_from)(part_names)
    except ValueError as e:
        raise ConfigError(f"{root} cannot get the {layout.encoding} layout's field_map from its "
                          f"parts: {e}; pass --field-map") from None
    return fields


def _layout(view: DatasetView, shards: list[str], layout: Layout | None,
            sample_type: str | None, force: bool) -> Layout | None:
    """The layout to write: given, else the recorded encoding's; refuses to guess for shards of
    a layout."""
    root = view.root
    if layout is not None:
        return layout
    encoding = metadata.recorded_encoding(root, skip_damaged=force)
    if encoding is not None:
        return metadata.layout_of(encoding, f"{root}'s dataset.yaml or manifest")
    if sample_type is not None:
        return None
    like = _layouts_like(_first_parts(view, shards))
    if like:
        raise ConfigError(
            f"{root} has no dataset.yaml or manifest naming its encoding, and its samples look "
            f"like the {' or '.join(lay.encoding for lay in like)} layout; pass --encoding "
            f"{like[0].encoding} (or encoding=) to say which"
        )
    return None


def finalize(
    directory: str | Path | Location,
    *,
    encoding: str | None = None,
    split: Sequence[float] | str | None = None,
    split_parts: Mapping[str, str] | None = None,
    shuffle_seed: int | None = None,
    exclude: Sequence[str] | None = None,
    sample_type: str | None = None,
    field_map: Mapping[str, str] | None = None,
    subflavors: Mapping[str, Any] | None = None,
    sqlite: bool = True,
    sample_tables: bool = True,
    tar_index_only: bool = False,
    fix_duplicates: bool = False,
    dataset_yaml_name: str = DATASET_YAML,
    skip_dataset_yaml: bool = False,
    force: bool = False,
    validate: bool = True,
    scratch_dir: str | Path | None = None,
    media_metadata_by_extension: bool = False,
    media_metadata_by_glob: str | None = None,
    media_metadata_by_header: bool = False,
) -> FinalizeResult:
    """Makes a folder of shards a complete Energon dataset, then validates it.

    `directory` is a folder or the URL of one in object storage (`msc://PROFILE/path`,
    `s3://bucket/path`): then the work is done in a view of it under `scratch_dir` (default:
    the temporary folder), no shard downloaded whole (each is indexed from the rows its run
    recorded, or from ranged reads of its headers; a media flag reads the members, so it
    downloads the shards, a few at a time), and the new metadata is uploaded when
    everything, validation included, succeeded. A `.jsonl` file or URL is a JSONL dataset: its
    index is written beside it as `energon prepare` writes it (the file streamed once), and a
    folder's index options are refused.

    Writes `.nv-meta/dataset.yaml` (for our layouts: CrudeWebdataset with an `encoding`
    subflavor, or the layout's own class; keeping any subflavors already there) and the index
    (see `build_index`: split and exclusions not given are kept from an earlier finalize).

    Args:
        encoding: A layout's encoding (`shardcook.layouts.encodings()`: `generic` for any
            tars, read as Energon's crude samples); by default read from dataset.yaml or the
            manifest.
        sample_type, field_map, subflavors: What dataset.yaml declares (see `dataset_yaml`).
        sample_tables, tar_index_only, fix_duplicates: as `build_index`'s; `tar_index_only`
            writes no dataset.yaml, split.yaml nor `.info.json`.
        dataset_yaml_name: The file in `.nv-meta/` the dataset config is written to (and read
            from, to be updated), as `energon prepare --dataset-yaml-name`; validation checks
            it only when it is dataset.yaml, the one Energon reads unless a metadataset names
            another (`dataset_config`).
        skip_dataset_yaml: Write the index only, leaving any dataset config as it is.
        force: Rebuild an indexed folder, replacing any damaged metadata file.
        validate: Refuse an encoding whose parts the first sample lacks, and run `validate`
            afterwards, undoing everything when it finds problems.
        media_metadata_by_extension, media_metadata_by_glob, media_metadata_by_header: Record
            the media metadata of the members (images, video, audio) in index.sqlite, as
            `energon prepare --media-metadata-by-*` does, taking members by their extension,
            by these comma-separated glob patterns, or by their content (at most one). A shard
            whose run recorded its rows with the same filter is not read again. Without any,
            the media tables index.sqlite has are kept; where it has none, those of the filter
            the run that wrote the folder recorded rows with (`raw`, `encode` or `chatml` with
            a `--media-metadata-by-*` flag) are written, from its records.

    Raises:
        DatasetError: as `build_index`, or when validation fails (the metadata is then as it was).
        ConfigError: an unknown encoding, one whose parts the samples lack, or shards of a known
            layout with no encoding to say so.
    """
    location = check_finalize_arguments(directory, sample_type, field_map, subflavors, validate,
                                        dataset_yaml_name, skip_dataset_yaml)
    media = media_filter(media_metadata_by_glob, media_metadata_by_header,
                         media_metadata_by_extension)
    what = dataset_kind(location)
    what.refuse_cache("`shardcook finalize`")
    dataset = what.records
    if dataset is not None:
        # Energon too: "JSONL datasets do not support media metadata"
        _refuse_folder_options(dataset, encoding=encoding, split=split, split_parts=split_parts,
                               shuffle_seed=shuffle_seed, exclude=exclude,
                               sample_type=sample_type, field_map=field_map,
                               subflavors=subflavors, tar_index_only=tar_index_only or None,
                               fix_duplicates=fix_duplicates or None,
                               no_sample_tables=(not sample_tables) or None,
                               dataset_yaml_name=(None if dataset_yaml_name == DATASET_YAML
                                                  else dataset_yaml_name),
                               skip_dataset_yaml=skip_dataset_yaml or None,
                               **{"media_metadata_by_*": media})
        return _finalize_jsonl(dataset, validate)
    config = _Config(sample_type, field_map, subflavors, dataset_yaml_name,
                     skip_dataset_yaml or tar_index_only)
    if tar_index_only:
        _refuse_config_with_tar_index(encoding, config, skip_dataset_yaml)
    with dataset_view(location, scratch_dir=scratch_dir) as view:
        layout = metadata.layout_of(encoding, "--encoding") if encoding is not None else None
        return _finalize_view(view, layout, config, media, split=split, split_parts=split_parts,
                              shuffle_seed=shuffle_seed, exclude=exclude, sqlite=sqlite,
                              sample_tables=sample_tables, tar_index_only=tar_index_only,
                              fix_duplicates=fix_duplicates, force=force, validate=validate)


def finalize_run(view: DatasetView, layout: Layout, *, split: Sequence[float] | None = None,
                 split_parts: Mapping[str, str] | None = None, sample_type: str | None = None,
                 field_map: Mapping[str, str] | None = None,
                 subflavors: Mapping[str, Any] | None = None,
                 media: MediaFilter | None = None) -> FinalizeResult:
    """`finalize` of a run's output folder, as the engine's jobs call it: `view` is the folder
    as a dataset (`dataset_view`, opened by the engine), `layout` the run's, `media` the filter
    its media rows were recorded with; an indexed folder is rebuilt (`force`) and validated.

    Raises:
        DatasetError, ConfigError: as `finalize`'s.
    """
    check_arguments(sample_type=sample_type, field_map=field_map, subflavors=subflavors)
    config = _Config(sample_type, field_map, subflavors, DATASET_YAML, False)
    return _finalize_view(view, layout, config, media, split=split, split_parts=split_parts,
                          force=True, validate=True)


def _finalize_view(view: DatasetView, layout: Layout | None, config: _Config,
                   media: MediaFilter | None, *, split: Sequence[float] | str | None = None,
                   split_parts: Mapping[str, str] | None = None,
                   shuffle_seed: int | None = None, exclude: Sequence[str] | None = None,
                   sqlite: bool = True, sample_tables: bool = True, tar_index_only: bool = False,
                   fix_duplicates: bool = False, force: bool, validate: bool) -> FinalizeResult:
    """`finalize` in the dataset's `view`: the index and dataset.yaml written, validated, and
    published."""
    view.check_writable()
    finish_interrupted(view.root)
    if media is None and sqlite and not tar_index_only:
        media = _media_of_run(view.root)
    plan = plan_index(view, split=split, split_parts=split_parts, shuffle_seed=shuffle_seed,
                      exclude=exclude, sqlite=sqlite, sample_tables=sample_tables,
                      tar_index_only=tar_index_only, fix_duplicates=fix_duplicates,
                      force=force, encoding=layout.encoding if layout else None, media=media)
    result = _finalize(view, plan, layout, config, force=force, validate=validate)
    view.publish()
    return result


def _media_of_run(root: Path) -> MediaFilter | None:
    """Without a media flag: the filter the run that wrote `root` recorded media rows with,
    while index.sqlite holds no media tables (those there are kept, as Energon keeps them)."""
    if mediatables.entry_count(root / META_DIR / INDEX_SQLITE) is not None:
        return None
    return mediarecords.run_filter(root)


def _refuse_folder_options(dataset: jsonl.JsonlFile, **given: object) -> None:
    """Refuses an option of a folder's index for a JSONL dataset, which has none of them."""
    for name, value in given.items():
        if value is not None:
            raise ConfigError(
                f"{dataset} is a JSONL dataset, which Energon reads whole, as crude samples, for "
                f"every split, so --{name.replace('_', '-')} does not apply to it; leave it out.")


def _finalize_jsonl(dataset: jsonl.JsonlFile, validate: bool) -> FinalizeResult:
    """`energon prepare NAME.jsonl`: the index beside the file. With `validate`, a first record
    that is not JSON is refused before anything is written, and the result is summarized."""
    start = time.perf_counter()
    offsets = dataset.scan()
    problems = jsonl.record_problems(dataset, offsets, every=False) if validate else []
    if problems:
        raise DatasetError(f"{problems[0]}; finalize wrote no index")
    dataset.write_index(offsets)
    index = IndexResult(str(dataset), {dataset.name: len(offsets) - 1}, {}, [jsonl.PART],
                        seconds=time.perf_counter() - start)
    report = (ValidationReport(str(dataset), summary=jsonl_summary(dataset)) if validate
              else None)
    return FinalizeResult(index, {}, report, jsonl=True)


@dataclass(frozen=True)
class _Config:
    """What finalize is asked to write into the dataset config, and where."""

    sample_type: str | None
    field_map: Mapping[str, str] | None
    subflavors: Mapping[str, Any] | None
    name: str
    skip: bool


def _refuse_config_with_tar_index(encoding: str | None, config: _Config, skip: bool) -> None:
    given = [flag for flag, value in (
        ("--encoding", encoding), ("--sample-type", config.sample_type),
        ("--field-map", config.field_map), ("subflavors", config.subflavors),
        ("--dataset-yaml-name", None if config.name == DATASET_YAML else config.name),
        ("--skip-dataset-yaml", skip or None)) if value is not None]
    if given:
        raise ConfigError(f"--tar-index-only writes no dataset config, so {given[0]} has no "
                          "meaning with it; leave it out")


def _finalize(view: DatasetView, plan: IndexPlan, layout: Layout | None, config: _Config, *,
              force: bool, validate: bool) -> FinalizeResult:
    root = view.root
    if not plan.tar_index_only:
        layout = _layout(view, plan.shards, layout, config.sample_type, force)
        if layout is not None and validate:
            _check_fits(view, plan.shards, layout)
        plan = replace(plan, record=replace(plan.record,
                                            encoding=layout.encoding if layout else None))
    content: dict[str, Any] = {}
    if not config.skip:
        content = dataset_yaml(root, layout=layout, sample_type=config.sample_type,
                               field_map=config.field_map, subflavors=config.subflavors,
                               force=force, name=config.name)
        _refuse_untrusted_code(root, content, config.sample_type)
    report = None
    with undone_on_failure(root, plan.shards):
        index = write_index(plan)
        if not config.skip:
            content = _with_derived_field_map(root, content, layout, index, config, force)
            metadata.write_dataset_yaml(root, content, config.name)
        if validate:
            own = config.name == DATASET_YAML and not config.skip
            report = validate_view(
                view, layout=layout,
                energon_check=not (own and _layouts_own_class(content, layout)),
                dataset_yaml=own or (root / META_DIR / DATASET_YAML).is_file())
            if not report.ok:
                raise DatasetError(
                    f"{root} does not validate with the new index, so finalize left its "
                    "metadata as it was:\n  " + "\n  ".join(report.problems)
                )
    return FinalizeResult(index, content, report)


def _with_derived_field_map(root: Path, content: dict[str, Any], layout: Layout | None,
                            index: IndexResult, config: _Config, force: bool) -> dict[str, Any]:
    """`content` with the field_map its layout's class needs, when it lacks one."""
    derived = _derived_field_map(root, content, layout, index.part_names)
    if derived is None:
        return content
    return dataset_yaml(root, layout=layout, sample_type=config.sample_type,
                        field_map=derived, subflavors=config.subflavors, force=force,
                        name=config.name)
