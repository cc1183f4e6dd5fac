"""`encode`: images and captions through the encoders of the layout's model family into
pre-encoded samples, in one of the layouts the registry gives an encode spec (docs/FORMAT.md
§3). The config resolves the layout once (`RunConfig.layout`); its encode spec gives the
defaults, the latent modes it takes, its encoders' settings, its model family (whose encoders
follow the `encoders.models.Encoders` protocol) and the function building each sample's parts.

Three stages overlap: the shared loop's reader thread decodes and resizes the next batches (Rust
image core, `preprocess`), the main thread runs the encoders (`encode`), and a serializer thread
turns the previous encoder batch's tensors into parts (`serialize`). report.json's
`stage_seconds` also shows `input_wait` (encoders idle, waiting for pixels), `load_encoders`
(during which the first batches decode), and the loop's `read` and tar `write`.
"""

from __future__ import annotations

import io
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from shardcook.config import RunConfig
from shardcook.dataset.view import DatasetView
from shardcook.encoders.compiled import cudnn_autotuned
from shardcook.encoders.transfer import HostCopy
from shardcook.errors import ConfigError
from shardcook.imaging import ImageResult
from shardcook.jobs.encode import PREPARED_BYTES
from shardcook.jobs.encode.loadonce import LoadedOnce
from shardcook.jobs.encode.sample import EncodedSample, PartBuilder
from shardcook.jobs.images import check_image_options, decode_images, result_pixels
from shardcook.layouts import EncodeSpec, registry_function
from shardcook.layouts.names import EMPTY_ENCODINGS_DIR
from shardcook.output.folder import OutputFolder
from shardcook.pipeline.driver import JobBasics, finalize_by_ratio, ratio_units
from shardcook.pipeline.plan import WorkUnit
from shardcook.pipeline.report import JsonObject
from shardcook.pipeline.run import Loaded, Outcome, Processor, completed, split_skipped
from shardcook.runtime import waits
from shardcook.runtime.workers import Place
from shardcook.sources.base import Item, Source

if TYPE_CHECKING:
    import torch

    from shardcook.encoders.models import Encoders, ModelFamily

log = logging.getLogger(__name__)

#: An input's image as the loop hands it on: its bytes as read, then decoded by `prepare`.
Image = bytes | ImageResult
#: Inputs of one encoder batch that decoded: (index in the reader batch, image-core result).
Decoded = list[tuple[int, ImageResult]]


def pick_device(requested: str | None) -> str:
    """The torch device as asked, checked: `cuda` (each worker's own GPU, `worker_device`)
    when asked for or, by default, when CUDA is present; `cuda:N`; else cpu."""
    import torch

    if requested in (None, "", "auto"):
        if torch.cuda.is_available():
            return "cuda"
        log.warning("no CUDA device found: encoding on the CPU "
                    "(fine for tiny models, slow for FLUX)")
        return "cpu"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(f"--device {requested} was asked for but no CUDA device is visible; "
                              "use --device cpu or run on a GPU machine.")
        if requested == "cuda":
            return requested
        index = int(requested.partition(":")[2])
        if index >= torch.cuda.device_count():
            raise ConfigError(f"--device {requested} does not exist: "
                              f"{torch.cuda.device_count()} CUDA device(s) are visible.")
    return requested


def worker_device(device: str, place: Place) -> str:
    """`device` for the worker at `place`: `cuda` is the GPU of its local rank on its machine
    (torchrun's LOCAL_RANK, or srun's SLURM_LOCALID)."""
    import torch

    if device != "cuda":
        return device
    return f"cuda:{place.local_rank % torch.cuda.device_count()}"


def encoder_manifest(cfg: RunConfig, token_file: str | None) -> JsonObject:
    """The manifest's encoder facts (docs/FORMAT.md §6), from the layout's model family; reads
    only the VAE config. No token."""
    from shardcook.encoders.models import MODELS

    spec = encode_spec(cfg)
    facts: JsonObject = MODELS[spec.model].function("manifest")(cfg.model, token_file)
    return {**facts, **dict(spec.encoder_facts)}


def encode_spec(cfg: RunConfig) -> EncodeSpec:
    """The encode spec of the layout `resolve(..., encode=True)` resolved."""
    assert cfg.layout is not None and cfg.layout.encode is not None  # checked by EncodeJob
    return cfg.layout.encode


