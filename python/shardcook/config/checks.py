"""Checks of a resolved run configuration (one sentence per problem, before any work), and the
options a resumed run must repeat."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from shardcook.config.sections import (
    CHATML_IMAGE_FORMATS,
    MAX_WORKERS_PER_CPU,
    VIDEO_RESIZE_MODES,
    AutoModelConfig,
    ChatmlConfig,
    ImageConfig,
    OutputConfig,
    RunConfig,
    SourceConfig,
    VideoConfig,
)
from shardcook.dataset.index.splits import parse_ratio
from shardcook.errors import ConfigError
from shardcook.fields import PLACE, check_fields
from shardcook.layouts import LAYOUTS, EncodeSpec, Layout
from shardcook.layouts.automodel import for_family
from shardcook.layouts.chatml import VIDEO_FRAMES_PARTS

if TYPE_CHECKING:
    from shardcook.encoders.models import ModelFamily


def check_auth(cfg: RunConfig) -> None:
    """Reads the token file now (and forgets the token), so a missing or loose file stops the
    run before any work."""
    from shardcook.hftoken import read_token_file

    if cfg.auth.hf_token_file:
        read_token_file(cfg.auth.hf_token_file)


def check_paths(cfg: RunConfig) -> None:
    """Parses every option naming a file or folder (a field with a `Place`) into its
    locations, once: a URL is refused where only local files are read, and must be one the
    Multi-Storage Client can open where URLs are read."""
    for section in (cfg.source, cfg.output, cfg.image, cfg.model, cfg.data_format, cfg.auth):
        for f in dataclasses.fields(section):
            if PLACE in f.metadata:
                chatml_input = cfg.chatml is not None and f.name == "input_path"
                section.located(f.name, "--input" if chatml_input else None)


def check(cfg: RunConfig, chosen: frozenset[tuple[str, str]] = frozenset()) -> None:
    """Raises ConfigError naming the first option whose value cannot work; `chosen` holds the
    (section, option) pairs set on the command line or in the config file, not defaulted. Each
    field's own choices and range are declared on it (`config.sections`); what is checked here
    is what one field cannot say alone."""
    check_paths(cfg)
    check_auth(cfg)
    s, o, i = cfg.source, cfg.output, cfg.image
    for section in (s, o, i, *([cfg.chatml] if cfg.chatml is not None else [])):
        check_fields(section)
    s.location()  # raises ConfigError when the input option is not set
    if s.hf_streaming and (s.source_type != "huggingface" or cfg.chatml is not None):
        raise ConfigError("--hf-streaming reads a Hugging Face dataset for raw or encode "
                          "(--source-type huggingface); drop it here.")
    check_output(o)
    i.workers = cap_workers(i.workers)
    if cfg.video is None:
        check_image_resize(i)
    if cfg.chatml is not None:
        check_chatml(cfg.chatml, s, i)
        check_split_choice(cfg.chatml, chosen)


def check_output(o: OutputConfig) -> None:
    """The output section's checks of several fields together (every run command's, ingest's
    too)."""
    o.location  # noqa: B018 - raises ConfigError when no output folder was given
    if o.report_html and not o.finalize:
        raise ConfigError("--report-html shows a finalized dataset; drop --no-finalize, or "
                          "run `shardcook report` after finalizing.")
    o.media_filter  # noqa: B018 - raises ConfigError for several --media-metadata-by-* flags
    try:
        parse_ratio(o.split)
    except ConfigError as e:
        raise ConfigError(f"--split: {e}") from None


def encode_layout(name: str) -> tuple[Layout, EncodeSpec]:
    """The layout `--layout name` asks for (one `encode` writes) and its encode spec, or
    ConfigError in one sentence."""
    writable = {lay.name: lay.encode for lay in LAYOUTS.values() if lay.encode is not None}
    spec = writable.get(name)
    if spec is None:
        raise ConfigError(f"--layout must be one of {', '.join(writable)}, not {name!r}.")
    return LAYOUTS[name], spec


def check_image_resize(i: ImageConfig) -> None:
    """Refuses a video interpolation as an image run's --resize-mode."""
    if i.resize_mode in VIDEO_RESIZE_MODES:
        raise ConfigError(f"--resize-mode {i.resize_mode} is for video inputs (encode --layout "
                          "wan); images take crop, stretch, variable or bucket.")


