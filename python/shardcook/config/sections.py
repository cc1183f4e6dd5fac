"""The run configuration's sections as dataclasses, their allowed values, and which section
each option belongs to. A field that is a command-line option of raw, encode, chatml and ingest
declares its --help text and panel here (`option`); `shardcook.cli` builds the options from
them."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any, cast

from shardcook.dataset.media.meta import MediaFilter
from shardcook.encoders.loading import LATENT_MODES, PRECISIONS
from shardcook.encoders.models import model_types
from shardcook.errors import ConfigError
from shardcook.fields import (
    LOCAL,
    PLACE,
    URL,
    Place,
    Rule,
    bounded,
    matching,
    one_of,
    option,
    setting,
)
from shardcook.layouts import (
    DEFAULT_ENCODE_LAYOUT,
    Layout,
    encode_default_help,
    encode_layouts_help,
)
from shardcook.layouts.automodel import RESOLUTION_PRESETS
from shardcook.layouts.chatml import VIDEO_FRAMES_PARTS
from shardcook.storage.location import Location, locate

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


#: `encode`'s video modes: each clip whole, or N frames of it as 1-frame samples.
VIDEO_MODES = ("video", "frames")
#: Where AutoModel's video tool finds captions (its `--caption_format`).
AUTOMODEL_CAPTION_FORMATS = ("sidecar", "meta_json", "jsonl")
#: `--resize-mode` for video inputs: the interpolation of Bridge's Wan prep script.
VIDEO_RESIZE_MODES = ("bilinear", "bicubic", "nearest", "area", "lanczos")

# The --help panels the run commands' options are grouped in.
SOURCE, OUTPUT, IMAGE, DATA_FORMAT, MODEL, CHATML, VIDEO, DOWNLOAD = (
    "Source", "Output", "Image", "Data format", "Model", "ChatML", "Video", "Download")
AT_LEAST_1, AT_LEAST_0 = bounded(1), bounded(0)
#: An image side: WebP's limit is the upper bound (said on its own, as it is the one users meet).
IMAGE_SIDE = (AT_LEAST_1, bounded(high=MAX_IMAGE_SIDE, why="WebP's largest side"))
#: FLUX's T5 tokenizer (tokenizer_2) caps prompts at 512 tokens.
T5_MAX_LENGTH = 512
#: The most pixels (frames x height x width, as the VAE gets them) one video may give: 2**27,
#: 384 MiB of RGB. Wan's own 81 x 480 x 832 and 81 x 720 x 1280 (and Wan 2.2's 121 x 704 x
#: 1280) fit; 81 frames of 1080p do not, nor a 4000 x 4000 clip kept at its own size.
MAX_CLIP_PIXELS = 1 << 27
FRACTION = (bounded(0, 1, below=True),)
#: Split names become shard prefixes (`train-shard-000000.tar`), so lowercase letters only.
SPLIT_NAME = matching(r"[a-z]+", "lowercase letters (train, val, ...)")
#: More concurrent downloads only share the same bandwidth, and each is a thread.
MAX_DOWNLOADS = 64
#: Below a million seconds: a larger timeout would wait on a dead server for weeks.
STALL = Rule(lambda v: 0 < v < 1e6, "a number of seconds above 0 (and under 1,000,000)")


class Section:
    """What every section has besides its fields: its `Place` options parsed into
    `storage.Location`s, once, by `located`."""

    def __post_init__(self) -> None:
        #: field name -> (the value parsed, its locations)
        self._located: dict[str, tuple[Any, Location | list[Location] | None]] = {}

    def located(self, name: str, what: str | None = None) -> Location | list[Location] | None:
        """Option `name` (a field with a `Place`) as a `Location`, a list of them for a list
        option, or None when unset: parsed at the first call (the config's checks make it, so
        `what` there names the option as the command spells it) and again only if the value
        changed since.

        Raises:
            ConfigError: a URL where the option takes local paths, one that cannot be opened,
                or a path no file system takes.
        """
        value = getattr(self, name)
        if name in self._located and self._located[name][0] == value:
            return self._located[name][1]
        (place,) = [f.metadata[PLACE] for f in dataclasses.fields(cast(Any, self))
                    if f.name == name]
        what = what or f"--{name.replace('_', '-')}"

        def one(v: str) -> Location:
            return locate(v, what, urls=place.urls, msc_only=place.msc_only)

        parsed = (None if value is None else [one(v) for v in value] if isinstance(value, list)
                  else one(value))
        self._located[name] = (list(value) if isinstance(value, list) else value, parsed)
        return parsed

    def place(self, name: str, location: Location) -> None:
        """Sets option `name` to `location`, already parsed: its text, and its store, which a
        text may not name (a `MemoryStore`: a caller of the Python entry, or a test)."""
        setattr(self, name, location.text)
        self._located[name] = (location.text, location)

    def where(self, name: str) -> Location | None:
        """`located(name)` of an option naming one place."""
        found = self.located(name)
        assert not isinstance(found, list), f"{name} names several places"
        return found


@dataclass
class SourceConfig(Section):
    """Where the inputs come from."""

    source_type: str = option("directory", "directory, huggingface or webdataset.", SOURCE,
                                rules=[one_of(SOURCE_TYPES)])
    input_dir: str | None = option(
        None, "directory: images/ + captions/, or a flat folder.", SOURCE, place=URL)
    hf_dataset: str | None = option(
        None, "huggingface: hub name, save_to_disk folder or data file.", SOURCE, place=LOCAL)
    hf_split: str = option("train", "huggingface: the split.", SOURCE)
    hf_data_files: list[str] | None = option(
        None, "huggingface: data files, repeatable.", SOURCE,
        # `datasets` opens them itself, through the filesystem MSC gives fsspec, which takes
        # `msc://` URLs only (fsspec would hand `s3://` to another client)
        place=Place(urls=True, msc_only="Hugging Face data files in object storage are read "
                                        "through an MSC profile"))
    input_path: str | None = option(None, "webdataset: tar glob, brace pattern or folder.", SOURCE,
                                    place=URL)
    max_samples: int | None = option(None, "Use only the first N inputs.", SOURCE,
                                      rules=[AT_LEAST_1])
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

    def data_files(self) -> list[Location] | None:
        """`hf_data_files` parsed (see `Section.located`); None when there are none."""
        found = self.located("hf_data_files")
        assert found is None or isinstance(found, list)
        return found or None

    def input_location(self) -> Location:
        """`location()` parsed (see `Section.located`)."""
        self.location()
        found = self.where(SOURCE_LOCATIONS[self.source_type])
        assert found is not None  # set: `location()` says so
        return found


@dataclass
class OutputConfig(Section):
    """Where and how shards are written."""

    output_dir: str | None = option(
        None, "The dataset folder to write: a local path, or msc://PROFILE/path or "
              "s3://bucket/path in object storage.", OUTPUT, place=URL,
        help_for={"ingest": "The dataset folder to write (each split in a folder of its own "
                            "there): a local path, or msc://PROFILE/path or s3://bucket/path in "
                            "object storage."})
    shard_size: int = option(1000, "Inputs per work unit / shard; left out, fewer when the inputs "
                                   "are too few for each --split share to get a shard.", OUTPUT,
                             help_for={"chatml": "Inputs per work unit / shard, per split."},
                             rules=[AT_LEAST_1])
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
    #: folder); local only. The dataset commands' --scratch-dir is another folder
    #: (`dataset.arguments.DATASET_SCRATCH_HELP`).
    scratch_dir: str | None = option(
        None, "Output in object storage only: the local folder in which this run stages its "
              "shards until they are uploaded (default: the system temp folder).", OUTPUT,
        place=LOCAL)
    #: Shards staged for upload at most (waiting or uploading); the writer waits when full.
    upload_queue: int = option(
        4, "Object storage: at most this many shards staged for upload; writing waits when full "
           "(scratch space: about this many shards plus the one being written).", OUTPUT,
        rules=[AT_LEAST_1])
    #: Energon's media metadata of the parts written, recorded per shard as each is written
    #: (`dataset/media/records.py`), for finalize's index.sqlite (at most one of the three).
    media_metadata_by_extension: bool = option(
        False, "Record the media metadata (size, format, duration) of the image, video and "
               "audio parts as they are written, for finalize's index.sqlite, taking them by "
               "their extension, as `energon prepare --media-metadata-by-extension` does.",
        OUTPUT)
    media_metadata_by_glob: str | None = option(
        None, "As --media-metadata-by-extension, taking the parts whose lowercased member name "
              "matches one of these comma-separated glob patterns (e.g. '*.jpg,*.png').", OUTPUT)
    media_metadata_by_header: bool = option(
        False, "As --media-metadata-by-extension, taking parts by their content's header (then "
               "their extension).", OUTPUT)

    @property
    def media_filter(self) -> MediaFilter | None:
        """The filter the `media_metadata_by_*` options ask for; None when none is given.

        Raises:
            ConfigError: more than one of them, or an empty pattern list.
        """
        return MediaFilter.from_flags(self.media_metadata_by_glob,
                                      self.media_metadata_by_header,
                                      self.media_metadata_by_extension)

    @property
    def location(self) -> Location:
        """`output_dir` parsed (see `Section.located`): the one way to it, a local path or a
        URL; ConfigError when it is not set."""
        if not self.output_dir:
            raise ConfigError("--output-dir is required (or output.output_dir in the config).")
        found = self.where("output_dir")
        assert found is not None
        return found


@dataclass
class ImageConfig(Section):
    """How images are decoded, resized and re-encoded."""

    image_size: int = option(1024, "Target side (crop, stretch).", IMAGE,
                             help_for={"encode": "Target side (crop, stretch); a multiple of 16."},
                             rules=IMAGE_SIDE)
    resize_mode: str = option(
        "crop", "crop, stretch, variable or bucket; for video (--layout wan): bilinear "
                "(default), bicubic, nearest, area or lanczos.", IMAGE,
        rules=[one_of(RESIZE_MODES + VIDEO_RESIZE_MODES)])
    max_size: int = option(1024, "Longest side (variable, bucket).", IMAGE, rules=IMAGE_SIDE)
    image_format: str = option(
        "jpg", "jpg, png or webp (also Primus's JPEG, PNG, WEBP).", IMAGE,
        help_for={"chatml": "jpg or png for one image per sample (several: always JPEG in "
                            "`jpgs`)."}, rules=[one_of(IMAGE_FORMATS)])
    image_quality: int = option(95, "JPEG/WebP quality 1-100.", IMAGE,
                                help_for={"chatml": "JPEG quality 1-100."}, rules=[bounded(1, 100)])
    min_size: int = option(0, "Skip images whose short side is smaller.", IMAGE,
                           rules=[AT_LEAST_0])
    max_pixels: int = setting(178_956_970, AT_LEAST_1)
    workers: int | None = option(
        None, "Image threads (default: all cores; encode on a CPU: half of them). --num-workers "
              "is Primus's spelling.", IMAGE, flags=("--workers", "--num-workers"),
        rules=[AT_LEAST_1])


@dataclass
class ModelConfig(Section):
    """The encoders (`encode` only; `raw` ignores this section). `precision` and `latent_mode`
    left unset take the `layout`'s defaults (its `EncodeSpec.defaults`)."""

    # computed from the layout registry when --help is built
    layout: str = option(DEFAULT_ENCODE_LAYOUT, encode_layouts_help, MODEL)
    model_path: str = option(
        "black-forest-labs/FLUX.1-dev", "FLUX folder (vae/, text_encoder/, tokenizer/, "
        "text_encoder_2/, tokenizer_2/) or hub id.", MODEL, place=LOCAL)
    vae_path: str | None = option(None, "A folder or hub id holding just the VAE.", MODEL,
                                  place=LOCAL)
    clip_path: str | None = option(
        None, "A folder or hub id holding just the CLIP text model (+ tokenizer).", MODEL,
        place=LOCAL)
    t5_path: str | None = option(
        None, "A folder or hub id holding just the T5 encoder (+ tokenizer).", MODEL,
        place=LOCAL)
    revision: str | None = option(None, "Hub revision of --model-path.", MODEL)
    precision: str | None = option(
        None, lambda: f"bf16, fp16 or fp32 ({encode_default_help('precision')}).", MODEL,
        rules=[one_of(tuple(PRECISIONS))])
    stored_dtype: str | None = option(
        None, "dtype of the saved tensors (default: --precision).", MODEL,
        rules=[one_of(tuple(PRECISIONS))])
    batch_size: int = option(8, "Images per encoder batch.", MODEL, rules=[AT_LEAST_1])
    t5_max_length: int = option(
        T5_MAX_LENGTH, "FLUX's T5 padding length (256 suits FLUX.1-schnell; not for --layout "
                       "wan).", MODEL,
        rules=[bounded(1, T5_MAX_LENGTH, why="the FLUX T5 tokenizer's limit")])
    latent_mode: str | None = option(
        None, lambda: "sample (seeded per sample key), mode, or resample (also store the "
                      "posterior mean/logvar so training draws a fresh latent every epoch); "
                      f"{encode_default_help('latent_mode')}.", MODEL,
        rules=[one_of(LATENT_MODES)])
    seed: int = option(0, "Seed of the latent sampling.", MODEL)
    device: str | None = option(
        None, "cuda, cuda:N or cpu (default: cuda:LOCAL_RANK when present, else cpu).", MODEL,
        rules=[matching(r"auto|cpu|cuda(?::\d{1,4})?", "cpu, cuda or cuda:N")])
    compile: bool = option(
        False, "torch.compile the VAE's encoder and the text encoders, and on CUDA let cuDNN "
               "time its convolution algorithms: faster on a GPU after a compile of tens of "
               "seconds; values agree with a run without it to rounding, not byte for byte.",
        MODEL)