class EncodeProcessor(Processor[Image]):
    """Turns loaded inputs into one pre-encoded sample of the run's layout each, one outcome per
    input, in order.

    `prepare` (the reader thread) decodes and resizes a batch with the Rust image core;
    `process` (the main thread) runs the encoders on it, one encoder batch of one shape at a
    time, while a serializer thread turns the previous encoder batch's tensors into parts. The
    encoders are loaded by `start`, once the reader runs, so the first batches decode meanwhile.
    """

    prepared_budget = PREPARED_BYTES

    def __init__(self, cfg: RunConfig, load_encoders: Callable[[], Encoders],
                 stored_dtype: torch.dtype, workers: int) -> None:
        from shardcook.encoders.models import MODELS

        self.image, self.model = cfg.image, cfg.model
        self.family = MODELS[encode_spec(cfg).model]
        self.build_parts: PartBuilder = registry_function(encode_spec(cfg).part_builder)
        self.batch_size = cfg.model.batch_size
        self.resample = cfg.model.latent_mode == "resample"
        self.stored_dtype = stored_dtype
        self.workers = workers
        self.stage_seconds = {"preprocess": 0.0, "load_encoders": 0.0, "encode": 0.0,
                              "serialize": 0.0}
        self._encoders = LoadedOnce(load_encoders, self.stage_seconds)
        self._ser = ThreadPoolExecutor(1, thread_name_prefix="shardcook-serialize")

    @property
    def enc(self) -> Encoders:
        return self._encoders.get()

    def load(self, item: Item) -> Image:
        return item.image_bytes()

    def prepare(self, batch: list[Loaded[Image]]) -> list[Loaded[Image]]:
        """The batch with each image decoded and resized, or skipped with the reason."""
        t0 = time.perf_counter()
        _, todo = split_skipped(batch)
        good, skips = decode_images(batch, todo, self.image, self.workers)
        prepared = list(batch)
        for n, r in good:
            prepared[n] = replace(batch[n], payload=r)
        for n, o in skips.items():
            prepared[n] = replace(batch[n], payload=None, skip=o.skip, detail=o.detail)
        self.stage_seconds["preprocess"] += time.perf_counter() - t0
        return prepared

    def prepared_bytes(self, batch: list[Loaded[Image]]) -> int:
        """The decoded pixels' bytes."""
        return sum(loaded.payload.pixels.nbytes for loaded in batch
                   if isinstance(loaded.payload, ImageResult)
                   and loaded.payload.pixels is not None)

    def _encode(self, batch: list[Loaded[Image]], group: Decoded) -> tuple[list[str], HostCopy]:
        """One shape group on the encoders; returns the names of its text tensors and its
        tensors (latents, text, posterior) on their way to the CPU in the stored dtype (the
        GPU's queue is not waited for: the next group is queued meanwhile)."""
        import numpy as np

        enc = self.enc
        t0 = time.perf_counter()
        items = [batch[n].item for n, _ in group]
        pixels = np.stack([result_pixels(r) for _, r in group])
        out = enc.encode_pixels(pixels, [it.key for it in items], posterior=self.resample)
        text = shared_text(enc, [it.caption or "" for it in items])
        copy = HostCopy((out.latents, *text.values(), *out.posterior), self.stored_dtype)
        self.stage_seconds["encode"] += time.perf_counter() - t0
        return list(text), copy

    def _serialize(self, batch: list[Loaded[Image]], group: Decoded,
                   encoded: tuple[list[str], HostCopy]) -> list[tuple[int, Outcome]]:
        t0 = time.perf_counter()
        names, copy = encoded
        lat, *rest = copy.get()
        text, posterior = rest[:len(names)], rest[len(names):]
        done: list[tuple[int, Outcome]] = []
        for j, (n, r) in enumerate(group):
            item = batch[n].item
            sample = EncodedSample(item, r, lat[j], {k: t[j] for k, t in zip(names, text,
                                                                            strict=True)},
                                   tuple(t[j] for t in posterior), self.image, self._facts,
                                   self.family)
            done.append((n, Outcome.of(item, self.build_parts(sample))))
        self.stage_seconds["serialize"] += time.perf_counter() - t0
        return done

    @cached_property
    def _facts(self) -> dict[str, object]:
        """The run's latent facts, which part builders record so a user can scale latents."""
        m = self.model
        return {"latent_mode": m.latent_mode, **self.enc.latent_facts,
                "latent_seed": m.seed if m.latent_mode == "sample" else None}

    def start(self) -> None:
        self.enc  # noqa: B018 - loads the encoders (and writes empty_encodings)

    def process(self, batch: list[Loaded[Image]]) -> list[Outcome]:
        outcomes, todo = split_skipped(batch)
        serialized: deque[Future[list[tuple[int, Outcome]]]] = deque()

        def collect(f: Future[list[tuple[int, Outcome]]]) -> None:
            for n, o in waits.result(f):
                outcomes[n] = o

        for k in range(0, len(todo), self.batch_size):
            groups: dict[tuple[int, ...], Decoded] = {}
            for n in todo[k:k + self.batch_size]:  # one shape per encoder batch
                r = batch[n].payload
                assert isinstance(r, ImageResult)  # `prepare` decoded every input it did not skip
                groups.setdefault(result_pixels(r).shape, []).append((n, r))
            for group in groups.values():
                tensors = self._encode(batch, group)
                serialized.append(self._ser.submit(self._serialize, batch, group, tensors))
                while len(serialized) > 2:
                    collect(serialized.popleft())
        while serialized:
            collect(serialized.popleft())
        return completed(outcomes)


