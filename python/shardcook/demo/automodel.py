"""`shardcook demo`'s NeMo AutoModel part: the demo's images through its tiny FLUX encoders into
AutoModel's diffusion cache (`encode --layout automodel --model-type flux`), one file read back
with `torch.load(weights_only=True)` as AutoModel's dataset reads it."""

from __future__ import annotations

import json
from pathlib import Path

from shardcook.config import RunConfig


def config(images: Path, out: Path, model: Path) -> RunConfig:
    from shardcook.config import resolve

    values = {"layout": "automodel", "model_type": "flux", "input_dir": str(images),
              "output_dir": str(out), "model_path": str(model), "device": "cpu",
              "batch_size": 8, "overwrite": True, "quiet": True}
    return resolve(values, set(values), encode=True)


def run_automodel_demo(root: Path, images: Path, model: Path) -> list[str]:
    """Writes `root/automodel/` from `images` with the tiny FLUX encoders at `model`; returns
    the demo's lines about it.

    Raises:
        DatasetError: the cache does not hold a file for every image.
    """
    import torch

    from shardcook.errors import DatasetError
    from shardcook.jobs.encode.job import encode_job
    from shardcook.pipeline.driver import run_pipeline

    out = root / "automodel"
    cfg = config(images, out, model)
    rep = run_pipeline(cfg, encode_job(cfg))
    assert rep is not None  # one process: rank 0 reports
    metadata = json.loads((out / "metadata.json").read_text(encoding="utf-8"))
    files = sorted(out.glob("*x*/*.pt"))
    if metadata.get("total_items") != rep["num_written"] or len(files) != rep["num_written"]:
        raise DatasetError(f"the demo's AutoModel cache holds {len(files)} files for "
                           f"{rep['num_written']} images")
    first = torch.load(files[0], map_location="cpu", weights_only=True)
    buckets = sorted({f.parent.name for f in files})
    return [(f"  automodel: {out}: {len(files)} cache files in {len(buckets)} bucket(s) "
             f"({', '.join(buckets)}), NeMo AutoModel's diffusion cache "
             f"({rep['wall_seconds']:.1f} s)"),
            (f"            {files[0].relative_to(out)}: latent {list(first['latent'].shape)} "
             f"{str(first['latent'].dtype).removeprefix('torch.')}, prompt_embeds "
             f"{list(first['prompt_embeds'].shape)}, prompt \"{first['prompt']}\"")]