@dataclass
class DataFormatConfig(Section):
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
class AuthConfig(Section):
    """Credentials: where the Hugging Face token is (the file is read, never printed)."""

    hf_token_file: str | None = option(
        None, "A file holding a Hugging Face token (mode 600 or 400), for models and datasets. "
              "Else HF_TOKEN, else the saved `huggingface-cli login`. Never printed.", SOURCE,
        place=LOCAL)


@dataclass
class ChatmlConfig(Section):
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
        0.01, "Share of samples for val, by a stable hash of the sample id.", OUTPUT,
        rules=FRACTION)
    #: Share of samples for test, by the same hash (the band after val's).
    test_fraction: float = option(
        0.0, "Share of samples for test, by the same hash (beside --val-fraction's share).",
        OUTPUT, rules=FRACTION)
    hf_val_split: str | None = option(
        None, "huggingface: take val from this split instead of --val-fraction.", OUTPUT)
    train_rows: int | None = option(
        None, "Train = the first N inputs (val = the next --val-rows, or the first of "
              "--hf-val-split).", OUTPUT, rules=[AT_LEAST_1])
    val_rows: int | None = option(
        None, "Val = M inputs after the train rows (or the first M of --hf-val-split).", OUTPUT,
        flags=("--val-rows", "--validation-rows"), rules=[AT_LEAST_0])
    test_rows: int | None = option(
        None, "Test = K inputs after the train and val rows (needs --train-rows).", OUTPUT,
        rules=[AT_LEAST_0])
    max_pixels: int | None = option(
        None, "Scale larger images and video frames down to at most this many pixels, keeping "
              "the aspect ratio.", IMAGE, rules=[AT_LEAST_1])
    video_layout: str = option(
        "frames", "frames: sampled JPEG frames in `videos`; mp4: the MP4 file unchanged as "
                  "`video.mp4`.", CHATML, rules=[one_of(VIDEO_LAYOUTS)])
    video_frames_part: str = option(
        "videos", "frames: the part's name, videos or mp4s (Megatron-Bridge's VALOR32K recipe: "
                  "field_map videos: mp4s).", CHATML,
        rules=[one_of(VIDEO_FRAMES_PARTS)])
    video_fps: float = option(
        2.0, "frames: frames kept per second of video.", CHATML,
        rules=[bounded(0, MAX_VIDEO_FPS, above=True, unit="frames per second")])
    max_frames: int = option(
        32, "frames: at most this many frames per video, evenly spread.", CHATML,
        rules=[AT_LEAST_1])


