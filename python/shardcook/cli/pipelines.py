"""The commands that build a dataset from inputs: raw (images as they are), encode (FLUX
latents and text embeddings) and chatml (conversations with images, videos, audio), and status
(where a run stands). Their Primus aliases are registered in `shardcook.cli`; the logic is in
shardcook.pipeline. Their options are the config fields each lists (help, panel and default from
the field: `with_config_options`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from shardcook.cli.app import fail
from shardcook.cli.launch import start_workers, workers_asked
from shardcook.cli.options import (
    ChatmlInputOpt,
    ConfigOpt,
    PrintConfigOpt,
    config_names,
    declared_in,
    resolve_config,
    with_config_options,
)
from shardcook.dataset.arguments import DatasetOptions
from shardcook.errors import ShardcookError

if TYPE_CHECKING:
    from shardcook.config import RunConfig
    from shardcook.pipeline.driver import Job

# The config fields each command takes as options, in --help's order within each panel.
SOURCE_FIELDS = ("source_type", "input_dir", "hf_dataset", "hf_split", "hf_data_files",
                 "hf_streaming", "input_path", "max_samples")
#: The media metadata options, recorded while writing (raw, encode and chatml alike).
MEDIA_FIELDS = ("media_metadata_by_extension", "media_metadata_by_glob",
                "media_metadata_by_header")
OUTPUT_FIELDS = ("output_dir", "shard_size", "split", "finalize", "report_html", "overwrite",
                 "quiet", "scratch_dir", "upload_queue", *MEDIA_FIELDS)
RESIZE_FIELDS = ("image_size", "resize_mode", "max_size")
MODEL_FIELDS = ("layout", "model_path", "vae_path", "clip_path", "t5_path", "revision",
                "precision", "stored_dtype", "batch_size", "t5_max_length", "latent_mode", "seed",
                "device", "compile")
RAW_OPTIONS = (*SOURCE_FIELDS, "image_column", "caption_column", *OUTPUT_FIELDS, *RESIZE_FIELDS,
               "image_format", "image_quality", "min_size", "workers", "hf_token_file")
VIDEO_FIELDS = ("height", "width", "video_mode", "num_frames", "video.max_frames",
                "frame_stride", "aspect_ratio")
AUTOMODEL_FIELDS = ("model_type", "automodel.max_pixels", "resolution_preset", "caption_field",
                    "caption_format")
ENCODE_OPTIONS = ("hf_token_file", *MODEL_FIELDS, *SOURCE_FIELDS, "image_column",
                  "caption_column", *OUTPUT_FIELDS, *RESIZE_FIELDS, "min_size", "workers",
                  *VIDEO_FIELDS, *AUTOMODEL_FIELDS)
CHATML_OPTIONS = (
    "hf_dataset", "hf_split", "hf_data_files", "max_samples", "image_column",
    "conversation_column", "question_column", "answer_column", "system_prompt", "output_dir",
    "shard_size", "val_fraction", "hf_val_split", "train_rows", "val_rows", "test_fraction",
    "test_rows", "finalize", "report_html", "overwrite", "quiet", "scratch_dir", "upload_queue",
    *MEDIA_FIELDS, "image_format", "image_quality", "chatml.max_pixels", "workers", "hf_token_file",
    "video_layout", "video_frames_part", "video_fps", "max_frames")


def _run_job(ctx: typer.Context, config: Path | None, print_config: bool,
             make_job: Callable[[RunConfig], Job], *,
             encode: bool = False, renamed: dict[str, str] | None = None,
             extra: dict[str, tuple[object, bool]] | None = None) -> None:
    """The run commands' shell: the config resolved and checked (`encode`: with encode's
    checks and defaults), then --print-config prints it and exits, `--nproc-per-node` checks
    the whole setup here (`check_setup`), runs the command in that many workers and exits with
    their status, or the job runs here; a ShardcookError is one line and exit 2."""
    try:
        cfg = resolve_config(ctx, config, renamed=renamed, extra=extra, encode=encode)
    except ShardcookError as e:
        fail(e)
    if print_config:
        typer.echo(cfg.to_yaml(), nl=False)
        raise typer.Exit()
    from shardcook.pipeline.driver import check_setup, run_pipeline

    if workers_asked(ctx):
        try:
            check_setup(cfg, make_job(cfg))
        except ShardcookError as e:
            fail(e)
    start_workers(ctx)

    try:
        run_pipeline(cfg, make_job(cfg))
    except ShardcookError as e:
        fail(e)


@with_config_options(RAW_OPTIONS,
                     after=("center_crop", "variable_size", "train_split", "compress"))
def raw(ctx: typer.Context, config: ConfigOpt = None, print_config: PrintConfigOpt = False,
        **options: Any) -> None:
    """Images and captions (folder, Hugging Face dataset or WebDataset tars) into raw,
    finalized Energon shards. Resumable; runs under torchrun. Alias: diffusion-raw."""
    from shardcook.jobs.raw import RawJob

    _run_job(ctx, config, print_config, RawJob)


@with_config_options(CHATML_OPTIONS)
def chatml(ctx: typer.Context, config: ConfigOpt = None, print_config: PrintConfigOpt = False,
           input: ChatmlInputOpt = None, **options: Any) -> None:
    """Images, videos, audio and ChatML conversations (JSONL or Hugging Face) into
    Megatron-Bridge's Energon layout: train-/val-/test-shard-NNNNNN.tar, finalized. Resumable; runs
    under torchrun."""

    hf_dataset = options["hf_dataset"]
    if (input is not None and hf_dataset is not None) or (
            input is None and hf_dataset is None and config is None):
        fail(ValueError("give exactly one of --input FILE.jsonl and --hf-dataset"))
    source_type = "huggingface" if hf_dataset is not None else "jsonl"
    from shardcook.jobs.chatml.job import ChatmlJob

    _run_job(ctx, config, print_config, ChatmlJob,
             renamed={"input": "input_path", **config_names(CHATML_OPTIONS)},
             extra={"source_type": (source_type, input is not None or hf_dataset is not None)})


@with_config_options(ENCODE_OPTIONS, after=("center_crop", "variable_size", "train_split",
                                             "vae_latent_mode", "compress"))
def encode(ctx: typer.Context, config: ConfigOpt = None, print_config: PrintConfigOpt = False,
           **options: Any) -> None:
    """Images and captions into FLUX latents, T5 and CLIP embeddings (or videos into Wan latents
    and UMT5 embeddings: --layout wan) in finalized Energon shards. Resumable; one GPU or many
    under torchrun. Alias: diffusion-encoded."""
    from shardcook.jobs.encode.job import encode_job

    _run_job(ctx, config, print_config, encode_job, encode=True,
             renamed=config_names(ENCODE_OPTIONS))


OutputArg = Annotated[str, typer.Argument(
    help="The run's output folder, or its URL (msc://PROFILE/path, s3://bucket/path).",
    show_default=False)]


@with_config_options(("as_json",), lookup=declared_in(DatasetOptions))
def status(output: OutputArg, **options: Any) -> None:
    """Whether the run in an output folder is complete (exit 0), or which units are missing and
    whose they were (exit 1); for a Slurm job array, the --array= list to resubmit. Reads only
    the run's records."""
    from shardcook.pipeline.ledger import run_status

    try:
        found = run_status(output)
    except ShardcookError as e:
        fail(e)
    as_json = options["as_json"]
    typer.echo(json.dumps(found.to_json(), indent=2) if as_json else "\n".join(found.lines()))
    raise typer.Exit(0 if found.complete else 1)