def shared_text(encoders: Encoders, captions: list[str]) -> dict[str, torch.Tensor]:
    """`encoders.encode_text(captions)` with each distinct caption through the text encoders
    once: the rows of a repeated caption are copies of its one row, gathered on the device. A
    text encoder's rows do not depend on each other, and the batch's longest caption (which
    sets how far a masked T5 runs) is among the distinct ones, so the values are the same; a
    dataset of few distinct captions (class names, or none at all) skips most of the text
    encoders' work."""
    import torch

    distinct = list(dict.fromkeys(captions))
    text = encoders.encode_text(distinct)
    if len(distinct) == len(captions):
        return text
    row = {caption: j for j, caption in enumerate(distinct)}
    with torch.inference_mode():
        index = [row[caption] for caption in captions]
        return {name: t.index_select(0, torch.tensor(index, device=t.device))
                for name, t in text.items()}


def write_empty_encodings(out: OutputFolder, encoders: Encoders, family: ModelFamily) -> None:
    """The family's `empty_encodings/` files, float32, from its text encoders' outputs for the
    empty caption (FLUX: t5_empty.npy [1, L, D_t5] and clip_empty.npy [1, D_clip])."""
    import numpy as np
    import torch

    text = encoders.encode_text([""])
    for name, file in family.empty_encodings:
        data = io.BytesIO()
        np.save(data, text[name].to("cpu", torch.float32).numpy())
        out.write_file(f"{EMPTY_ENCODINGS_DIR}/{file}", data.getvalue())


def quiet_model_libraries() -> None:
    """No download/loading progress bars or advice from diffusers/transformers."""
    import diffusers
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    diffusers.utils.logging.set_verbosity_error()
    diffusers.utils.logging.disable_progress_bar()