def encodes_video(layout: str) -> bool:
    """Whether `--layout layout` is written by a model that encodes video."""
    from shardcook.encoders.models import MODELS

    spec = LAYOUTS[layout].encode if layout in LAYOUTS else None
    return spec is not None and MODELS[spec.model].input_kind == "video"


def check_encode(cfg: RunConfig, chosen: frozenset[tuple[str, str]] = frozenset()) -> None:
    """`encode`'s checks (part of `resolve(..., encode=True)`): the `model` options left unset
    take the layout's defaults (its `EncodeSpec.defaults`) and its model family's default model,
    then ConfigError names the first `model`/image option `encode` cannot work with: the sizes
    and text options are the family's registry entry's. `cfg.layout` is then the layout itself;
    `cfg.video` is kept only for a model that encodes video (`check_video`)."""
    from shardcook.encoders.models import MODELS

    cfg.layout, spec = encode_layout(cfg.model.layout)
    if spec.model_by_type:
        spec = model_by_type(cfg)
        cfg.layout = replace(cfg.layout, encode=spec)
    else:
        refuse_section(cfg, chosen, "automodel", "--layout automodel")
        cfg.automodel = None
    family = MODELS[spec.model]
    m, i = cfg.model, cfg.image
    if ("model", "model_path") not in chosen:
        m.model_path = family.default_model
    if family.input_kind == "video":
        check_video(cfg, chosen, family)
    else:
        given = sorted(key for section, key in chosen if section == "video")
        if given:
            raise ConfigError(f"--{given[0].replace('_', '-')} is for video inputs (--layout "
                              f"wan), not --layout {cfg.layout.name}.")
        cfg.video = None
        check_image_resize(i)
    check_text_options(family, chosen)
    for name, value in spec.defaults:
        if getattr(m, name) is None:
            setattr(m, name, value)
    check_fields(m)
    if m.latent_mode not in spec.latent_modes or (
            spec.stored_dtypes and (m.stored_dtype or m.precision) not in spec.stored_dtypes):
        raise ConfigError(spec.refusal.format(latent_mode=m.latent_mode))
    sizes = family.sizes
    if i.resize_mode in ("crop", "stretch") and i.image_size % sizes.multiple:
        raise ConfigError(f"--image-size must be a multiple of {sizes.multiple} for encode "
                          f"({sizes.why}), not {i.image_size}.")


def refuse_section(cfg: RunConfig, chosen: frozenset[tuple[str, str]], section: str,
                   what: str) -> None:
    """Refuses an option of `section` given to a run without it (it would change nothing)."""
    given = sorted(key for name, key in chosen if name == section)
    if given:
        assert cfg.layout is not None
        raise ConfigError(f"--{given[0].replace('_', '-')} is for {what}, not --layout "
                          f"{cfg.layout.name}.")


def model_by_type(cfg: RunConfig) -> EncodeSpec:
    """The encode spec of a layout whose family `--model-type` names, that family's."""
    from shardcook.encoders.models import by_model_type, model_types

    assert cfg.layout is not None and cfg.layout.encode is not None
    if cfg.automodel is None:
        cfg.automodel = AutoModelConfig()
    a = cfg.automodel
    check_fields(a)
    family = by_model_type(a.model_type or "")
    if family is None:
        raise ConfigError(f"--layout {cfg.layout.name} needs --model-type, AutoModel's "
                          f"processor: one of {', '.join(model_types())}.")
    if a.max_pixels is not None and a.resolution_preset is not None:
        raise ConfigError("--max-pixels and --resolution-preset both set the pixel budget; "
                          "give one.")
    check_captions(a, family)
    assert family.automodel is not None  # `by_model_type` finds only such families
    return for_family(cfg.layout.encode, family.name, family.automodel.latent_mode)


