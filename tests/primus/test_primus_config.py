"""Primus's configs, flags and command names run unchanged: a Primus-structured YAML (every
section) drives `encode` with tiny encoders and `raw`; bad Primus input stops before any work."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from tests.helpers.encode import TINY, run_in_process, samples
from tests.helpers.raw import encode, generated, photo


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    """A local Hugging Face dataset whose caption lives in a JSON struct for some rows and in a
    plain column for others (so a list of caption keys is needed, tried in order)."""
    import datasets

    root = tmp_path_factory.mktemp("hf") / "photos"
    n = 4
    datasets.Dataset.from_dict({
        "image": [{"bytes": encode(photo(i) if i < 2 else generated(i), "png"), "path": None}
                  for i in range(n)],
        "meta": [{"caption": f"json caption {i}" if i % 2 == 0 else None} for i in range(n)],
        "text": [f"plain caption {i}" for i in range(n)],
    }).cast_column("image", datasets.Image()).save_to_disk(str(root))
    return root


def _token_file(tmp: Path, mode: int = 0o600) -> Path:
    path = tmp / "hf_token"
    path.write_text("hf_primus_test_token_not_real\n")
    os.chmod(path, mode)
    return path


def primus_yaml(tmp: Path, hf: Path, out: Path, model: Path | None, **image: object) -> Path:
    """A config in Primus's documented structure, with every section it has."""
    cfg = {
        "source": {"type": "huggingface", "hf_dataset": str(hf), "hf_split": "train"},
        "output": {"output_dir": str(out), "shard_size": 2, "max_samples": 4, "compress": False},
        "image": {"image_size": TINY["image_size"], "center_crop": False, "variable_size": False,
                  "max_size": 128, **image},
        "data_format": {"image_key": "image", "caption_keys": ["meta.caption", "text"]},
        "auth": {"hf_token_file": str(_token_file(tmp))},
    }
    if model is not None:
        cfg["model"] = {"model_path": str(model), "vae_path": None, "t5_path": None,
                        "clip_path": None, "precision": "fp32", "batch_size": 2,
                        "t5_max_length": TINY["t5_max_length"], "device": "cpu",
                        "vae_latent_mode": "presampled"}
    path = tmp / "primus.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def test_primus_yaml_resolves_to_our_keys(tmp_path, hf_folder):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", Path("some/model"))
    r = run_in_process(["diffusion-encoded", "--config", str(config), "--print-config"])
    got = yaml.safe_load(r.output)
    assert got["source"]["source_type"] == "huggingface"
    assert got["source"]["max_samples"] == 4
    assert got["image"]["resize_mode"] == "stretch"  # center_crop: false squashes
    assert got["model"]["latent_mode"] == "sample"  # presampled
    assert got["data_format"]["image_column"] == "image"
    assert got["data_format"]["caption_columns"] == ["meta.caption", "text"]
    assert "hf_primus_test_token" not in r.output  # the path is shown, never the token
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("image, flags, mode", [
    ({"center_crop": True}, [], "crop"),
    ({"center_crop": True, "variable_size": True}, [], "variable"),
    ({}, ["--variable-size"], "variable"),
    ({"center_crop": False}, ["--center-crop"], "crop"),  # the command line wins over the file
    ({}, ["--no-center-crop"], "stretch"),
])
def test_primus_image_keys_and_flags_pick_the_resize_mode(tmp_path, hf_folder, image, flags,
                                                          mode):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", None, **image)
    r = run_in_process(["diffusion-raw", "--config", str(config), "--print-config", *flags])
    assert yaml.safe_load(r.output)["image"]["resize_mode"] == mode


def test_train_split_is_primus_split(tmp_path, hf_folder):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", None)
    r = run_in_process(["raw", "--config", str(config), "--print-config", "--train-split", "0.8"])
    split = yaml.safe_load(r.output)["output"]["split"]
    assert split == pytest.approx([0.8, 0.1, 0.1])


def test_primus_yaml_runs_raw(tmp_path, hf_folder):
    out = tmp_path / "raw"
    config = primus_yaml(tmp_path, hf_folder, out, None)
    r = run_in_process(["diffusion-raw", "--config", str(config), "--quiet"])
    assert "hf_primus_test_token" not in r.output
    got = samples(out)
    assert sorted(got) == [f"{i:010d}" for i in range(4)]
    for i, (_key, parts) in enumerate(sorted(got.items())):
        caption = f"json caption {i}" if i % 2 == 0 else f"plain caption {i}"
        assert parts["txt"].decode() == caption
        img = Image.open(__import__("io").BytesIO(parts["jpg"]))
        assert img.size == (TINY["image_size"],) * 2  # squashed, not cropped


def test_primus_yaml_runs_encode_with_tiny_encoders(tmp_path, hf_folder, tiny_flux):
    out = tmp_path / "enc"
    config = primus_yaml(tmp_path, hf_folder, out, tiny_flux)
    run_in_process(["diffusion-encoded", "--config", str(config), "--quiet", "--workers", "1"])
    got = samples(out)
    assert len(got) == 4
    side = TINY["image_size"] // 8
    for i, (_key, parts) in enumerate(sorted(got.items())):
        assert parts["caption.txt"].decode() == (
            f"json caption {i}" if i % 2 == 0 else f"plain caption {i}")
        assert set(parts) == {"latents.pth", "prompt_embeds.pth", "pooled_prompt_embeds.pth",
                              "caption.txt", "meta.json"}
        from tests.helpers.encode import load_tensor

        assert load_tensor(parts["latents.pth"]).shape[-2:] == (side, side)
    manifest = json.loads((out / ".shardcook" / "manifest.json").read_text())
    assert manifest["latent_mode"] == "sample"


