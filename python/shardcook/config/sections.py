"""The run configuration's sections as dataclasses, their allowed values, and which section
each option belongs to. A field that is a command-line option of raw, encode and chatml declares
its --help text and panel here (`option`); `shardcook.cli` builds the options from them."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcook.errors import ConfigError
from shardcook.layouts import encode_layouts_help

SOURCE_TYPES = ("directory", "huggingface", "webdataset", "jsonl")
#: The input option each source type needs.
SOURCE_LOCATIONS = {"directory": "input_dir", "huggingface": "hf_dataset",
                    "webdataset": "input_path", "jsonl": "input_path"}
#: The largest image side shardcook writes: WebP's limit, and a 16383^2 RGB image is 0.8 GB.
MAX_IMAGE_SIDE = 16383
#: --workers above this many threads per core is capped (thousands of threads only thrash).
MAX_WORKERS_PER_CPU = 4
RESIZE_MODES = ("crop", "stretch", "variable", "bucket")
#: Primus's `vae_latent_mode` values -> our `latent_mode`.
PRIMUS_LATENT_MODES = {"presampled": "sample", "resample": "resample"}
IMAGE_FORMATS = ("jpg", "png", "webp")
#: Other spellings of the image formats (Primus's raw takes JPEG, PNG, WEBP).
IMAGE_FORMAT_ALIASES = {"jpeg": "jpg", "JPEG": "jpg", "JPG": "jpg", "PNG": "png", "WEBP": "webp"}
VIDEO_LAYOUTS = ("frames", "mp4")
#: The largest --video-fps: no camera records faster, and a grid finer than the clip's own
#: frames only skips the video for too few frames.
MAX_VIDEO_FPS = 1000.0
#: What a chatml sample's single image part may be.
CHATML_IMAGE_FORMATS = ("jpg", "png")


# The --help panels the run commands' options are grouped in.
SOURCE, OUTPUT, IMAGE, DATA_FORMAT, MODEL, CHATML = (
    "Source", "Output", "Image", "Data format", "Model", "ChatML")
#: The key of a field's metadata that makes it a command-line option (a `CliOption`).
CLI = "cli"


@dataclass(frozen=True)
class CliOption:
    """How a config field is a command-line option of raw, encode and chatml: its --help text
    (or a function computing it when --help is built), its panel, its flags when they are not
    just `--field-name`, and the wording of a command that says it differently (`help_for`, by
    the command's function name: raw, encode, chatml, preview)."""

    help: str | Callable[[], str]
    panel: str
    flags: tuple[str, ...] = ()
    help_for: Mapping[str, str] = field(default_factory=dict)

    def help_in(self, command: str) -> str:
        """The help text `command` shows."""
        text = self.help_for.get(command, self.help)
        return text if isinstance(text, str) else text()


def option(default: Any, help: str | Callable[[], str], panel: str, *,
           flags: tuple[str, ...] = (), help_for: Mapping[str, str] | None = None) -> Any:
    """A config field that is also a command-line option; a list default is copied per
    instance."""
    metadata = {CLI: CliOption(help, panel, flags, dict(help_for or {}))}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class SourceConfig:
    """Where the inputs come from."""

    source_type: str = option("directory", "directory, huggingface or webdataset.", SOURCE)
    input_dir: str | None = option(
        None, "directory: images/ + captions/, or a flat folder.", SOURCE)
    hf_dataset: str | None = option(
        None, "huggingface: hub name, save_to_disk folder or data file.", SOURCE)
    hf_split: str = option("train", "huggingface: the split.", SOURCE)
    hf_data_files: list[str] | None = option(None, "huggingface: data files, repeatable.", SOURCE)
    input_path: str | None = option(None, "webdataset: tar glob, brace pattern or folder.", SOURCE)
    max_samples: int | None = option(None, "Use only the first N inputs.", SOURCE)
    #: Read a Hugging Face dataset's parquet files in place (`--hf-streaming`), not loaded whole.
    hf_streaming: bool = option(
        False, "huggingface: read the parquet files a row group at a time instead of downloading "
               "and converting the dataset first (same shards).", SOURCE)

    def location(self) -> str:
        """The input option `source_type` needs (`input_dir`, `hf_dataset` or `input_path`);
        ConfigError when it is not set."""
        need = SOURCE_LOCATIONS[self.source_type]
        value = getattr(self, need)
        if not value:
            raise ConfigError(
                f"--source-type {self.source_type} needs --{need.replace('_', '-')} "
                f"(or source.{need} in the config)."
            )
        return str(value)


@dataclass
class OutputConfig:
    """Where and how shards are written."""

    output_dir: str | None = option(
        None, "The dataset folder to write: a local path, or msc://PROFILE/path or "
              "s3://bucket/path in object storage.", OUTPUT)
    shard_size: int = option(1000, "Inputs per work unit / shard.", OUTPUT,
                             help_for={"chatml": "Inputs per work unit / shard, per split."})
    #: On the command line as comma-separated ratios (`--split 1,0,0`).
    split: list[float] = option([1.0, 0.0, 0.0], "train,val,test ratios by whole shard.", OUTPUT)
    finalize: bool = option(True, "Index and validate at the end.", OUTPUT,
                            flags=("--finalize/--no-finalize",),
                            help_for={"chatml": "Index and check at the end."})
    overwrite: bool = option(False, "Delete an earlier run in --output-dir and start over.", OUTPUT)
    quiet: bool = option(False, "No progress bars and no summary.", OUTPUT)
    #: `shardcook report`'s page of the finished dataset, in `.shardcook/` beside report.json.
    report_html: bool = option(
        False, "At the end, also write .shardcook/report.html beside report.json: one page "
               "showing the dataset, its health and its samples (needs --finalize).", OUTPUT)
    #: Where shards bound for object storage are staged before upload (default: the system temp
    #: folder); local only.
    scratch_dir: str | None = option(
        None, "Object storage: the local folder shards are staged in until uploaded (default: "
              "the system temp folder).", OUTPUT)
    #: Shards staged for upload at most (waiting or uploading); the writer waits when full.
    upload_queue: int = option(
        4, "Object storage: at most this many shards staged for upload; writing waits when full "
           "(scratch space: about this many shards plus the one being written).", OUTPUT)

    @property
    def path(self) -> Path:
        """`output_dir` as a path; ConfigError when it is not set."""
        if not self.output_dir:
            raise ConfigError("--output-dir is required (or output.output_dir in the config).")
        return Path(self.output_dir)


@dataclass
class ImageConfig:
    """How images are decoded, resized and re-encoded."""

    image_size: int = option(1024, "Target side (crop, stretch).", IMAGE,
                             help_for={"encode": "Target side (crop, stretch); a multiple of 16."})
    resize_mode: str = option("crop", "crop, stretch, variable or bucket.", IMAGE)
    max_size: int = option(1024, "Longest side (variable, bucket).", IMAGE)
    image_format: str = option(
        "jpg", "jpg, png or webp (also Primus's JPEG, PNG, WEBP).", IMAGE,
        help_for={"chatml": "jpg or png for one image per sample (several: always JPEG in "
                            "`jpgs`)."})
    image_quality: int = option(95, "JPEG/WebP quality 1-100.", IMAGE,
                                help_for={"chatml": "JPEG quality 1-100."})
    min_size: int = option(0, "Skip images whose short side is smaller.", IMAGE)
    max_pixels: int = 178_956_970
    workers: int | None = option(
        None, "Image threads (default: all cores; encode on a CPU: half of them). --num-workers "
              "is Primus's spelling.", IMAGE, flags=("--workers", "--num-workers"))


@dataclass
class ModelConfig:
    """The encoders (`encode` only; `raw` ignores this section). `precision` and `latent_mode`
    left unset take the `layout`'s defaults (its `Layout.encode_defaults`)."""

    # computed from the layout registry when --help is built
    layout: str = option("primus", encode_layouts_help, MODEL)
    model_path: str = option(
        "black-forest-labs/FLUX.1-dev", "FLUX folder (vae/, text_encoder/, tokenizer/, "
        "text_encoder_2/, tokenizer_2/) or hub id.", MODEL)
    vae_path: str | None = option(None, "A folder or hub id holding just the VAE.", MODEL)
    clip_path: str | None = option(
        None, "A folder or hub id holding just the CLIP text model (+ tokenizer).", MODEL)
    t5_path: str | None = option(
        None, "A folder or hub id holding just the T5 encoder (+ tokenizer).", MODEL)
    revision: str | None = option(None, "Hub revision of --model-path.", MODEL)
    precision: str | None = option(
        None, "bf16, fp16 or fp32 (default: bf16; fp32 for --layout megatron-bridge, as its "
              "script).", MODEL)
    stored_dtype: str | None = option(
        None, "dtype of the saved tensors (default: --precision).", MODEL)
    batch_size: int = option(8, "Images per encoder batch.", MODEL)
    t5_max_length: int = option(512, "T5 padding length (256 suits FLUX.1-schnell).", MODEL)
    latent_mode: str | None = option(
        None, "sample (seeded per sample key), mode, or resample (also store the posterior "
              "mean/logvar so training draws a fresh latent every epoch); default: sample, mode "
              "for --layout megatron-bridge (which takes sample or mode).", MODEL)
    seed: int = option(0, "Seed of the latent sampling.", MODEL)
    device: str | None = option(
        None, "cuda, cuda:N or cpu (default: cuda:LOCAL_RANK when present, else cpu).", MODEL)


@dataclass
class DataFormatConfig:
    """Which fields of an input hold the image and the caption (dotted paths into JSON)."""

    image_column: str | None = option(
        None, "Image column / tar part (default: detected).", DATA_FORMAT,
        help_for={"chatml": "Image or image-list field/column (default: images or image)."})
    caption_column: str | None = option(
        None, "Caption column or dotted path, e.g. json.caption (default: detected).",
        DATA_FORMAT)
    #: Several candidate fields, tried in order per input (Primus's `image_keys`).
    image_columns: list[str] | None = None
    #: Several candidate fields, tried in order per input (Primus's `caption_keys`).
    caption_columns: list[str] | None = None


@dataclass
class AuthConfig:
    """Credentials: where the Hugging Face token is (the file is read, never printed)."""

    hf_token_file: str | None = option(
        None, "A file holding a Hugging Face token (mode 600 or 400), for models and datasets. "
              "Else HF_TOKEN, else the saved `huggingface-cli login`. Never printed.", SOURCE)


@dataclass
class ChatmlConfig:
    """How `chatml` builds conversations, splits them and stores their media."""

    conversation_column: str | None = option(
        None, "Conversation field/column (default: conversation, messages or conversations).",
        DATA_FORMAT)
    question_column: str | None = option(
        None, "Build a two-turn conversation from this question field/column (with "
              "--answer-column).", DATA_FORMAT)
    answer_column: str | None = option(
        None, "The answer field/column of a question/answer dataset.", DATA_FORMAT)
    system_prompt: str | None = option(
        None, "A system turn before each question/answer pair.", DATA_FORMAT)
    val_fraction: float = option(
        0.01, "Share of samples for val, by a stable hash of the sample id.", OUTPUT)
    #: Share of samples for test, by the same hash (the band after val's).
    test_fraction: float = option(
        0.0, "Share of samples for test, by the same hash (beside --val-fraction's share).",
        OUTPUT)
    hf_val_split: str | None = option(
        None, "huggingface: take val from this split instead of --val-fraction.", OUTPUT)
    train_rows: int | None = option(
        None, "Train = the first N inputs (val = the next --val-rows, or the first of "
              "--hf-val-split).", OUTPUT)
    val_rows: int | None = option(
        None, "Val = M inputs after the train rows (or the first M of --hf-val-split).", OUTPUT,
        flags=("--val-rows", "--validation-rows"))
    test_rows: int | None = option(
        None, "Test = K inputs after the train and val rows (needs --train-rows).", OUTPUT)
    max_pixels: int | None = option(
        None, "Scale larger images and video frames down to at most this many pixels, keeping "
              "the aspect ratio.", IMAGE)
    video_layout: str = option(
        "frames", "frames: sampled JPEG frames in `videos`; mp4: the MP4 file unchanged as "
                  "`video.mp4`.", CHATML)
    video_frames_part: str = option(
        "videos", "frames: the part's name, videos or mp4s (Megatron-Bridge's VALOR32K recipe: "
                  "field_map videos: mp4s).", CHATML)
    video_fps: float = option(2.0, "frames: frames kept per second of video.", CHATML)
    max_frames: int = option(
        32, "frames: at most this many frames per video, evenly spread.", CHATML)


@dataclass
class RunConfig:
    """The whole resolved configuration of one run."""

    source: SourceConfig = field(default_factory=SourceConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data_format: DataFormatConfig = field(default_factory=DataFormatConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    #: Only `chatml` runs have this section (so other commands' manifests do not change).
    chatml: ChatmlConfig | None = None

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The configuration as plain nested dicts (JSON and YAML safe)."""
        out = dataclasses.asdict(self)
        if self.chatml is None:
            del out["chatml"]
        return out

    def to_yaml(self) -> str:
        """The configuration as YAML, in section and field order."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


_SECTION_CLASSES = {
    "source": SourceConfig,
    "output": OutputConfig,
    "image": ImageConfig,
    "model": ModelConfig,
    "data_format": DataFormatConfig,
    "auth": AuthConfig,
    "chatml": ChatmlConfig,
}
# option name -> section name; a name two sections share goes to the first (chatml's
# `max_pixels` is addressed as `chatml.max_pixels`)
OPTION_SECTION: dict[str, str] = {}
for _section_name, _cls in _SECTION_CLASSES.items():
    for _f in dataclasses.fields(_cls):
        OPTION_SECTION.setdefault(_f.name, _section_name)


def option_key(name: str) -> tuple[str, str]:
    """(section, field) of an option name, plain (`image_size`) or dotted (`chatml.max_pixels`)."""
    if "." in name:
        section, _, key = name.partition(".")
        return section, key
    if name not in OPTION_SECTION:
        raise AssertionError(f"CLI option {name!r} has no config field")
    return OPTION_SECTION[name], name


def option_field(name: str) -> tuple[dataclasses.Field[Any], Any]:
    """The config field an option name stands for (see `option_key`), and its type."""
    section, key = option_key(name)
    cls = _SECTION_CLASSES[section]
    (found,) = [f for f in dataclasses.fields(cls) if f.name == key]
    return found, typing.get_type_hints(cls)[key]