@dataclass
class VideoConfig(Section):
    """How `encode` turns videos into clips for a video model (`--layout wan`); the section
    exists only in such runs, so image runs' manifests do not change."""

    height: int | None = option(None, "Frame height (with --width; default: the video's own).",
                                VIDEO, rules=IMAGE_SIDE)
    width: int | None = option(None, "Frame width (with --height).", VIDEO, rules=IMAGE_SIDE)
    video_mode: str = option(
        "video", "video: each clip whole (the VAE keeps 1 + (T-1)//4 latent frames); frames: "
                 "--num-frames frames of each, evenly spread, as 1-frame samples.", VIDEO,
        rules=[one_of(VIDEO_MODES)])
    num_frames: int = option(
        10, "frames: frames taken per video (--layout automodel: in both modes, evenly spread "
            "when a video holds more).", VIDEO, rules=[AT_LEAST_1])
    max_frames: int | None = option(
        None, "video: keep at most this many frames of each clip (Bridge keeps them all).",
        VIDEO, rules=[AT_LEAST_1])
    frame_stride: int = option(1, "video: keep every Nth frame.", VIDEO, rules=[AT_LEAST_1])
    aspect_ratio: bool = option(
        True, "Keep the aspect ratio (fit inside --height x --width); --no-aspect-ratio "
              "stretches.", VIDEO, flags=("--aspect-ratio/--no-aspect-ratio",))
    #: Resize the short side, then crop the middle (`--center-crop` in a video run).
    center_crop: bool = setting(False)
    #: A video whose kept frames hold more pixels is skipped as `too_large` (`video.max_pixels`
    #: in a config file), as an image over `image.max_pixels` is.
    max_pixels: int = setting(MAX_CLIP_PIXELS, AT_LEAST_1)


