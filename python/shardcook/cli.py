"""The `shardcook` command line: parse options, call one library function, print its result.

Heavy libraries are imported inside the commands so `shardcook --help`, `info` and `validate`
start fast.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated

import typer

from shardcook.errors import ShardcookError

app = typer.Typer(
    name="shardcook",
    help="Prepare image+text datasets for Megatron-Energon, and prove them whole.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

log = logging.getLogger("shardcook")


def _version(value: bool) -> None:
    if value:
        from shardcook import __version__
        from shardcook.buildinfo import build_info, build_lines

        typer.echo("\n".join([f"shardcook {__version__}", *build_lines(build_info())]))
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s", stream=sys.stderr)


def _fail(e: Exception) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(2)


Dir = Annotated[Path, typer.Argument(help="The dataset folder.", show_default=False)]


@app.command()
def finalize(
    directory: Dir,
    encoding: Annotated[
        str | None,
        typer.Option(help="preencoded, raw or chatml (default: from dataset.yaml or the manifest)."),
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(help="train,val,test ratios by whole shard [default: as recorded, else 1,0,0]."),
    ] = None,
    split_parts: Annotated[
        list[str] | None,
        typer.Option("--split-parts", help="NAME:PATTERN, repeatable; replaces --split."),
    ] = None,
    shuffle_seed: Annotated[
        int | None, typer.Option(help="Shuffle shards with this seed before cutting splits.")
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(help="Leave out shards whose path matches, repeatable [default: as recorded]."),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Rebuild an indexed folder, replacing damaged metadata.")
    ] = False,
    sqlite: Annotated[
        bool, typer.Option("--sqlite/--no-sqlite", help="Write index.sqlite (key lookups only).")
    ] = True,
    validate: Annotated[
        bool, typer.Option("--validate/--no-validate", help="Validate after indexing.")
    ] = True,
) -> None:
    """Write Energon's metadata (index, splits, dataset.yaml) for a folder of shards, then
    validate it."""
    from shardcook.dataset import finalize as run
    from shardcook.dataset.splits import parse_split_parts

    try:
        result = run(
            directory,
            encoding=encoding,
            split=split,
            split_parts=parse_split_parts(split_parts) if split_parts else None,
            shuffle_seed=shuffle_seed,
            exclude=exclude,
            sqlite=sqlite,
            force=force,
            validate=validate,
        )
    except ShardcookError as e:
        _fail(e)
    index = result.index
    seconds = index.seconds
    typer.echo(
        f"indexed {index.num_samples:,} samples in {len(index.shard_counts):,} shards "
        f"in {seconds:.2f} s ({index.num_samples / max(seconds, 1e-9):,.0f} samples/s)"
    )
    for name, shards in index.splits.items():
        typer.echo(f"  {name}: {len(shards)} shards, {sum(index.shard_counts[s] for s in shards):,} samples")
    if result.validation is not None:
        typer.echo("validated: ok")


@app.command()
def validate(
    directory: Dir,
    encoding: Annotated[
        str | None,
        typer.Option(help="preencoded, raw or chatml (default: from dataset.yaml or the manifest)."),
    ] = None,
    deep: Annotated[bool, typer.Option(help="Read every sample, not one per split.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check that a dataset is whole; exit 0 when it is, 1 otherwise."""
    from shardcook.dataset import validate as run

    try:
        report = run(directory, encoding=encoding, deep=deep)
    except ShardcookError as e:
        _fail(e)
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        for problem in report.problems:
            typer.echo(f"problem: {problem}")
        for warning in report.warnings:
            typer.echo(f"warning: {warning}")
        if report.summary:
            typer.echo("\n".join(report.summary.lines()))
        typer.echo("ok: the dataset is whole" if report.ok else f"{len(report.problems)} problem(s)")
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def info(
    directory: Dir,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON.")] = False,
) -> None:
    """Show what a dataset holds (no checks; fast)."""
    from shardcook.dataset import info as run

    try:
        summary = run(directory)
    except ShardcookError as e:
        _fail(e)
    typer.echo(json.dumps(summary.to_dict(), indent=2) if as_json else "\n".join(summary.lines()))


# ---- `shardcook raw` (issue 4) -------------------------------------------------------------
# Options mirror shardcook.config (YAML key = option name with `_`); an option given on the
# command line beats the --config file, which beats the defaults shown here.
_SRC, _OUT, _IMG, _FMT = "Source", "Output", "Image", "Data format"

