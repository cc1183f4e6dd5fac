"""`validate`, `info` and `report` on NeMo AutoModel's diffusion cache, as `encode --layout
automodel` writes it and as AutoModel's own tool writes it (its vendored processors, saved as its
`preprocessing_multiprocess.py` saves them); each damage named in one line; and `--overwrite` of
an automodel run leaving nothing of the earlier cache."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.automodel.test_automodel_flux import automodel_models, flux_root  # noqa: F401
from tests.helpers.automodel import (
    SIZES,
    THREADS,
    copy_of,
    encode_args,
    entries,
    make_inputs,
    reference_cache,
    run_encode,
)

SEED = 7


def shardcook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", *args], capture_output=True,
                          text=True, timeout=600)


def problems(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in result.stderr + result.stdout
    return [line for line in result.stdout.splitlines() if line.startswith("problem: ")]


@pytest.fixture(scope="module")
def written(tiny_qwen_image, tmp_path_factory) -> Path:
    """A Qwen-Image cache `encode --layout automodel` wrote."""
    root = tmp_path_factory.mktemp("checks")
    make_inputs(root / "in")
    run_encode("qwen_image", root / "in", root / "out", tiny_qwen_image, SEED)
    return root / "out"


@pytest.fixture
def cache(written: Path, tmp_path: Path) -> Path:
    """A copy of `written` of its own: its entries name the copy's files."""
    return copy_of(written, tmp_path / "cache")


def first_of_bucket(cache: Path) -> Path:
    """The first listed file of a bucket holding two (what validate reads without --deep)."""
    listed = [Path(e["cache_file"]) for e in entries(cache)]
    return next(p for p in listed if sum(q.parent == p.parent for q in listed) > 1)


def test_a_good_cache_validates_and_info_shows_it(cache: Path) -> None:
    for deep in ([], ["--deep"]):
        result = shardcook("validate", *deep, str(cache))
        assert (result.returncode, problems(result)) == (0, []), result.stdout
    info = shardcook("info", str(cache))
    assert info.returncode == 0, info.stderr
    buckets = {f"{w}x{h}" for w, h in (e["bucket_resolution"] for e in entries(cache))}
    assert len(buckets) > 2
    for want in ("model_type:  qwen_image", f"samples:     {len(SIZES)}", f"buckets:     "
                 f"{len(buckets)}", "latent                     float16[16,",
                 "prompt_embeds_mask         int64[1,", "written by shardcook:",
                 f"recorded total_items       {len(SIZES)}", "latent_seed                7"):
        assert want in info.stdout, (want, info.stdout)
    for bucket in buckets:
        n = sum(f"{w}x{h}" == bucket for w, h in (e["bucket_resolution"]
                                                    for e in entries(cache)))
        assert f"  {bucket + ':':<12} {n}" in info.stdout
    shown = json.loads(shardcook("info", "--json", str(cache)).stdout)
    assert shown["samples"] == len(SIZES) and sum(shown["buckets"].values()) == len(SIZES)


def test_a_missing_file(cache: Path) -> None:
    gone = Path(entries(cache)[-1]["cache_file"])
    gone.unlink()
    result = shardcook("validate", str(cache))
    assert result.returncode == 1
    (line,) = problems(result)
    assert "1 cache file(s) listed in the metadata shards are missing" in line
    assert str(gone) in line


def test_an_extra_unlisted_file(cache: Path) -> None:
    listed = Path(entries(cache)[0]["cache_file"])
    extra = listed.parent / ("0" * 32 + ".pt")
    shutil.copy(listed, extra)
    result = shardcook("validate", str(cache))
    assert result.returncode == 1
    (line,) = problems(result)
    assert "listed in no metadata shard" in line and extra.name in line


def test_a_count_mismatch(cache: Path) -> None:
    meta = json.loads((cache / "metadata.json").read_text())
    (cache / "metadata.json").write_text(json.dumps({**meta, "total_items": len(SIZES) + 1}))
    result = shardcook("validate", str(cache))
    assert result.returncode == 1
    assert problems(result) == [f"problem: {cache / 'metadata.json'} says total_items "
                                f"{len(SIZES) + 1} but its shards hold {len(SIZES)} entries"]


