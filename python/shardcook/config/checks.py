"""Checks of a resolved run configuration (one sentence per problem, before any work), and the
options a resumed run must repeat."""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from shardcook.config.sections import (
    CHATML_IMAGE_FORMATS,
    IMAGE_FORMATS,
    MAX_IMAGE_SIDE,
    MAX_VIDEO_FPS,
    MAX_WORKERS_PER_CPU,
    RESIZE_MODES,
    SOURCE_TYPES,
    VIDEO_LAYOUTS,
    ChatmlConfig,
    ImageConfig,
    RunConfig,
    SourceConfig,
)
from shardcook.dataset.location import check_location
from shardcook.dataset.splits import parse_ratio
from shardcook.encoders.loading import LATENT_MODES, PRECISIONS
from shardcook.errors import ConfigError
from shardcook.layouts import LAYOUTS, Layout
from shardcook.layouts.chatml import VIDEO_FRAMES_PARTS
from shardcook.paths import check_local_path
from shardcook.storage import url_scheme


def check_auth(cfg: RunConfig) -> None:
    """Reads the token file now (and forgets the token), so a missing or loose file stops the
    run before any work."""
    from shardcook.hftoken import read_token_file

    if cfg.auth.hf_token_file:
        read_token_file(cfg.auth.hf_token_file)


#: (section, option) of every path a run reads or writes: a URL there is refused, except in
#: URL_OPTIONS, where it must be one the Multi-Storage Client can open.
PATH_OPTIONS = (("source", "input_dir"), ("source", "hf_dataset"), ("source", "input_path"),
                ("source", "hf_data_files"), ("output", "output_dir"), ("output", "scratch_dir"),
                ("model", "model_path"), ("model", "vae_path"), ("model", "clip_path"), ("model", "t5_path"),
                ("auth", "hf_token_file"))
#: The options object storage serves too: the input folder, the tar pattern, chatml's JSONL,
#: Hugging Face data files and the output folder.
URL_OPTIONS = (("source", "input_dir"), ("source", "input_path"), ("source", "hf_data_files"),
               ("output", "output_dir"))
#: Of those, the ones `datasets` opens itself, through the filesystem MSC gives fsspec, which
#: takes `msc://` URLs only (fsspec would hand `s3://` to another client).
MSC_ONLY_OPTIONS = (("source", "hf_data_files"),)


def check_paths(cfg: RunConfig) -> None:
    """Refuses a URL as a path option that reads only local files, and a URL that cannot be
    opened (unknown scheme, missing profile) where URLs are read."""
    for section, name in PATH_OPTIONS:
        value = getattr(getattr(cfg, section), name)
        option = "--input" if cfg.chatml and name == "input_path" else f"--{name.replace('_', '-')}"
        for one in value if isinstance(value, list) else [value]:
            if one is None:
                continue
            if (section, name) not in URL_OPTIONS:
                check_local_path(one, option)
                continue
            check_location(one, option)
            if (section, name) in MSC_ONLY_OPTIONS and url_scheme(one) not in (None, "msc"):
                raise ConfigError(f"{option} {one!r}: Hugging Face data files in object "
                                  "storage are read through an MSC profile; write "
                                  "msc://PROFILE/path (a profile can name any bucket).")


def check(cfg: RunConfig, chosen: frozenset[tuple[str, str]] = frozenset()) -> None:
    """Raises ConfigError naming the first option whose value cannot work; `chosen` holds the
    (section, option) pairs set on the command line or in the config file, not defaulted."""
    check_paths(cfg)
    check_auth(cfg)
    s, o, i = cfg.source, cfg.output, cfg.image
    if s.source_type not in SOURCE_TYPES:
        raise ConfigError(
            f"--source-type must be one of {', '.join(SOURCE_TYPES)}, not {s.source_type!r}."
        )
    s.location()  # raises ConfigError when the input option is not set
    if s.hf_streaming and (s.source_type != "huggingface" or cfg.chatml is not None):
        raise ConfigError("--hf-streaming reads a Hugging Face dataset for raw or encode "
                          "(--source-type huggingface); drop it here.")
    if s.max_samples is not None and s.max_samples < 1:
        raise ConfigError(f"--max-samples must be at least 1, not {s.max_samples}.")
    o.path  # noqa: B018 - raises ConfigError when no output folder was given
    if o.shard_size < 1:
        raise ConfigError(f"--shard-size must be at least 1, not {o.shard_size}.")
    if o.report_html and not o.finalize:
        raise ConfigError("--report-html shows a finalized dataset; drop --no-finalize, or "
                          "run `shardcook report` after finalizing.")
    if o.upload_queue < 1:
        raise ConfigError(f"--upload-queue must be at least 1, not {o.upload_queue}.")
    try:
        parse_ratio(o.split)
    except ConfigError as e:
        raise ConfigError(f"--split: {e}") from None
    if i.resize_mode not in RESIZE_MODES:
        raise ConfigError(
            f"--resize-mode must be one of {', '.join(RESIZE_MODES)}, not {i.resize_mode!r}."
        )
    if i.image_format not in IMAGE_FORMATS:
        raise ConfigError(
            f"--image-format must be one of {', '.join(IMAGE_FORMATS)}, not {i.image_format!r}."
        )
    if not 1 <= i.image_quality <= 100:
        raise ConfigError(f"--image-quality must be between 1 and 100, not {i.image_quality}.")
    for name in ("image_size", "max_size", "max_pixels"):
        if getattr(i, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(i, name)}.")
    for name in ("image_size", "max_size"):
        if getattr(i, name) > MAX_IMAGE_SIDE:
            raise ConfigError(f"--{name.replace('_', '-')} must be at most {MAX_IMAGE_SIDE} "
                              f"(WebP's largest side), not {getattr(i, name)}.")
    if i.min_size < 0:
        raise ConfigError(f"--min-size must be 0 or more, not {i.min_size}.")
    if i.workers is not None and i.workers < 1:
        raise ConfigError(f"--workers must be at least 1, not {i.workers}.")
    i.workers = cap_workers(i.workers)
    if cfg.chatml is not None:
        check_chatml(cfg.chatml, s, i)
        check_split_choice(cfg.chatml, chosen)