def check_captions(a: AutoModelConfig, family: ModelFamily) -> None:
    """The caption options as AutoModel's tool takes them: its image command's --caption-field
    (internvl or usr), its video command's --caption-format and --caption-field (any name);
    a default left unset is set."""
    if family.input_kind == "video":
        a.caption_format = a.caption_format or "sidecar"
        a.caption_field = a.caption_field or "caption"
        return
    if a.caption_format is not None:
        raise ConfigError("--caption-format is for videos; images are captioned by their "
                          "<prefix>_internvl.json, so drop it.")
    a.caption_field = a.caption_field or "internvl"
    if a.caption_field not in ("internvl", "usr"):
        raise ConfigError(f"--caption-field must be internvl or usr for images, not "
                          f"{a.caption_field!r}.")


def check_processor_frames(cfg: RunConfig, family: ModelFamily) -> None:
    """The --video-mode and --num-frames the family's AutoModel processor takes (its
    `supported_modes` and `frame_constraint`, which AutoModel's tool does not check: its
    processor then fails on every video)."""
    a, v = family.automodel, cfg.video
    assert a is not None and v is not None and cfg.automodel is not None
    name = cfg.automodel.model_type
    if v.video_mode not in a.video_modes:
        raise ConfigError(f"--model-type {name} takes --video-mode "
                          f"{' or '.join(a.video_modes)} (all its processor supports), not "
                          f"{v.video_mode}.")
    k = a.frame_multiple
    if k is not None and v.video_mode == "video" and (v.num_frames - 1) % k:
        raise ConfigError(f"--num-frames must be {k}n+1 for --model-type {name} (its video VAE "
                          f"encodes the first frame alone, then {k} frames a latent frame), not "
                          f"{v.num_frames}; e.g. {k + 1}, {2 * k + 1} or {15 * k + 1}.")


def check_text_options(family: ModelFamily, chosen: frozenset[tuple[str, str]]) -> None:
    """Refuses a text option of another family's (FLUX's --t5-max-length in a Wan run): it
    would change nothing."""
    from shardcook.encoders.models import MODELS

    own = dict(family.text.options)
    for other in MODELS.values():
        for option, what in other.text.options:
            if option not in own and ("model", option) in chosen:
                raise ConfigError(f"--{option.replace('_', '-')} is {what}; "
                                  f"{family.text.padding}, so drop it.")


def check_video(cfg: RunConfig, chosen: frozenset[tuple[str, str]], family: ModelFamily
                ) -> None:
    """A video run's checks: `--resize-mode` is an interpolation (bilinear when not given),
    --height and --width come together, multiples of the family's size rule (Wan: 8, the VAE's
    downsampling); an option of the other --video-mode is refused."""
    if cfg.video is None:
        cfg.video = VideoConfig()
    v, i = cfg.video, cfg.image
    check_fields(v)
    if i.resize_mode not in VIDEO_RESIZE_MODES:
        if ("image", "resize_mode") in chosen:
            raise ConfigError(f"--resize-mode must be one of {', '.join(VIDEO_RESIZE_MODES)} for "
                              f"video inputs, not {i.resize_mode!r}.")
        i.resize_mode = VIDEO_RESIZE_MODES[0]
    if (v.height is None) != (v.width is None):
        raise ConfigError("--height and --width go together; give both, or neither to keep "
                          "each video's own size.")
    sizes = family.sizes
    for name, side in (("--height", v.height), ("--width", v.width)):
        if side is not None and side % sizes.multiple:
            raise ConfigError(f"{name} must be a multiple of {sizes.multiple} ({sizes.why}), "
                              f"not {side}.")
    assert cfg.layout is not None and cfg.layout.encode is not None
    if cfg.layout.encode.model_by_type:
        # AutoModel's tool takes --num-frames frames in both modes and has no other bound
        for name in ("max_frames", "frame_stride"):
            if ("video", name) in chosen:
                raise ConfigError(f"--{name.replace('_', '-')} is not for --layout "
                                  f"{cfg.layout.name}; it takes --num-frames frames of each "
                                  "video, evenly spread, in both video modes.")
        check_processor_frames(cfg, family)
        return
    # an option of the other mode would change nothing: refused rather than ignored
    for name, mode in (("max_frames", "video"), ("frame_stride", "video"),
                       ("num_frames", "frames")):
        if v.video_mode != mode and ("video", name) in chosen:
            raise ConfigError(
                f"--{name.replace('_', '-')} is for --video-mode {mode}; "
                + ("frames mode takes --num-frames frames, evenly spread." if mode == "video"
                   else "video mode keeps every frame (bound it with --max-frames and "
                        "--frame-stride)."))