@dataclass
class IngestSourceConfig(Section):
    """What `ingest` reads (its Arrow files come as arguments or from --config's `datasets`) and
    how it downloads; where it writes is the `output` section's."""

    split_part: str = option(
        "train", "The split part the inputs or manifest become (train, val): its shards go in a "
                 "folder of that name.", SOURCE,
        flags=("--split-part",), rules=[SPLIT_NAME])
    manifest_url: str | None = option(
        None, "An MLCommons manifest URL ending in .uri or .md5 (the base URL and the "
              "`MD5 FILENAME` list side by side).", SOURCE)
    manifest: str | None = option(
        None, "A local file of `MD5 FILENAME` lines; give --base-url.", SOURCE)
    base_url: str | None = option(None, "The address --manifest's files are under.", SOURCE)
    max_files: int | None = option(None, "Only the first N files of each split (for a trial).",
                                   SOURCE, rules=[AT_LEAST_1])
    max_workers: int = option(4, "Concurrent downloads.", DOWNLOAD,
                              rules=[bounded(1, MAX_DOWNLOADS, why="each is a thread")])
    prefetch_depth: int = option(6, "Most downloaded Arrow files on disk at once.", DOWNLOAD,
                                 rules=[AT_LEAST_1])
    stall_timeout: float = option(
        60.0, "Seconds a download may go without moving 64 KiB before it is retried.", DOWNLOAD,
        rules=[STALL])