# Options shared by the pipeline commands (raw, encode), declared once.
_ConfigOpt = Annotated[Path | None, typer.Option(help="YAML config (sections source, output, image, model, data_format).")]
_PrintConfigOpt = Annotated[bool, typer.Option("--print-config", help="Print the resolved config and exit.")]
_SourceTypeOpt = Annotated[str, typer.Option(help="directory, huggingface or webdataset.", rich_help_panel=_SRC)]
_InputDirOpt = Annotated[str | None, typer.Option(help="directory: images/ + captions/, or a flat folder.", rich_help_panel=_SRC)]
_HfSplitOpt = Annotated[str, typer.Option(help="huggingface: the split.", rich_help_panel=_SRC)]
_HfDataFilesOpt = Annotated[list[str] | None, typer.Option(help="huggingface: data files, repeatable.", rich_help_panel=_SRC)]
_InputPathOpt = Annotated[str | None, typer.Option(help="webdataset: tar glob, brace pattern or folder.", rich_help_panel=_SRC)]
_MaxSamplesOpt = Annotated[int | None, typer.Option(help="Use only the first N inputs.", rich_help_panel=_SRC)]
_CaptionColumnOpt = Annotated[str | None, typer.Option(help="Caption column or dotted path, e.g. json.caption (default: detected).", rich_help_panel=_FMT)]
_OverwriteOpt = Annotated[bool, typer.Option(help="Delete an earlier run in --output-dir and start over.", rich_help_panel=_OUT)]
_QuietOpt = Annotated[bool, typer.Option(help="No progress bars and no summary.", rich_help_panel=_OUT)]
_ResizeModeOpt = Annotated[str, typer.Option(help="crop, stretch, variable or bucket.", rich_help_panel=_IMG)]
_MaxSizeOpt = Annotated[int, typer.Option(help="Longest side (variable, bucket).", rich_help_panel=_IMG)]
_MinSizeOpt = Annotated[int, typer.Option(help="Skip images whose short side is smaller.", rich_help_panel=_IMG)]
_WorkersOpt = Annotated[int | None, typer.Option(help="Image threads (default: all cores).", rich_help_panel=_IMG)]
_HfDatasetOpt = Annotated[str | None, typer.Option(help="huggingface: hub name, save_to_disk folder or data file.", rich_help_panel=_SRC)]
_ImageColumnOpt = Annotated[str | None, typer.Option(help="Image column / tar part (default: detected).", rich_help_panel=_FMT)]
_OutputDirOpt = Annotated[str | None, typer.Option(help="The dataset folder to write.", rich_help_panel=_OUT)]
_ShardSizeOpt = Annotated[int, typer.Option(help="Inputs per work unit / shard.", rich_help_panel=_OUT)]
_SplitOpt = Annotated[str, typer.Option(help="train,val,test ratios by whole shard.", rich_help_panel=_OUT)]
_FinalizeOpt = Annotated[bool, typer.Option("--finalize/--no-finalize", help="Index and validate at the end.", rich_help_panel=_OUT)]
_HfTokenFileOpt = Annotated[str | None, typer.Option(help="A file holding a Hugging Face token (mode 600 or 400), for models and datasets. Else HF_TOKEN, else the saved `huggingface-cli login`. Never printed.", rich_help_panel=_SRC)]
# Primus's spellings (`primus-cli direct -- data diffusion-raw|diffusion-encoded`), as aliases.
_PRIMUS = "Primus aliases"
_CompressOpt = Annotated[bool | None, typer.Option("--compress", help="Primus: refused (shards stay uncompressed: Energon reads them by byte offset).", rich_help_panel=_PRIMUS, show_default=False)]
_CenterCropOpt = Annotated[bool | None, typer.Option("--center-crop/--no-center-crop", help="Primus: --center-crop = --resize-mode crop, --no-center-crop = stretch.", rich_help_panel=_PRIMUS, show_default=False)]
_VariableSizeOpt = Annotated[bool | None, typer.Option("--variable-size", help="Primus: = --resize-mode variable (long side to --max-size).", rich_help_panel=_PRIMUS, show_default=False)]
_TrainSplitOpt = Annotated[float | None, typer.Option(help="Primus: F = --split F,(1-F)/2,(1-F)/2.", rich_help_panel=_PRIMUS, show_default=False)]
_VaeLatentModeOpt = Annotated[str | None, typer.Option(help="Primus: presampled = --latent-mode sample, resample = --latent-mode resample.", rich_help_panel=_PRIMUS, show_default=False)]

