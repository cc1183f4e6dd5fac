"""The run configuration's sections as dataclasses, their allowed values, and which section
each option belongs to."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardcook.errors import ConfigError

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


@dataclass
class SourceConfig:
    """Where the inputs come from."""

    source_type: str = "directory"
    input_dir: str | None = None
    hf_dataset: str | None = None
    hf_split: str = "train"
    hf_data_files: list[str] | None = None
    input_path: str | None = None
    max_samples: int | None = None
    #: Read a Hugging Face dataset's parquet files in place (`--hf-streaming`), not loaded whole.
    hf_streaming: bool = False

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

    output_dir: str | None = None
    shard_size: int = 1000
    split: list[float] = field(default_factory=lambda: [1.0, 0.0, 0.0])
    finalize: bool = True
    overwrite: bool = False
    quiet: bool = False
    #: Where shards bound for object storage are staged before upload (default: the system temp
    #: folder); local only.
    scratch_dir: str | None = None
    #: Shards staged for upload at most (waiting or uploading); the writer waits when full.
    upload_queue: int = 4

    @property
    def path(self) -> Path:
        """`output_dir` as a path; ConfigError when it is not set."""
        if not self.output_dir:
            raise ConfigError("--output-dir is required (or output.output_dir in the config).")
        return Path(self.output_dir)


@dataclass
class ImageConfig:
    """How images are decoded, resized and re-encoded."""

    image_size: int = 1024
    resize_mode: str = "crop"
    max_size: int = 1024
    image_format: str = "jpg"
    image_quality: int = 95
    min_size: int = 0
    max_pixels: int = 178_956_970
    workers: int | None = None


@dataclass
class ModelConfig:
    """The encoders (`encode` only; `raw` ignores this section). `precision` and `latent_mode`
    left unset take the `layout`'s defaults (its `Layout.encode_defaults`)."""

    layout: str = "primus"
    model_path: str = "black-forest-labs/FLUX.1-dev"
    vae_path: str | None = None
    clip_path: str | None = None
    t5_path: str | None = None
    revision: str | None = None
    precision: str | None = None
    stored_dtype: str | None = None
    batch_size: int = 8
    t5_max_length: int = 512
    latent_mode: str | None = None
    seed: int = 0
    device: str | None = None


@dataclass
class DataFormatConfig:
    """Which fields of an input hold the image and the caption (dotted paths into JSON)."""

    image_column: str | None = None
    caption_column: str | None = None
    #: Several candidate fields, tried in order per input (Primus's `image_keys`).
    image_columns: list[str] | None = None
    #: Several candidate fields, tried in order per input (Primus's `caption_keys`).
    caption_columns: list[str] | None = None


@dataclass
class AuthConfig:
    """Credentials: where the Hugging Face token is (the file is read, never printed)."""

    hf_token_file: str | None = None


@dataclass
class ChatmlConfig:
    """How `chatml` builds conversations, splits them and stores their media."""

    conversation_column: str | None = None
    question_column: str | None = None
    answer_column: str | None = None
    system_prompt: str | None = None
    val_fraction: float = 0.01
    #: Share of samples for test, by the same hash (the band after val's).
    test_fraction: float = 0.0
    hf_val_split: str | None = None
    train_rows: int | None = None
    val_rows: int | None = None
    test_rows: int | None = None
    max_pixels: int | None = None
    video_layout: str = "frames"
    video_frames_part: str = "videos"
    video_fps: float = 2.0
    max_frames: int = 32


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
