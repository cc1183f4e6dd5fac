"""Primus's command lines as its guide prints them: the `data` group (`data diffusion-encoded`,
`data diffusion-raw`), `--nproc-per-node` before the group, and the `--num-workers` and
`--validation-rows` spellings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers.chatml import turns, write_images, write_jsonl
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.encode import TINY, run_in_process, samples
from tests.helpers.raw import make_folder


def _primus_yaml(tmp: Path, src: Path, out: Path, model: Path) -> Path:
    cfg = {"source": {"type": "directory", "input_dir": str(src)},
           "output": {"output_dir": str(out), "shard_size": 2, "compress": False},
           "model": {"model_path": str(model), "precision": "fp32", "batch_size": 2,
                     "t5_max_length": TINY["t5_max_length"], "device": "cpu",
                     "vae_latent_mode": "presampled"},
           "image": {"image_size": TINY["image_size"], "center_crop": True}}
    path = tmp / "primus.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_data_diffusion_encoded_and_raw_run_as_pasted(tmp_path, tiny_flux):
    src = make_folder(tmp_path / "in", 3, photos=0)
    config = _primus_yaml(tmp_path, src, tmp_path / "enc", tiny_flux)
    run_in_process(["data", "diffusion-encoded", "--config", str(config), "--quiet",
                    "--num-workers", "1"])
    assert len(samples(tmp_path / "enc")) == 3
    run_in_process(["data", "diffusion-raw", "--source-type", "directory", "--input-dir",
                    str(src), "--output-dir", str(tmp_path / "raw"), "--image-size", "32",
                    "--quiet"])
    assert sorted(samples(tmp_path / "raw")) == sorted(samples(tmp_path / "enc"))


def test_data_group_commands_take_the_same_options_as_ours(tmp_path, tiny_flux):
    src = make_folder(tmp_path / "in", 1, photos=0)
    config = _primus_yaml(tmp_path, src, tmp_path / "out", tiny_flux)
    ours = run_in_process(["encode", "--config", str(config), "--print-config"]).output
    theirs = run_in_process(["data", "diffusion-encoded", "--config", str(config),
                             "--print-config"]).output
    assert theirs == ours
    r = run_in_process(["data", "diffusion-raw", "--config", str(config), "--print-config",
                        "--num-workers", "3"])
    assert yaml.safe_load(r.output)["image"]["workers"] == 3
    assert not (tmp_path / "out").exists()


def test_validation_rows_is_val_rows(tmp_path):
    folder = tmp_path / "c"
    names = write_images(folder, 4)
    jsonl = write_jsonl(folder / "data.jsonl",
                        [{"image": n, "conversations": turns(1)} for n in names])
    r = run_in_process(["chatml", "--input", str(jsonl), "--output-dir", str(tmp_path / "o"),
                        "--train-rows", "3", "--validation-rows", "1", "--print-config"])
    got = yaml.safe_load(r.output)["chatml"]
    assert (got["train_rows"], got["val_rows"]) == (3, 1)


@pytest.mark.parametrize("args, message", [
    (["--nproc-per-node", "0", "data", "diffusion-raw"], "--nproc-per-node must be between 1"),
    (["--nproc-per-node", "2", "info", "."], "info runs in one process, drop it"),
])
def test_nproc_per_node_that_cannot_work_is_one_sentence(tmp_path, args, message):
    r = cli(*args)
    assert r.code == 2 and message in one_error_line(r)


def test_nproc_per_node_under_a_launcher_is_one_sentence(tmp_path, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    r = cli("--nproc-per-node", "2", "raw", "--input-dir", tmp_path, "--output-dir",
            tmp_path / "out")
    assert r.code == 2 and "already runs under a launcher" in one_error_line(r)
    assert not (tmp_path / "out").exists()


def test_nproc_per_node_in_process_is_one_sentence(tmp_path):
    """In-process (this test's own sys.argv is pytest's) no worker is started with the wrong
    command line."""
    r = cli("--nproc-per-node", "2", "raw", "--input-dir", tmp_path, "--output-dir",
            tmp_path / "out")
    assert r.code == 2 and "works from the command line" in one_error_line(r)
    assert not (tmp_path / "out").exists()