#: Parameters of raw/encode that are not config options.
_NOT_CONFIG = ("config", "print_config")


def _resolve_config(ctx: typer.Context, config: Path | None, *,
                    renamed: dict[str, str] | None = None,
                    extra: dict[str, tuple[object, bool]] | None = None):  # -> RunConfig
    """The run config from the command line (explicit options win), the --config file and the
    defaults; Primus's flags become the options they stand for. `renamed` maps a parameter to
    its config name (`input` -> `input_path`, `max_pixels` -> `chatml.max_pixels`); `extra`
    adds options the command implies, as (value, given explicitly)."""
    from shardcook.config import PRIMUS_FLAGS, resolve

    given = {
        n for n in ctx.params
        if getattr(ctx.get_parameter_source(n), "name", None) in ("COMMANDLINE", "ENVIRONMENT")
    }
    names = [n for n in ctx.params if n not in _NOT_CONFIG and n not in PRIMUS_FLAGS]
    primus = {n: ctx.params[n] for n in PRIMUS_FLAGS if n in given and ctx.params[n] is not None}
    rename = renamed or {}
    values = {rename.get(n, n): ctx.params[n] for n in names}
    explicit = {rename.get(n, n) for n in given & set(names)}
    for name, (value, is_given) in (extra or {}).items():
        values[name] = value
        if is_given:
            explicit.add(name)
    return resolve(values, explicit, config, primus)


@app.command()
def raw(
    ctx: typer.Context,
    config: _ConfigOpt = None,
    print_config: _PrintConfigOpt = False,
    source_type: _SourceTypeOpt = "directory",
    input_dir: _InputDirOpt = None,
    hf_dataset: _HfDatasetOpt = None,
    hf_split: _HfSplitOpt = "train",
    hf_data_files: _HfDataFilesOpt = None,
    input_path: _InputPathOpt = None,
    max_samples: _MaxSamplesOpt = None,
    image_column: _ImageColumnOpt = None,
    caption_column: _CaptionColumnOpt = None,
    output_dir: _OutputDirOpt = None,
    shard_size: _ShardSizeOpt = 1000,
    split: _SplitOpt = "1,0,0",
    finalize: _FinalizeOpt = True,
    overwrite: _OverwriteOpt = False,
    quiet: _QuietOpt = False,
    image_size: Annotated[int, typer.Option(help="Target side (crop, stretch).", rich_help_panel=_IMG)] = 1024,
    resize_mode: _ResizeModeOpt = "crop",
    max_size: _MaxSizeOpt = 1024,
    image_format: Annotated[str, typer.Option(help="jpg, png or webp (also Primus's JPEG, PNG, WEBP).", rich_help_panel=_IMG)] = "jpg",
    image_quality: Annotated[int, typer.Option(help="JPEG/WebP quality 1-100.", rich_help_panel=_IMG)] = 95,
    min_size: _MinSizeOpt = 0,
    workers: _WorkersOpt = None,
    hf_token_file: _HfTokenFileOpt = None,
    center_crop: _CenterCropOpt = None,
    variable_size: _VariableSizeOpt = None,
    train_split: _TrainSplitOpt = None,
    compress: _CompressOpt = None,
) -> None:
    """Images and captions (folder, Hugging Face dataset or WebDataset tars) into raw,
    finalized Energon shards. Resumable; runs under torchrun. Alias: diffusion-raw."""
    try:
        cfg = _resolve_config(ctx, config)
    except ShardcookError as e:
        _fail(e)
    if print_config:
        typer.echo(cfg.to_yaml(), nl=False)
        raise typer.Exit()
    from shardcook.pipeline.raw import run_raw

    try:
        run_raw(cfg)
    except ShardcookError as e:
        _fail(e)
# ---- end of `shardcook raw` ----------------------------------------------------------------


# ---- `shardcook chatml` (logic in shardcook.pipeline.chatml) -------------------------------
_CHAT = "ChatML"