def check_chatml(c: ChatmlConfig, s: SourceConfig, i: ImageConfig) -> None:
    """The chatml section's checks of several fields together (part of `check`)."""
    if i.image_format not in CHATML_IMAGE_FORMATS:
        raise ConfigError(f"--image-format must be jpg or png for chatml, not {i.image_format!r}.")
    if not c.val_fraction + c.test_fraction < 1.0:
        raise ConfigError(f"--val-fraction {c.val_fraction} and --test-fraction {c.test_fraction} "
                          "leave nothing for train; their sum must be below 1.")
    if c.video_frames_part != VIDEO_FRAMES_PARTS[0] and c.video_layout != "frames":
        raise ConfigError("--video-frames-part names the frames part of --video-layout frames; "
                          "drop it for --video-layout mp4 (its part is video.mp4).")
    if (c.question_column is None) != (c.answer_column is None):
        raise ConfigError("--question-column and --answer-column go together; give both.")
    if c.system_prompt is not None and c.question_column is None:
        raise ConfigError("--system-prompt needs --question-column and --answer-column.")
    if c.hf_val_split is not None and s.source_type != "huggingface":
        raise ConfigError("--hf-val-split needs a Hugging Face dataset (--hf-dataset).")
    if c.val_rows is not None and c.train_rows is None and c.hf_val_split is None:
        raise ConfigError("--val-rows needs --train-rows (or --hf-val-split).")
    if c.test_rows is not None and c.train_rows is None:
        raise ConfigError("--test-rows needs --train-rows (test takes the inputs after the "
                          "train and val rows).")


def check_split_choice(c: ChatmlConfig, chosen: frozenset[tuple[str, str]]) -> None:
    """Refuses a split fraction beside the options that split by rows, which would ignore it."""
    by_rows = "--train-rows" if c.train_rows is not None else (
        "--hf-val-split" if c.hf_val_split is not None else None)
    if by_rows is None:
        return
    for name in ("val_fraction", "test_fraction"):
        if ("chatml", name) in chosen:
            raise ConfigError(f"--{name.replace('_', '-')} splits by hash, but {by_rows} splits "
                              "by rows and would ignore it; give one or the other.")


def cap_workers(workers: int | None) -> int | None:
    """`workers`, capped at `MAX_WORKERS_PER_CPU` per core with one log line saying so."""
    limit = MAX_WORKERS_PER_CPU * (os.cpu_count() or 1)
    if workers is None or workers <= limit:
        return workers
    logging.getLogger(__name__).warning(
        "--workers %d is more than %d per core; using %d threads.", workers,
        MAX_WORKERS_PER_CPU, limit)
    return limit


# Options that change what is written; a resumed run must match the earlier run on all of them.
RUNTIME_ONLY = frozenset(
    {"output_dir", "finalize", "report_html", "overwrite", "quiet", "workers", "hf_token_file",
     "hf_streaming", "scratch_dir", "upload_queue"}
)


def output_affecting(cfg: RunConfig, *, with_model: bool = False) -> dict[str, Any]:
    """The flat {option: value} map a resumed run is compared on (runtime-only options left out)."""
    flat: dict[str, Any] = {}
    for section, values in cfg.to_dict().items():
        if section == "model" and not with_model:
            continue
        for key, value in values.items():
            if key not in RUNTIME_ONLY:
                flat[key if key not in flat else f"{section}.{key}"] = value
    as_json: dict[str, Any] = json.loads(json.dumps(flat))  # tuples become lists, as on disk
    return as_json