def encode_layout(name: str) -> Layout:
    """The layout `--layout name` asks for (one with a part builder), or ConfigError in one
    sentence."""
    writable = [lay.name for lay in LAYOUTS.values() if lay.part_builder is not None]
    if name not in writable:
        raise ConfigError(f"--layout must be one of {', '.join(writable)}, not {name!r}.")
    return LAYOUTS[name]


#: FLUX's T5 tokenizer (tokenizer_2) caps prompts at 512 tokens.
T5_MAX_LENGTH = 512
DEVICE = re.compile(r"auto|cpu|cuda(?::\d{1,4})?")


def check_encode(cfg: RunConfig) -> None:
    """`encode`'s checks (part of `resolve(..., encode=True)`): the `model` options left unset
    take the layout's defaults (its `encode_defaults`), then ConfigError names the first
    `model`/image option `encode` cannot work with."""
    layout = encode_layout(cfg.model.layout)
    m, i = cfg.model, cfg.image
    for name, value in layout.encode_defaults:
        if getattr(m, name) is None:
            setattr(m, name, value)
    if m.precision not in PRECISIONS:
        raise ConfigError(f"--precision must be one of {', '.join(PRECISIONS)}, not {m.precision!r}.")
    if m.stored_dtype is not None and m.stored_dtype not in PRECISIONS:
        raise ConfigError(
            f"--stored-dtype must be one of {', '.join(PRECISIONS)}, not {m.stored_dtype!r}.")
    if m.latent_mode not in LATENT_MODES:
        raise ConfigError(
            f"--latent-mode must be one of {', '.join(LATENT_MODES)}, not {m.latent_mode!r}.")
    if m.latent_mode not in layout.latent_modes or (
            layout.stored_dtypes and (m.stored_dtype or m.precision) not in layout.stored_dtypes):
        raise ConfigError(layout.encode_refusal.format(latent_mode=m.latent_mode))
    if m.batch_size < 1:
        raise ConfigError(f"--batch-size must be at least 1, not {m.batch_size}.")
    if not 1 <= m.t5_max_length <= T5_MAX_LENGTH:
        raise ConfigError(f"--t5-max-length must be between 1 and {T5_MAX_LENGTH} (the FLUX T5 "
                          f"tokenizer's limit), not {m.t5_max_length}.")
    if m.device is not None and not DEVICE.fullmatch(m.device):
        raise ConfigError(f"--device must be cpu, cuda or cuda:N, not {m.device!r}.")
    if i.resize_mode in ("crop", "stretch") and i.image_size % 16:
        raise ConfigError(f"--image-size must be a multiple of 16 for encode (the VAE downsamples "
                          f"by 8 and FLUX packs 2x2 latents), not {i.image_size}.")


def check_chatml(c: ChatmlConfig, s: SourceConfig, i: ImageConfig) -> None:
    """The chatml section's checks (part of `check`)."""
    if i.image_format not in CHATML_IMAGE_FORMATS:
        raise ConfigError(f"--image-format must be jpg or png for chatml, not {i.image_format!r}.")
    for name in ("val_fraction", "test_fraction"):  # the comparisons also refuse nan
        if not 0.0 <= getattr(c, name) < 1.0:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 0 and below 1, "
                              f"not {getattr(c, name)}.")
    if not c.val_fraction + c.test_fraction < 1.0:
        raise ConfigError(f"--val-fraction {c.val_fraction} and --test-fraction {c.test_fraction} "
                          "leave nothing for train; their sum must be below 1.")
    for name in ("max_pixels", "train_rows", "val_rows", "test_rows"):
        value = getattr(c, name)
        least = 0 if name in ("val_rows", "test_rows") else 1
        if value is not None and value < least:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least {least}, not {value}.")
    if c.video_layout not in VIDEO_LAYOUTS:
        raise ConfigError(
            f"--video-layout must be one of {', '.join(VIDEO_LAYOUTS)}, not {c.video_layout!r}.")
    if c.video_frames_part not in VIDEO_FRAMES_PARTS:
        raise ConfigError(f"--video-frames-part must be one of {', '.join(VIDEO_FRAMES_PARTS)}, "
                          f"not {c.video_frames_part!r}.")
    if c.video_frames_part != VIDEO_FRAMES_PARTS[0] and c.video_layout != "frames":
        raise ConfigError("--video-frames-part names the frames part of --video-layout frames; "
                          "drop it for --video-layout mp4 (its part is video.mp4).")
    if not 0 < c.video_fps <= MAX_VIDEO_FPS:  # also refuses nan
        raise ConfigError(f"--video-fps must be above 0 and at most {MAX_VIDEO_FPS:g} frames per "
                          f"second, not {c.video_fps}.")
    if c.max_frames < 1:
        raise ConfigError(f"--max-frames must be at least 1, not {c.max_frames}.")
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