@app.command()
def chatml(
    ctx: typer.Context,
    config: _ConfigOpt = None,
    print_config: _PrintConfigOpt = False,
    input: Annotated[str | None, typer.Option("--input", help="A JSONL file: one record per line with images/image, videos/video, audio and a conversation (or question/answer fields); paths relative to the file.", rich_help_panel=_SRC)] = None,
    hf_dataset: _HfDatasetOpt = None,
    hf_split: _HfSplitOpt = "train",
    hf_data_files: _HfDataFilesOpt = None,
    max_samples: _MaxSamplesOpt = None,
    image_column: Annotated[str | None, typer.Option(help="Image or image-list field/column (default: images or image).", rich_help_panel=_FMT)] = None,
    conversation_column: Annotated[str | None, typer.Option(help="Conversation field/column (default: conversation, messages or conversations).", rich_help_panel=_FMT)] = None,
    question_column: Annotated[str | None, typer.Option(help="Build a two-turn conversation from this question field/column (with --answer-column).", rich_help_panel=_FMT)] = None,
    answer_column: Annotated[str | None, typer.Option(help="The answer field/column of a question/answer dataset.", rich_help_panel=_FMT)] = None,
    system_prompt: Annotated[str | None, typer.Option(help="A system turn before each question/answer pair.", rich_help_panel=_FMT)] = None,
    output_dir: _OutputDirOpt = None,
    shard_size: Annotated[int, typer.Option(help="Inputs per work unit / shard, per split.", rich_help_panel=_OUT)] = 1000,
    val_fraction: Annotated[float, typer.Option(help="Share of samples for val, by a stable hash of the sample id.", rich_help_panel=_OUT)] = 0.01,
    hf_val_split: Annotated[str | None, typer.Option(help="huggingface: take val from this split instead of --val-fraction.", rich_help_panel=_OUT)] = None,
    train_rows: Annotated[int | None, typer.Option(help="Train = the first N inputs (val = the next --val-rows, or the first of --hf-val-split).", rich_help_panel=_OUT)] = None,
    val_rows: Annotated[int | None, typer.Option(help="Val = M inputs after the train rows (or the first M of --hf-val-split).", rich_help_panel=_OUT)] = None,
    finalize: Annotated[bool, typer.Option("--finalize/--no-finalize", help="Index and check at the end.", rich_help_panel=_OUT)] = True,
    overwrite: _OverwriteOpt = False,
    quiet: _QuietOpt = False,
    image_format: Annotated[str, typer.Option(help="jpg or png for one image per sample (several: always JPEG in `jpgs`).", rich_help_panel=_IMG)] = "jpg",
    image_quality: Annotated[int, typer.Option(help="JPEG quality 1-100.", rich_help_panel=_IMG)] = 95,
    max_pixels: Annotated[int | None, typer.Option(help="Scale larger images and video frames down to at most this many pixels, keeping the aspect ratio.", rich_help_panel=_IMG)] = None,
    workers: _WorkersOpt = None,
    hf_token_file: _HfTokenFileOpt = None,
    video_layout: Annotated[str, typer.Option(help="frames: sampled JPEG frames in `videos`; mp4: the MP4 file unchanged as `video.mp4`.", rich_help_panel=_CHAT)] = "frames",
    video_fps: Annotated[float, typer.Option(help="frames: frames kept per second of video.", rich_help_panel=_CHAT)] = 2.0,
    max_frames: Annotated[int, typer.Option(help="frames: at most this many frames per video, evenly spread.", rich_help_panel=_CHAT)] = 32,
) -> None:
    """Images, videos, audio and ChatML conversations (JSONL or Hugging Face) into
    Megatron-Bridge's Energon layout: train-/val-shard-NNNNNN.tar, finalized. Resumable; runs
    under torchrun."""

    if (input is not None and hf_dataset is not None) or (
            input is None and hf_dataset is None and config is None):
        _fail(ValueError("give exactly one of --input FILE.jsonl and --hf-dataset"))
    source_type = "huggingface" if hf_dataset is not None else "jsonl"
    try:
        cfg = _resolve_config(
            ctx, config, renamed={"input": "input_path", "max_pixels": "chatml.max_pixels"},
            extra={"source_type": (source_type, input is not None or hf_dataset is not None)})
    except ShardcookError as e:
        _fail(e)
    if print_config:
        typer.echo(cfg.to_yaml(), nl=False)
        raise typer.Exit()
    from shardcook.pipeline.chatml import run_chatml

    try:
        run_chatml(cfg)
    except ShardcookError as e:
        _fail(e)