@dataclass
class AutoModelConfig(Section):
    """How `encode --layout automodel` writes NeMo AutoModel's cache: its processor, its
    resolution buckets, its caption field; the section exists only in such runs."""

    model_type: str | None = option(
        None, lambda: "AutoModel's processor (--layout automodel): "
                      f"{', '.join(model_types())}.", MODEL,
        rules=[one_of(tuple(model_types()))])
    max_pixels: int | None = option(
        None, "The resolution buckets' pixel budget (--layout automodel; default: AutoModel's, "
              "65536 for images, 262144 for video).", MODEL, rules=[AT_LEAST_1])
    resolution_preset: str | None = option(
        None, f"A pixel budget by name: {', '.join(RESOLUTION_PRESETS)} (--layout automodel).",
        MODEL, rules=[one_of(tuple(RESOLUTION_PRESETS))])
    caption_field: str | None = option(
        None, "The caption's field (--layout automodel): images, of <prefix>_internvl.json's "
              "lines, internvl (default) or usr; videos, of --caption-format's objects "
              "(default: caption).", MODEL)
    caption_format: str | None = option(
        None, "Where video captions are (--layout automodel): sidecar (default: the video's "
              "same-stem .json), meta_json (its folder's meta.json) or jsonl "
              "(<prefix>_internvl.json).", MODEL, rules=[one_of(AUTOMODEL_CAPTION_FORMATS)])


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
    #: Only runs of a video model have this section.
    video: VideoConfig | None = None
    #: Only `encode --layout automodel` runs have this section.
    automodel: AutoModelConfig | None = None
    #: Only `ingest` runs have this section. The manifest does not record it: its inputs are
    #: the manifest's `source` (a URL's password hidden), the rest how downloads run.
    ingest: IngestSourceConfig | None = None
    #: The layout `model.layout` names, resolved once by `resolve(..., encode=True)`; not a
    #: section: the config records the name.
    layout: Layout | None = field(default=None, repr=False, compare=False)
    #: The (section, option) pairs set on the command line or in the config file, not
    #: defaulted (`resolve` fills it in); not a section: the config records the values.
    chosen: frozenset[tuple[str, str]] = field(default=frozenset(), repr=False, compare=False)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The configuration as plain nested dicts (JSON and YAML safe)."""
        return {f.name: dataclasses.asdict(section) for f in dataclasses.fields(self)
                if f.name not in ("layout", "chosen", "ingest")
                and (section := getattr(self, f.name)) is not None}

    def to_yaml(self) -> str:
        """The configuration as YAML, in section and field order."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _section_classes() -> dict[str, type[Any]]:
    """Every section of `RunConfig`, by name, in field order: read from its fields' types, so a
    new section is known to the config file, the options and the resume comparison at once."""
    hints = typing.get_type_hints(RunConfig)
    found: dict[str, type[Any]] = {}
    for f in dataclasses.fields(RunConfig):
        for kind in typing.get_args(hints[f.name]) or (hints[f.name],):
            if isinstance(kind, type) and issubclass(kind, Section):
                found[f.name] = kind
    return found


_SECTION_CLASSES = _section_classes()
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