# --- bad input: one sentence, exit 2, nothing written ---------------------------------------


def _refused(tmp_path: Path, args: list[str], message: str) -> None:
    r = run_in_process(args, expect=2)
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    assert message in lines[0]
    assert "Traceback" not in r.output
    assert not (tmp_path / "out").exists()


def test_conflicting_spellings_in_the_yaml(tmp_path, hf_folder):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({
        "source": {"type": "directory", "source_type": "huggingface", "hf_dataset": str(hf_folder)},
        "output": {"output_dir": str(tmp_path / "out")},
    }))
    _refused(tmp_path, ["raw", "--config", str(config)],
             "`source.type` and `source.source_type` disagree")


def test_conflicting_primus_and_our_image_keys(tmp_path, hf_folder):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", None, resize_mode="crop")
    _refused(tmp_path, ["raw", "--config", str(config)],
             "`image.center_crop` and `image.resize_mode` disagree")


def test_conflicting_flags(tmp_path, hf_folder):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", None)
    _refused(tmp_path, ["raw", "--config", str(config), "--center-crop", "--resize-mode",
                        "stretch"], "`--center-crop` and `--resize-mode` disagree")


def test_compress_true_is_refused_with_the_reason(tmp_path, hf_folder):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", None)
    data = yaml.safe_load(config.read_text())
    data["output"]["compress"] = True
    config.write_text(yaml.safe_dump(data))
    _refused(tmp_path, ["diffusion-raw", "--config", str(config)],
             "uncompressed tars by byte offset")


@pytest.mark.parametrize("command", ["diffusion-raw", "diffusion-encoded"])
def test_compress_flag_is_refused_with_the_reason(tmp_path, hf_folder, command):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", Path("m"))
    _refused(tmp_path, [command, "--config", str(config), "--compress"],
             "`--compress` is not supported: Energon indexes and reads uncompressed tars")


def test_primus_image_format_names(tmp_path, hf_folder):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", None)
    for primus, ours in (("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")):
        r = run_in_process(["diffusion-raw", "--config", str(config), "--print-config",
                            "--image-format", primus])
        assert yaml.safe_load(r.output)["image"]["image_format"] == ours


@pytest.mark.parametrize("command", ["raw", "encode", "chatml"])
def test_loose_token_file_is_refused(tmp_path, hf_folder, command):
    token = _token_file(tmp_path, 0o644)
    args = [command, "--hf-dataset", str(hf_folder), "--output-dir", str(tmp_path / "out"),
            "--hf-token-file", str(token)]
    if command != "chatml":
        args += ["--source-type", "huggingface"]
    _refused(tmp_path, args, "chmod 600")


def test_loose_token_file_in_the_yaml_is_refused(tmp_path, hf_folder):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", None)
    os.chmod(tmp_path / "hf_token", 0o644)
    _refused(tmp_path, ["raw", "--config", str(config)], "chmod 600")


@pytest.mark.parametrize("value", ["1.5", "-0.1", "nan"])
def test_train_split_out_of_range(tmp_path, hf_folder, value):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", None)
    _refused(tmp_path, ["raw", "--config", str(config), "--train-split", value],
             "must be a fraction between 0 and 1")


def test_unknown_vae_latent_mode(tmp_path, hf_folder):
    config = primus_yaml(tmp_path, hf_folder, tmp_path / "out", Path("m"))
    _refused(tmp_path, ["encode", "--config", str(config), "--vae-latent-mode", "bogus"],
             "must be one of presampled, resample")


def test_stretch_really_squashes(tmp_path):
    """The pixels of `--no-center-crop` are the whole image resized, not a crop of it."""
    src = tmp_path / "in"
    src.mkdir()
    arr = np.zeros((64, 128, 3), np.uint8)
    arr[:, :64] = 255  # left half white, right half black
    (src / "a.png").write_bytes(encode(arr, "png"))
    (src / "a.txt").write_text("half")
    out = tmp_path / "o"
    run_in_process(["diffusion-raw", "--input-dir", str(src), "--output-dir", str(out),
                    "--image-size", "32", "--no-center-crop", "--image-format", "png",
                    "--quiet"])
    (parts,) = samples(out).values()
    img = np.asarray(Image.open(__import__("io").BytesIO(parts["png"])))
    assert img.shape == (32, 32, 3)
    assert img[:, :12].min() > 200 and img[:, 20:].max() < 50


CONFIGS = Path(__file__).parents[2] / "configs"


@pytest.mark.parametrize("config", sorted(CONFIGS.rglob("*.yaml")),
                         ids=lambda p: str(p.relative_to(CONFIGS)))
def test_every_example_config_resolves(config):
    """Every file in configs/ resolves as its header says it runs: Primus's (configs/primus)
    with both of Primus's `data` commands, ours with raw and encode; what it names lands in the
    resolved config, and nothing is written."""
    data = yaml.safe_load(config.read_text())
    primus = config.parent.name == "primus"
    commands = ([["data", "diffusion-raw"], ["data", "diffusion-encoded"]] if primus
                else [["raw"], ["encode"]])
    for command in commands:
        got = yaml.safe_load(run_in_process([*command, "--config", str(config),
                                             "--print-config"]).output)
        source = data["source"]
        assert got["source"]["source_type"] == source["type" if primus else "source_type"]
        assert got["output"]["output_dir"] == data["output"]["output_dir"]
        assert got["image"]["image_size"] == data["image"].get("image_size", 1024)
        if command[-1] in ("encode", "diffusion-encoded") and "model" in data:
            assert got["model"]["model_path"] == data["model"]["model_path"]
        assert not Path(data["output"]["output_dir"]).exists()
