"""`shardcook demo`: the whole tool on a fresh machine, no GPU and no network.

Generates images of coloured shapes with captions naming them, builds tiny FLUX-layout encoders
with random weights (DEMO WEIGHTS, not a real model), runs `raw` and `encode`, finalizes and
validates both, loads a batch of each through shardcook.energon, writes a tiny ChatML dataset with
generated clips (`demo.chatml`), a tiny Wan dataset of clips through tiny Wan encoders
(`demo.wan`) and NeMo AutoModel's cache of the images (`demo.automodel`), and says what it made
where. It writes only into a new or empty
folder or an earlier demo's (`demo.folder`). The inputs are drawn by `demo.images`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from shardcook.demo.images import COLOURS, make_images
from shardcook.layouts.names import OURS_DIR, REPORT_HTML
from shardcook.storage.local import check_local_path

if TYPE_CHECKING:
    from shardcook.config import RunConfig

__all__ = ["COLOURS", "DemoResult", "make_images", "run_demo"]


@dataclass
class DemoResult:
    root: Path
    images: Path
    model: Path
    raw: Path
    encoded: Path
    seconds: float
    lines: list[str] = field(default_factory=list)


def _config(images: Path, out: Path, model: Path | None) -> RunConfig:
    from shardcook.config import resolve

    values = {"input_dir": str(images), "output_dir": str(out), "shard_size": 8,
              "split": "0.75,0.25,0", "image_size": 64, "overwrite": True, "quiet": True,
              "image_format": "png", "report_html": True}
    if model is not None:
        values.update(model_path=str(model), precision="fp32", t5_max_length=32, batch_size=4,
                      device="cpu")
        del values["image_format"]
    return resolve(values, set(values), encode=model is not None)


def run_demo(output_dir: str | Path = "shardcook-demo", n: int = 24) -> DemoResult:
    """Makes the demo under `output_dir` and returns what it did. The folder must be new, empty,
    or hold only what an earlier demo wrote there (which is replaced).

    Raises:
        ConfigError: `output_dir` holds anything else (nothing is changed).
        DatasetError: a demo dataset did not validate.
    """
    from shardcook.demo.folder import check_demo_folder, record_demo_folder

    check_local_path(output_dir, "--output-dir")
    root = Path(output_dir)
    check_demo_folder(root)
    try:
        return _run_demo(root, n)
    finally:
        if root.is_dir():
            record_demo_folder(root)  # all in it is the demo's, even after a failure


def report_page(dataset: Path) -> Path:
    """The page `--report-html` wrote for a demo dataset."""
    return dataset / OURS_DIR / REPORT_HTML


def _run_demo(root: Path, n: int) -> DemoResult:
    t0 = time.perf_counter()
    for name in ("shardcook.jobs.encode.job", "shardcook.pipeline.driver"):
        logging.getLogger(name).setLevel(logging.ERROR)  # "encoding on the CPU": expected here
    from shardcook.dataset import validate
    from shardcook.encoders.tiny import LABEL, build_tiny_flux
    from shardcook.jobs.encode.job import EncodeJob, quiet_model_libraries
    from shardcook.jobs.raw import RawJob
    from shardcook.pipeline.driver import run_pipeline

    quiet_model_libraries()
    images, model = root / "images", root / "tiny-flux-DEMO-WEIGHTS"
    raw_out, enc_out = root / "raw", root / "encoded"
    made = make_images(images, n)
    if not (model / "DEMO_WEIGHTS.txt").is_file():
        build_tiny_flux(model)
    raw_cfg, enc_cfg = _config(images, raw_out, None), _config(images, enc_out, model)
    raw_report = run_pipeline(raw_cfg, RawJob(raw_cfg))
    enc_report = run_pipeline(enc_cfg, EncodeJob(enc_cfg))
    assert raw_report is not None and enc_report is not None  # one process: rank 0 reports
    lines = [f"shardcook demo in {root.resolve()}",
             f"  inputs:   {len(made)} generated images with captions in {images}",
             f"            e.g. {made[0][0]}: \"{made[0][1]}\"",
             f"  encoders: {model}", f"            {LABEL}"]
    for name, out, rep in (("raw", raw_out, raw_report), ("encoded", enc_out, enc_report)):
        v = validate(out, deep=True)
        if not v.ok:
            from shardcook.errors import DatasetError

            raise DatasetError(f"the demo's {name} dataset did not validate: {v.problems}")
        lines.append(f"  {name + ':':<9} {out}: {rep['num_written']} samples in "
                     f"{rep['num_shards']} shards, finalized and validated "
                     f"({rep['wall_seconds']:.1f} s)")
        lines.append(f"            page: {report_page(out)}")
    lines.extend(_load_batches(raw_out, enc_out))
    from shardcook.demo.chatml import run_chatml_demo

    lines.extend(run_chatml_demo(root, made, images))
    from shardcook.demo.wan import run_wan_demo

    lines.extend(run_wan_demo(root, root / "tiny-wan-DEMO-WEIGHTS"))
    from shardcook.demo.automodel import run_automodel_demo

    lines.extend(run_automodel_demo(root, images, model))
    lines.append("  next:     shardcook info " + str(enc_out) + "   |   shardcook preview "
                 + str(enc_out) + " --model-path " + str(model))
    return DemoResult(root, images, model, raw_out, enc_out, time.perf_counter() - t0, lines)


def _load_batches(raw_out: Path, enc_out: Path) -> list[str]:
    """One batch of each dataset through shardcook.energon's loader."""
    import warnings

    from shardcook.energon import get_diffusion_loader

    warnings.filterwarnings("ignore", message=".*pin_memory.*")

    out = []
    loader = get_diffusion_loader(enc_out, batch_size=4, num_workers=0,
                                  shuffle_buffer_size=None, max_samples_per_sequence=None)
    b = next(iter(loader))
    out.append(f"  energon:  encoded batch: latents {list(b.latents.shape)} "
               f"{str(b.latents.dtype).removeprefix('torch.')}, prompt_embeds "
               f"{list(b.prompt_embeds.shape)}, pooled {list(b.pooled_prompt_embeds.shape)}")
    out.append(f"            captions: {b.captions[:2]}")
    loader = get_diffusion_loader(raw_out, batch_size=4, num_workers=0,
                                  shuffle_buffer_size=None, max_samples_per_sequence=None)
    r = next(iter(loader))
    shape = list(r.images.shape) if hasattr(r.images, "shape") else f"{len(r.images)} images"
    out.append(f"            raw batch: images {shape}, captions: {r.captions[:2]}")
    return out
