"""The option types shared by several commands, declared once, and `resolve_config`, the one
way raw, encode, chatml and their Primus aliases turn their options into a `RunConfig`.

Options mirror shardcook.config (YAML key = option name with `_`); an option given on the
command line beats the --config file, which beats the defaults shown in --help.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from shardcook.layouts import encodings

if TYPE_CHECKING:
    from shardcook.config import RunConfig

# The --help panels the options are grouped in.
SRC, OUT, IMG, FMT = "Source", "Output", "Image", "Data format"
PRIMUS = "Primus aliases"

DatasetArg = Annotated[str, typer.Argument(
    help="The dataset folder, or its URL (msc://PROFILE/path, s3://bucket/path).",
    show_default=False)]
DatasetScratchOpt = Annotated[Path | None, typer.Option(
    help="For a dataset URL: where its small files and a few shards at a time are handled "
         "(removed afterwards) [default: the temporary folder].")]
EncodingOpt = Annotated[
    str | None,
    typer.Option(help=f"{', '.join(encodings())} (default: from dataset.yaml or the manifest)."),
]

ConfigOpt = Annotated[Path | None, typer.Option(help="YAML config (sections source, output, image, model, data_format).")]
PrintConfigOpt = Annotated[bool, typer.Option("--print-config", help="Print the resolved config and exit.")]
SourceTypeOpt = Annotated[str, typer.Option(help="directory, huggingface or webdataset.", rich_help_panel=SRC)]
InputDirOpt = Annotated[str | None, typer.Option(help="directory: images/ + captions/, or a flat folder.", rich_help_panel=SRC)]
HfSplitOpt = Annotated[str, typer.Option(help="huggingface: the split.", rich_help_panel=SRC)]
HfDataFilesOpt = Annotated[list[str] | None, typer.Option(help="huggingface: data files, repeatable.", rich_help_panel=SRC)]
HfStreamingOpt = Annotated[bool, typer.Option(help="huggingface: read the parquet files a row group at a time instead of downloading and converting the dataset first (same shards).", rich_help_panel=SRC)]
InputPathOpt = Annotated[str | None, typer.Option(help="webdataset: tar glob, brace pattern or folder.", rich_help_panel=SRC)]
MaxSamplesOpt = Annotated[int | None, typer.Option(help="Use only the first N inputs.", rich_help_panel=SRC)]
CaptionColumnOpt = Annotated[str | None, typer.Option(help="Caption column or dotted path, e.g. json.caption (default: detected).", rich_help_panel=FMT)]
OverwriteOpt = Annotated[bool, typer.Option(help="Delete an earlier run in --output-dir and start over.", rich_help_panel=OUT)]
QuietOpt = Annotated[bool, typer.Option(help="No progress bars and no summary.", rich_help_panel=OUT)]
ResizeModeOpt = Annotated[str, typer.Option(help="crop, stretch, variable or bucket.", rich_help_panel=IMG)]
MaxSizeOpt = Annotated[int, typer.Option(help="Longest side (variable, bucket).", rich_help_panel=IMG)]
MinSizeOpt = Annotated[int, typer.Option(help="Skip images whose short side is smaller.", rich_help_panel=IMG)]
WorkersOpt = Annotated[int | None, typer.Option("--workers", "--num-workers", help="Image threads (default: all cores; encode on a CPU: half of them). --num-workers is Primus's spelling.", rich_help_panel=IMG)]
HfDatasetOpt = Annotated[str | None, typer.Option(help="huggingface: hub name, save_to_disk folder or data file.", rich_help_panel=SRC)]
ImageColumnOpt = Annotated[str | None, typer.Option(help="Image column / tar part (default: detected).", rich_help_panel=FMT)]
OutputDirOpt = Annotated[str | None, typer.Option(help="The dataset folder to write: a local path, or msc://PROFILE/path or s3://bucket/path in object storage.", rich_help_panel=OUT)]
ScratchDirOpt = Annotated[str | None, typer.Option(help="Object storage: the local folder shards are staged in until uploaded (default: the system temp folder).", rich_help_panel=OUT)]
UploadQueueOpt = Annotated[int, typer.Option(help="Object storage: at most this many shards staged for upload; writing waits when full (scratch space: about this many shards plus the one being written).", rich_help_panel=OUT)]
ShardSizeOpt = Annotated[int, typer.Option(help="Inputs per work unit / shard.", rich_help_panel=OUT)]
SplitOpt = Annotated[str, typer.Option(help="train,val,test ratios by whole shard.", rich_help_panel=OUT)]
FinalizeOpt = Annotated[bool, typer.Option("--finalize/--no-finalize", help="Index and validate at the end.", rich_help_panel=OUT)]
HfTokenFileOpt = Annotated[str | None, typer.Option(help="A file holding a Hugging Face token (mode 600 or 400), for models and datasets. Else HF_TOKEN, else the saved `huggingface-cli login`. Never printed.", rich_help_panel=SRC)]
# Primus's spellings (`primus-cli direct -- data diffusion-raw|diffusion-encoded`), as aliases.
CompressOpt = Annotated[bool | None, typer.Option("--compress", help="Primus: refused (shards stay uncompressed: Energon reads them by byte offset).", rich_help_panel=PRIMUS, show_default=False)]
CenterCropOpt = Annotated[bool | None, typer.Option("--center-crop/--no-center-crop", help="Primus: --center-crop = --resize-mode crop, --no-center-crop = stretch.", rich_help_panel=PRIMUS, show_default=False)]
VariableSizeOpt = Annotated[bool | None, typer.Option("--variable-size", help="Primus: = --resize-mode variable (long side to --max-size).", rich_help_panel=PRIMUS, show_default=False)]
TrainSplitOpt = Annotated[float | None, typer.Option(help="Primus: F = --split F,(1-F)/2,(1-F)/2.", rich_help_panel=PRIMUS, show_default=False)]
VaeLatentModeOpt = Annotated[str | None, typer.Option(help="Primus: presampled = --latent-mode sample, resample = --latent-mode resample.", rich_help_panel=PRIMUS, show_default=False)]

#: Parameters of the pipeline commands that are not config options.
_NOT_CONFIG = ("config", "print_config")


def resolve_config(
    ctx: typer.Context,
    config: Path | None,
    *,
    renamed: dict[str, str] | None = None,
    extra: dict[str, tuple[object, bool]] | None = None,
    encode: bool = False,
) -> RunConfig:
    """The run config from the command line (explicit options win), the --config file and the
    defaults; Primus's flags become the options they stand for. `renamed` maps a parameter to
    its config name (`input` -> `input_path`, `max_pixels` -> `chatml.max_pixels`); `extra`
    adds options the command implies, as (value, given explicitly); `encode` adds encode's
    checks and defaults (`config.resolve`)."""
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
    return resolve(values, explicit, config, primus, encode=encode)