def test_a_truncated_file(cache: Path) -> None:
    """Without --deep only the first file of each bucket is read; --deep reads every one."""
    listed = [Path(e["cache_file"]) for e in entries(cache)]
    second = next(p for p in listed[::-1] if sum(q.parent == p.parent for q in listed) > 1)
    assert second != first_of_bucket(cache)
    second.write_bytes(second.read_bytes()[: second.stat().st_size // 2])
    assert shardcook("validate", str(cache)).returncode == 0
    result = shardcook("validate", "--deep", str(cache))
    assert result.returncode == 1
    (line,) = problems(result)
    assert line.startswith(f"problem: {second} cannot be loaded (truncated or damaged")


def plant(marker: str) -> str:
    Path(marker).write_text("ran")
    return "planted"


class Planted:
    """A custom class: unpickled by a plain torch.load, it would create `marker`."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return plant, (self.marker,)


def test_a_pickle_that_is_not_weights_only_is_refused_never_run(cache: Path,
                                                                tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    victim = first_of_bucket(cache)
    data = torch.load(victim, weights_only=True)
    torch.save({**data, "prompt": Planted(marker)}, victim)
    result = shardcook("validate", str(cache))
    info = shardcook("info", str(cache))
    assert not marker.exists()
    assert result.returncode == 1
    (line,) = problems(result)
    assert line == (f"problem: {victim} refers to {__name__}.plant, which a weights-only load "
                    "refuses (nothing in the file was run); AutoModel's dataloader refuses it too")
    assert info.returncode == 0
    # what a plain load would have done: the test can fail
    torch.load(victim, weights_only=False)
    assert marker.exists()


def test_a_wrong_latent_size_for_its_bucket(cache: Path) -> None:
    victim = first_of_bucket(cache)
    data = torch.load(victim, weights_only=True)
    channels, height, width = data["latent"].shape
    torch.save({**data, "latent": torch.zeros(channels, height + 2, width,
                                              dtype=torch.float16)}, victim)
    result = shardcook("validate", str(cache))
    assert result.returncode == 1
    w, h = data["bucket_resolution"]
    (line,) = problems(result)
    assert line == (f"problem: {victim} latent is [{channels}, {height + 2}, {width}], but its "
                    f"bucket {w}x{h} needs height and width {h // 8}x{w // 8} (the VAE "
                    "downsamples by 8)")


def test_an_unknown_model_type_and_other_channels(cache: Path) -> None:
    victim = Path(entries(cache)[-1]["cache_file"])
    data = torch.load(victim, weights_only=True)
    latent = data["latent"]
    torch.save({**data, "latent": latent[:3].clone()}, victim)
    result = shardcook("validate", "--deep", str(cache))
    lines = problems(result)
    assert result.returncode == 1 and len(lines) == 1 and "channels where the first file's" in (
        lines[0]), lines
    meta = json.loads((cache / "metadata.json").read_text())
    (cache / "metadata.json").write_text(json.dumps({**meta, "model_type": "sd9"}))
    lines = problems(shardcook("validate", str(cache)))
    assert any("names the model_type 'sd9', which no family writes" in p for p in lines)


def test_report_writes_the_page_into_the_cache_and_neither_kind_is_named(cache: Path,
                                                                         tmp_path: Path) -> None:
    report = shardcook("report", str(cache))
    page = cache / ".shardcook" / "report.html"
    assert report.returncode == 0 and report.stdout.strip() == f"wrote {page}", report.stderr
    text = page.read_text()
    buckets = {f"{w}x{h}" for w, h in (e["bucket_resolution"] for e in entries(cache))}
    assert f'<span data-count="samples">{len(SIZES)}</span>' in text
    assert all(f'<tr data-bucket="{b}">' in text for b in buckets)
    assert "qwen_image (processor qwen_image)" in text
    # the page in the cache is nothing AutoModel or validate would read
    result = shardcook("validate", str(cache))
    assert (result.returncode, problems(result)) == (0, []), result.stdout
    (tmp_path / "neither").mkdir()
    (tmp_path / "neither" / "a.jpg").write_bytes(b"")
    neither = shardcook("validate", str(tmp_path / "neither"))
    assert neither.returncode == 1
    (line,) = problems(neither)
    assert "nor a NeMo AutoModel cache's metadata.json" in line


def _tool_cache(processor, models, inputs: Path, out: Path) -> None:
    """What AutoModel's `preprocessing_multiprocess.py` writes: each file `torch.save`d where its
    entry names it, then `_save_metadata_shards`' files."""
    results = reference_cache(processor, models, inputs, out, 256 * 256, SEED)
    for result in results:
        path = Path(result["entry"]["cache_file"])
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(result["file"], path)
    listed = [r["entry"] for r in results]
    (out / "metadata_shard_0000.json").write_text(json.dumps(listed, indent=2))
    (out / "metadata.json").write_text(json.dumps({
        "processor": processor.model_type, "model_name": "tiny",
        "model_type": processor.model_type, "total_items": len(listed), "num_shards": 1,
        "shard_size": 10000, "shards": ["metadata_shard_0000.json"],
        "caption_field": "internvl", "max_pixels": 256 * 256}, indent=2))


@pytest.mark.parametrize("family", ["flux", "flux2", "qwen_image"])
def test_a_cache_written_by_automodels_tool_validates(family: str, request,
                                                       tmp_path: Path) -> None:
    if family == "flux":
        from tests.vendored.automodel.processors.flux import FluxProcessor

        processor, models = FluxProcessor(), automodel_models(request.getfixturevalue(
            "flux_root"))
    else:
        from tests.vendored.automodel.processors.flux2 import Flux2Processor
        from tests.vendored.automodel.processors.qwen_image import QwenImageProcessor

        processor = Flux2Processor() if family == "flux2" else QwenImageProcessor()
        models = processor.load_models(str(request.getfixturevalue(f"tiny_{family}")), "cpu")
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    _tool_cache(processor, models, inputs, out)
    assert not (out / ".shardcook").exists()
    result = shardcook("validate", "--deep", str(out))
    assert (result.returncode, problems(result)) == (0, []), result.stdout
    info = shardcook("info", str(out))
    assert f"model_type:  {family}" in info.stdout and "written by shardcook" not in info.stdout
    # the family's rules apply to it: a latent of another rank is named
    victim = Path(entries(out)[0]["cache_file"])
    data = torch.load(victim, weights_only=True)
    torch.save({**data, "latent": data["latent"][None]}, victim)
    (line,) = problems(shardcook("validate", str(out)))
    assert "latent is float16[1," in line and "not a tensor of rank 3" in line


def test_overwrite_with_fewer_inputs_leaves_nothing_stale(tiny_qwen_image, tmp_path: Path,
                                                         monkeypatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", str(THREADS))
    inputs, out = tmp_path / "in", tmp_path / "out"
    make_inputs(inputs)
    first = shardcook(*encode_args("qwen_image", inputs, out, tiny_qwen_image, SEED))
    assert first.returncode == 0, first.stderr
    before = {p.name for p in out.glob("*x*/*.pt")}
    shutil.rmtree(inputs / "sub")  # the JPEGs: half the inputs
    kept = sorted(str(p.absolute()) for p in inputs.glob("*.png") if p.name != "zz_broken.png")
    (out / "notes.txt").write_text("mine")
    again = shardcook(*encode_args("qwen_image", inputs, out, tiny_qwen_image, SEED,
                                   "--overwrite"))
    assert again.returncode == 0, again.stderr
    listed = entries(out)
    assert sorted(e["image_path"] for e in listed) == kept
    assert json.loads((out / "metadata.json").read_text())["total_items"] == len(kept)
    files = {str(p) for p in out.glob("*x*/*.pt")}
    assert files == {e["cache_file"] for e in listed} and len(files) < len(before)
    assert all(any(folder.iterdir()) for folder in out.glob("*x*/"))  # no empty bucket left
    assert (out / "notes.txt").read_text() == "mine"
    result = shardcook("validate", "--deep", str(out))
    assert (result.returncode, problems(result)) == (0, []), result.stdout