def prefetch_batches(cfg: RunConfig, batch_size: int) -> int:
    """How many decoded reader batches may wait for the encoders: PREPARED_BYTES' worth, 2-16."""
    i = cfg.image
    side = i.image_size if i.resize_mode in ("crop", "stretch") else max(i.image_size, i.max_size)
    return max(2, min(16, PREPARED_BYTES // (batch_size * 3 * side * side)))


def cpu_threads(workers: int | None, local_count: int) -> tuple[int, int]:
    """(torch threads, image threads) for encoding on the CPU, from this rank's share of the
    cores (the machine's, over the `local_count` workers sharing it): the encoders take them
    all and the image threads half of them, which wait once the batches ahead are decoded
    (measured on 2 cores: Wan's clips 27% faster, FLUX.1's photos 7%, than with the cores
    split between the two). `--workers N` splits them instead (N image threads, torch the
    rest), and OMP_NUM_THREADS keeps the user's torch threads."""
    import torch

    cores = max(1, (os.cpu_count() or 1) // local_count)
    if os.environ.get("OMP_NUM_THREADS"):
        torch_threads = torch.get_num_threads()
    else:
        torch_threads = max(1, cores - workers) if workers else cores
    return torch_threads, workers or max(1, cores // 2)


class EncodeJob(JobBasics):
    """`shardcook encode` as a job: `open_source`'s inputs in units of --shard-size, the image core
    (or the clips of a video model), the encoders of the layout's model family (loaded through
    its registry entry), finalize by --split's ratios with the layout's encoding."""

    prefetch: int
    #: The image threads of this worker (`running` sets them).
    workers: int

    def __init__(self, cfg: RunConfig, *, token_file: str | None = None) -> None:
        """Checks the options and the encoders' sources and picks the device, before any work
        (`running` gives a worker its own GPU and threads).

        Args:
            token_file: The Hugging Face token file (default: the config's `auth.hf_token_file`).

        Raises:
            ConfigError: bad setup (options, model paths, token file).
        """
        self.cfg = cfg
        self.token_file = token_file or cfg.auth.hf_token_file
        if cfg.layout is None or cfg.model.precision is None or cfg.model.latent_mode is None:
            raise ConfigError("encode needs its config resolved for encode "
                              "(shardcook.config.resolve(..., encode=True)).")
        self.layout = cfg.layout
        self.spec = encode_spec(cfg)
        self.manifest_extra: JsonObject | None = encoder_manifest(cfg, self.token_file)
        self.device = pick_device(cfg.model.device)
        self.backend = "nccl" if self.device.startswith("cuda") else "gloo"
        self.batch_size = max(4 * cfg.model.batch_size, 8)
        if cfg.video is None:
            self.prefetch = prefetch_batches(cfg, self.batch_size)
        else:
            from shardcook.jobs.encode.video import prefetch_clips

            self.batch_size = cfg.model.batch_size
            self.prefetch = prefetch_clips(cfg)

    @contextmanager
    def running(self, place: Place) -> Iterator[None]:
        """The worker at `place` on its own GPU, or on the CPU with its share of the machine's
        cores; torch's thread count for the run, the caller's restored after; with --compile on
        CUDA, cuDNN's autotuner (TF32 is left as torch has it: matrix products in full fp32,
        so an fp32 run's T5 keeps the values Bridge's script computes).

        Raises:
            ConfigError: image options the image core refuses with this worker's threads.
        """
        import torch

        self.device = worker_device(self.device, place)
        threads = torch.get_num_threads()
        if self.device.startswith("cuda"):
            torch.cuda.set_device(torch.device(self.device))
            self.workers = self.cfg.image.workers or os.cpu_count() or 1
        else:  # fixed for the whole run: float32 CPU kernels round differently with other counts
            threads, self.workers = cpu_threads(self.cfg.image.workers, place.local_count)
        if self.cfg.video is None:
            check_image_options(self.cfg.image, self.workers)
        callers_threads = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            with cudnn_autotuned(self.device, self.cfg.model.compile):
                yield
        finally:
            torch.set_num_threads(callers_threads)

    def units(self, source: Source) -> list[WorkUnit]:
        units = ratio_units(self.cfg, source)
        if self.cfg.video is None:
            return units
        from shardcook.jobs.encode.video import clip_units

        return clip_units(units)

    def load_encoders(self, folder: OutputFolder, place: Place) -> Any:
        """The encoders of the layout's model family, through its registry entry's class (and
        for a family with empty encodings, the first worker of each launch, at `place`, writes
        them into the run's `folder`)."""
        from shardcook.encoders.models import MODELS

        quiet_model_libraries()
        family = MODELS[self.spec.model]
        encoders = self.compiled(family.function("encoders").for_run(
            self.cfg.model, self.spec, self.device, self.token_file))
        if family.empty_encodings and place.leads:
            write_empty_encodings(folder, encoders, family)
        return encoders

    def compiled(self, encoders: Any) -> Any:
        """`encoders`, compiled in place with --compile (`encoders.compiled`)."""
        if self.cfg.model.compile:
            from shardcook.encoders.compiled import compile_encoders

            compile_encoders(encoders)
        return encoders

    def processor(self, cfg: RunConfig, folder: OutputFolder, place: Place,
                  units: list[WorkUnit]) -> Processor[Any]:
        from shardcook.encoders.loading import torch_dtype

        m = cfg.model
        assert m.precision is not None  # checked in __init__
        dtype = torch_dtype(m.stored_dtype or m.precision)
        load = partial(self.load_encoders, folder, place)
        if cfg.video is not None:  # the layout's model encodes video
            from shardcook.jobs.encode.video import VideoEncodeProcessor

            return VideoEncodeProcessor(cfg, load, dtype, self.workers)
        return EncodeProcessor(cfg, load, dtype, self.workers)

    def finalize(self, view: DatasetView, report: JsonObject) -> None:
        finalize_by_ratio(self.cfg, view, self.layout)


def encode_job(cfg: RunConfig, *, token_file: str | None = None) -> EncodeJob:
    """The job writing the run's layout: its own (`EncodeSpec.job`) or `EncodeJob`."""
    spec = cfg.layout.encode if cfg.layout is not None else None
    if spec is not None and spec.job is not None:
        job: EncodeJob = registry_function(spec.job)(cfg, token_file=token_file)
        return job
    return EncodeJob(cfg, token_file=token_file)
