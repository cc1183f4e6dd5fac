"""The commands that build a dataset from inputs: raw (images as they are), encode (FLUX
latents and text embeddings) and chatml (conversations with images, videos, audio). Their
Primus aliases are registered in `shardcook.cli`; the logic is in shardcook.pipeline."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shardcook.cli.app import fail
from shardcook.cli.launch import start_workers
from shardcook.cli.options import (
    FMT,
    IMG,
    OUT,
    SRC,
    CaptionColumnOpt,
    CenterCropOpt,
    CompressOpt,
    ConfigOpt,
    FinalizeOpt,
    HfDataFilesOpt,
    HfDatasetOpt,
    HfSplitOpt,
    HfStreamingOpt,
    HfTokenFileOpt,
    ImageColumnOpt,
    InputDirOpt,
    InputPathOpt,
    MaxSamplesOpt,
    MaxSizeOpt,
    MinSizeOpt,
    OutputDirOpt,
    OverwriteOpt,
    PrintConfigOpt,
    QuietOpt,
    ResizeModeOpt,
    ScratchDirOpt,
    ShardSizeOpt,
    SourceTypeOpt,
    SplitOpt,
    TrainSplitOpt,
    UploadQueueOpt,
    VaeLatentModeOpt,
    VariableSizeOpt,
    WorkersOpt,
    resolve_config,
)
from shardcook.errors import ShardcookError
from shardcook.layouts import encode_layouts_help

if TYPE_CHECKING:
    from shardcook.config import RunConfig
    from shardcook.pipeline.driver import Job

# More --help panels, for the options of one command.
CHAT = "ChatML"
MOD = "Model"


def _run_job(ctx: typer.Context, config: Path | None, print_config: bool,
             make_job: Callable[[RunConfig], Job], *,
             encode: bool = False, renamed: dict[str, str] | None = None,
             extra: dict[str, tuple[object, bool]] | None = None) -> None:
    """The run commands' shell: the config resolved and checked (`encode`: with encode's
    checks and defaults), then --print-config prints it and exits, `--nproc-per-node` runs the command in
    that many workers and exits with their status, or the job runs here; a ShardcookError is one
    line and exit 2."""
    try:
        cfg = resolve_config(ctx, config, renamed=renamed, extra=extra, encode=encode)
    except ShardcookError as e:
        fail(e)
    if print_config:
        typer.echo(cfg.to_yaml(), nl=False)
        raise typer.Exit()
    start_workers(ctx)
    from shardcook.pipeline.driver import run_pipeline

    try:
        run_pipeline(cfg, make_job(cfg))
    except ShardcookError as e:
        fail(e)


def raw(
    ctx: typer.Context,
    config: ConfigOpt = None,
    print_config: PrintConfigOpt = False,
    source_type: SourceTypeOpt = "directory",
    input_dir: InputDirOpt = None,
    hf_dataset: HfDatasetOpt = None,
    hf_split: HfSplitOpt = "train",
    hf_data_files: HfDataFilesOpt = None,
    hf_streaming: HfStreamingOpt = False,
    input_path: InputPathOpt = None,
    max_samples: MaxSamplesOpt = None,
    image_column: ImageColumnOpt = None,
    caption_column: CaptionColumnOpt = None,
    output_dir: OutputDirOpt = None,
    shard_size: ShardSizeOpt = 1000,
    split: SplitOpt = "1,0,0",
    finalize: FinalizeOpt = True,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    scratch_dir: ScratchDirOpt = None,
    upload_queue: UploadQueueOpt = 4,
    image_size: Annotated[int, typer.Option(help="Target side (crop, stretch).", rich_help_panel=IMG)] = 1024,
    resize_mode: ResizeModeOpt = "crop",
    max_size: MaxSizeOpt = 1024,
    image_format: Annotated[str, typer.Option(help="jpg, png or webp (also Primus's JPEG, PNG, WEBP).", rich_help_panel=IMG)] = "jpg",
    image_quality: Annotated[int, typer.Option(help="JPEG/WebP quality 1-100.", rich_help_panel=IMG)] = 95,
    min_size: MinSizeOpt = 0,
    workers: WorkersOpt = None,
    hf_token_file: HfTokenFileOpt = None,
    center_crop: CenterCropOpt = None,
    variable_size: VariableSizeOpt = None,
    train_split: TrainSplitOpt = None,
    compress: CompressOpt = None,
) -> None:
    """Images and captions (folder, Hugging Face dataset or WebDataset tars) into raw,
    finalized Energon shards. Resumable; runs under torchrun. Alias: diffusion-raw."""
    from shardcook.pipeline.jobs.raw import RawJob

    _run_job(ctx, config, print_config, RawJob)


def chatml(
    ctx: typer.Context,
    config: ConfigOpt = None,
    print_config: PrintConfigOpt = False,
    input: Annotated[str | None, typer.Option("--input", help="A JSONL file: one record per line with images/image, videos/video, audio and a conversation (or question/answer fields); paths relative to the file.", rich_help_panel=SRC)] = None,
    hf_dataset: HfDatasetOpt = None,
    hf_split: HfSplitOpt = "train",
    hf_data_files: HfDataFilesOpt = None,
    max_samples: MaxSamplesOpt = None,
    image_column: Annotated[str | None, typer.Option(help="Image or image-list field/column (default: images or image).", rich_help_panel=FMT)] = None,
    conversation_column: Annotated[str | None, typer.Option(help="Conversation field/column (default: conversation, messages or conversations).", rich_help_panel=FMT)] = None,
    question_column: Annotated[str | None, typer.Option(help="Build a two-turn conversation from this question field/column (with --answer-column).", rich_help_panel=FMT)] = None,
    answer_column: Annotated[str | None, typer.Option(help="The answer field/column of a question/answer dataset.", rich_help_panel=FMT)] = None,
    system_prompt: Annotated[str | None, typer.Option(help="A system turn before each question/answer pair.", rich_help_panel=FMT)] = None,
    output_dir: OutputDirOpt = None,
    shard_size: Annotated[int, typer.Option(help="Inputs per work unit / shard, per split.", rich_help_panel=OUT)] = 1000,
    val_fraction: Annotated[float, typer.Option(help="Share of samples for val, by a stable hash of the sample id.", rich_help_panel=OUT)] = 0.01,
    hf_val_split: Annotated[str | None, typer.Option(help="huggingface: take val from this split instead of --val-fraction.", rich_help_panel=OUT)] = None,
    train_rows: Annotated[int | None, typer.Option(help="Train = the first N inputs (val = the next --val-rows, or the first of --hf-val-split).", rich_help_panel=OUT)] = None,
    val_rows: Annotated[int | None, typer.Option("--val-rows", "--validation-rows", help="Val = M inputs after the train rows (or the first M of --hf-val-split).", rich_help_panel=OUT)] = None,
    test_fraction: Annotated[float, typer.Option(help="Share of samples for test, by the same hash (beside --val-fraction's share).", rich_help_panel=OUT)] = 0.0,
    test_rows: Annotated[int | None, typer.Option(help="Test = K inputs after the train and val rows (needs --train-rows).", rich_help_panel=OUT)] = None,
    finalize: Annotated[bool, typer.Option("--finalize/--no-finalize", help="Index and check at the end.", rich_help_panel=OUT)] = True,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    scratch_dir: ScratchDirOpt = None,
    upload_queue: UploadQueueOpt = 4,
    image_format: Annotated[str, typer.Option(help="jpg or png for one image per sample (several: always JPEG in `jpgs`).", rich_help_panel=IMG)] = "jpg",
    image_quality: Annotated[int, typer.Option(help="JPEG quality 1-100.", rich_help_panel=IMG)] = 95,
    max_pixels: Annotated[int | None, typer.Option(help="Scale larger images and video frames down to at most this many pixels, keeping the aspect ratio.", rich_help_panel=IMG)] = None,
    workers: WorkersOpt = None,
    hf_token_file: HfTokenFileOpt = None,
    video_layout: Annotated[str, typer.Option(help="frames: sampled JPEG frames in `videos`; mp4: the MP4 file unchanged as `video.mp4`.", rich_help_panel=CHAT)] = "frames",
    video_frames_part: Annotated[str, typer.Option(help="frames: the part's name, videos or mp4s (Megatron-Bridge's VALOR32K recipe: field_map videos: mp4s).", rich_help_panel=CHAT)] = "videos",
    video_fps: Annotated[float, typer.Option(help="frames: frames kept per second of video.", rich_help_panel=CHAT)] = 2.0,
    max_frames: Annotated[int, typer.Option(help="frames: at most this many frames per video, evenly spread.", rich_help_panel=CHAT)] = 32,
) -> None:
    """Images, videos, audio and ChatML conversations (JSONL or Hugging Face) into
    Megatron-Bridge's Energon layout: train-/val-/test-shard-NNNNNN.tar, finalized. Resumable; runs
    under torchrun."""

    if (input is not None and hf_dataset is not None) or (
            input is None and hf_dataset is None and config is None):
        fail(ValueError("give exactly one of --input FILE.jsonl and --hf-dataset"))
    source_type = "huggingface" if hf_dataset is not None else "jsonl"
    from shardcook.pipeline.jobs.chatml import ChatmlJob

    _run_job(ctx, config, print_config, ChatmlJob,
             renamed={"input": "input_path", "max_pixels": "chatml.max_pixels"},
             extra={"source_type": (source_type, input is not None or hf_dataset is not None)})


def encode(
    ctx: typer.Context,
    config: ConfigOpt = None,
    print_config: PrintConfigOpt = False,
    hf_token_file: HfTokenFileOpt = None,
    layout: Annotated[str, typer.Option(help=encode_layouts_help(), rich_help_panel=MOD)] = "primus",
    model_path: Annotated[str, typer.Option(help="FLUX folder (vae/, text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/) or hub id.", rich_help_panel=MOD)] = "black-forest-labs/FLUX.1-dev",
    vae_path: Annotated[str | None, typer.Option(help="A folder or hub id holding just the VAE.", rich_help_panel=MOD)] = None,
    clip_path: Annotated[str | None, typer.Option(help="A folder or hub id holding just the CLIP text model (+ tokenizer).", rich_help_panel=MOD)] = None,
    t5_path: Annotated[str | None, typer.Option(help="A folder or hub id holding just the T5 encoder (+ tokenizer).", rich_help_panel=MOD)] = None,
    revision: Annotated[str | None, typer.Option(help="Hub revision of --model-path.", rich_help_panel=MOD)] = None,
    precision: Annotated[str | None, typer.Option(help="bf16, fp16 or fp32 (default: bf16; fp32 for --layout megatron-bridge, as its script).", rich_help_panel=MOD)] = None,
    stored_dtype: Annotated[str | None, typer.Option(help="dtype of the saved tensors (default: --precision).", rich_help_panel=MOD)] = None,
    batch_size: Annotated[int, typer.Option(help="Images per encoder batch.", rich_help_panel=MOD)] = 8,
    t5_max_length: Annotated[int, typer.Option(help="T5 padding length (256 suits FLUX.1-schnell).", rich_help_panel=MOD)] = 512,
    latent_mode: Annotated[str | None, typer.Option(help="sample (seeded per sample key), mode, or resample (also store the posterior mean/logvar so training draws a fresh latent every epoch); default: sample, mode for --layout megatron-bridge (which takes sample or mode).", rich_help_panel=MOD)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the latent sampling.", rich_help_panel=MOD)] = 0,
    device: Annotated[str | None, typer.Option(help="cuda, cuda:N or cpu (default: cuda:LOCAL_RANK when present, else cpu).", rich_help_panel=MOD)] = None,
    source_type: SourceTypeOpt = "directory",
    input_dir: InputDirOpt = None,
    hf_dataset: HfDatasetOpt = None,
    hf_split: HfSplitOpt = "train",
    hf_data_files: HfDataFilesOpt = None,
    hf_streaming: HfStreamingOpt = False,
    input_path: InputPathOpt = None,
    max_samples: MaxSamplesOpt = None,
    image_column: ImageColumnOpt = None,
    caption_column: CaptionColumnOpt = None,
    output_dir: OutputDirOpt = None,
    shard_size: ShardSizeOpt = 1000,
    split: SplitOpt = "1,0,0",
    finalize: FinalizeOpt = True,
    overwrite: OverwriteOpt = False,
    quiet: QuietOpt = False,
    scratch_dir: ScratchDirOpt = None,
    upload_queue: UploadQueueOpt = 4,
    image_size: Annotated[int, typer.Option(help="Target side (crop, stretch); a multiple of 16.", rich_help_panel=IMG)] = 1024,
    resize_mode: ResizeModeOpt = "crop",
    max_size: MaxSizeOpt = 1024,
    min_size: MinSizeOpt = 0,
    workers: WorkersOpt = None,
    center_crop: CenterCropOpt = None,
    variable_size: VariableSizeOpt = None,
    train_split: TrainSplitOpt = None,
    vae_latent_mode: VaeLatentModeOpt = None,
    compress: CompressOpt = None,
) -> None:
    """Images and captions into FLUX latents, T5 and CLIP embeddings in finalized Energon
    shards. Resumable; one GPU or many under torchrun. Alias: diffusion-encoded."""
    from shardcook.pipeline.jobs.encode import EncodeJob

    _run_job(ctx, config, print_config, EncodeJob, encode=True)