# ---- end of `shardcook chatml` -------------------------------------------------------------


# ---- `shardcook blend` (logic in shardcook.energon.blend) ---------------------------------
@app.command()
def blend(
    out: Annotated[Path, typer.Argument(help="The metadataset .yaml to write.", show_default=False)],
    datasets: Annotated[
        list[str], typer.Argument(help="PATH=WEIGHT per dataset (weight 1 if omitted).", show_default=False)
    ],
    split: Annotated[str, typer.Option(help="The split part the blend defines and reads.")] = "train",
    force: Annotated[bool, typer.Option(help="Replace an existing file (never a dataset's own).")] = False,
) -> None:
    """Write an Energon MetadatasetV2 .yaml that mixes datasets by sampling weight."""
    from shardcook.energon.blend import write_blend

    try:
        path = write_blend(out, datasets, split=split, force=force)
    except ShardcookError as e:
        _fail(e)
    typer.echo(f"wrote {path}")
# ---- end of `shardcook blend` --------------------------------------------------------------


# ---- `shardcook encode` (issue 5; logic in shardcook.pipeline.encode) ----------------------
# The same source/output/image options as `raw`, plus the `model` section; YAML keys = names.
_MOD = "Model"


@app.command()
def encode(
    ctx: typer.Context,
    config: _ConfigOpt = None,
    print_config: _PrintConfigOpt = False,
    hf_token_file: _HfTokenFileOpt = None,
    layout: Annotated[str, typer.Option(help="primus (scaled latents, one .pth per tensor) or megatron-bridge (Megatron-Bridge's FLUX recipe: unscaled latent pth, pickled embeddings, json).", rich_help_panel=_MOD)] = "primus",
    model_path: Annotated[str, typer.Option(help="FLUX folder (vae/, text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/) or hub id.", rich_help_panel=_MOD)] = "black-forest-labs/FLUX.1-dev",
    vae_path: Annotated[str | None, typer.Option(help="A folder or hub id holding just the VAE.", rich_help_panel=_MOD)] = None,
    clip_path: Annotated[str | None, typer.Option(help="A folder or hub id holding just the CLIP text model (+ tokenizer).", rich_help_panel=_MOD)] = None,
    t5_path: Annotated[str | None, typer.Option(help="A folder or hub id holding just the T5 encoder (+ tokenizer).", rich_help_panel=_MOD)] = None,
    revision: Annotated[str | None, typer.Option(help="Hub revision of --model-path.", rich_help_panel=_MOD)] = None,
    precision: Annotated[str | None, typer.Option(help="bf16, fp16 or fp32 (default: bf16; fp32 for --layout megatron-bridge, as its script).", rich_help_panel=_MOD)] = None,
    stored_dtype: Annotated[str | None, typer.Option(help="dtype of the saved tensors (default: --precision).", rich_help_panel=_MOD)] = None,
    batch_size: Annotated[int, typer.Option(help="Images per encoder batch.", rich_help_panel=_MOD)] = 8,
    t5_max_length: Annotated[int, typer.Option(help="T5 padding length (256 suits FLUX.1-schnell).", rich_help_panel=_MOD)] = 512,
    latent_mode: Annotated[str | None, typer.Option(help="sample (seeded per sample key), mode, or resample (also store the posterior mean/logvar so training draws a fresh latent every epoch); default: sample, mode for --layout megatron-bridge (which takes sample or mode).", rich_help_panel=_MOD)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the latent sampling.", rich_help_panel=_MOD)] = 0,
    device: Annotated[str | None, typer.Option(help="cuda, cuda:N or cpu (default: cuda:LOCAL_RANK when present, else cpu).", rich_help_panel=_MOD)] = None,
    source_type: _SourceTypeOpt = "directory",
    input_dir: _InputDirOpt = None,
    hf_dataset: _HfDatasetOpt = None,
    hf_split: _HfSplitOpt = "train",
    hf_data_files: _HfDataFilesOpt = None,
    input_path: _InputPathOpt = None,
    max_samples: _MaxSamplesOpt = None,
    image_column: _ImageColumnOpt = None,
    caption_column: _CaptionColumnOpt = None,
    output_dir: _OutputDirOpt = None,
    shard_size: _ShardSizeOpt = 1000,
    split: _SplitOpt = "1,0,0",
    finalize: _FinalizeOpt = True,
    overwrite: _OverwriteOpt = False,
    quiet: _QuietOpt = False,
    image_size: Annotated[int, typer.Option(help="Target side (crop, stretch); a multiple of 16.", rich_help_panel=_IMG)] = 1024,
    resize_mode: _ResizeModeOpt = "crop",
    max_size: _MaxSizeOpt = 1024,
    min_size: _MinSizeOpt = 0,
    workers: _WorkersOpt = None,
    center_crop: _CenterCropOpt = None,
    variable_size: _VariableSizeOpt = None,
    train_split: _TrainSplitOpt = None,
    vae_latent_mode: _VaeLatentModeOpt = None,
    compress: _CompressOpt = None,
) -> None:
    """Images and captions into FLUX latents, T5 and CLIP embeddings in finalized Energon
    shards (docs/FORMAT.md §3, preencoded). Resumable; one GPU or many under torchrun. Alias:
    diffusion-encoded."""
    try:
        cfg = _resolve_config(ctx, config)
        from shardcook.pipeline.encode import apply_layout_defaults, check_model

        apply_layout_defaults(cfg)
        check_model(cfg)
    except ShardcookError as e:
        _fail(e)
    if print_config:
        typer.echo(cfg.to_yaml(), nl=False)
        raise typer.Exit()
    from shardcook.pipeline.encode import run_encode

    try:
        run_encode(cfg)
    except ShardcookError as e:
        _fail(e)
# ---- end of `shardcook encode` -------------------------------------------------------------


# ---- `shardcook demo` (issue 5; logic in shardcook.demo) -----------------------------------
@app.command()
def demo(
    output_dir: Annotated[Path, typer.Option(help="Where to put the demo's images, encoders and datasets.")] = Path("shardcook-demo"),
) -> None:
    """Try shardcook in a minute, no GPU and no network: generated images, tiny random-weight
    encoders (demo weights, not a real model), raw + encode, finalize, validate, load."""
    from shardcook.demo import run_demo

    try:
        result = run_demo(output_dir)
    except ShardcookError as e:
        _fail(e)
    typer.echo("\n".join(result.lines))
    typer.echo(f"done in {result.seconds:.1f} s")
# ---- end of `shardcook demo` ---------------------------------------------------------------


# ---- `shardcook preview` (issue 5; logic in shardcook.preview) -----------------------------
#: More tiles than this make a sheet too large to look at (and to hold in memory).
MAX_PREVIEW_COUNT = 1024


def _check_preview_options(out: Path | None, count: int) -> None:
    """Raises ConfigError for an --out that is not a .png in an existing folder, or a bad --count."""
    from shardcook.errors import ConfigError

    if not 1 <= count <= MAX_PREVIEW_COUNT:
        raise ConfigError(f"--count must be between 1 and {MAX_PREVIEW_COUNT}, not {count}.")
    if out is None:
        return
    if out.suffix.lower() != ".png":
        raise ConfigError(f"--out {str(out)!r} must name a .png file.")
    if out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a folder; name the .png file to write.")
    if not out.parent.is_dir():
        raise ConfigError(f"--out {str(out)!r}: the folder {str(out.parent)!r} does not exist.")


@app.command()
def preview(
    directory: Dir,
    out: Annotated[Path | None, typer.Option(help="The PNG to write (default: DIRNAME-preview.png here).")] = None,
    count: Annotated[int, typer.Option(help="How many samples.")] = 16,
    model_path: Annotated[str | None, typer.Option(help="Encoded datasets: decode latents with this FLUX folder's VAE (or a hub id).")] = None,
) -> None:
    """A contact sheet PNG of the first samples with their captions (raw: the images; encoded:
    latents decoded by --model-path's VAE, else channels 0-2 as false colour)."""
    from shardcook.preview import preview as run

    try:
        _check_preview_options(out, count)
        path = run(directory, out, count=count, model_path=model_path)
    except ShardcookError as e:
        _fail(e)
    typer.echo(f"wrote {path}")
# ---- end of `shardcook preview` ------------------------------------------------------------


# Primus's command names, word for word: `primus-cli direct -- data diffusion-encoded ...` is
# `shardcook diffusion-encoded ...`.
app.command("diffusion-encoded", help="Primus's name for `encode` (same options).")(encode)
app.command("diffusion-raw", help="Primus's name for `raw` (same options).")(raw)


def main() -> None:
    app()
