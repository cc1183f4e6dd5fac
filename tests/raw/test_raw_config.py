"""`shardcook raw` configuration: CLI > YAML > defaults, errors naming the key, --print-config."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from shardcook.config import RunConfig, load_yaml, output_affecting, resolve
from shardcook.errors import ConfigError

from tests.helpers.raw import run_cli


def _yaml(tmp_path, data) -> str:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def _printed(*args) -> dict:
    return yaml.safe_load(run_cli("raw", "--print-config", *args).stdout)


def test_defaults_yaml_and_cli_precedence(tmp_path):
    cfg = _yaml(tmp_path, {
        "source": {"input_dir": "in"},
        "output": {"output_dir": "o", "shard_size": 7},
        "image": {"image_size": 512, "image_quality": 80, "resize_mode": "stretch"},
    })
    got = _printed("--config", cfg, "--image-size", "256")
    assert got["image"]["image_size"] == 256  # CLI beats YAML
    assert got["image"]["image_quality"] == 80  # YAML beats default
    assert got["output"]["shard_size"] == 7
    assert got["image"]["image_format"] == "jpg"  # default
    assert got["image"]["resize_mode"] == "stretch"
    # an option given explicitly wins even when it equals the default
    got = _printed("--config", cfg, "--image-quality", "95", "--shard-size", "1000",
                   "--resize-mode", "crop")
    assert got["image"]["image_quality"] == 95
    assert got["output"]["shard_size"] == 1000
    assert got["image"]["resize_mode"] == "crop"


def test_boolean_flags_and_lists(tmp_path):
    cfg = _yaml(tmp_path, {"source": {"input_dir": "in"},
                           "output": {"output_dir": "o", "finalize": False, "split": [8, 1, 1]}})
    got = _printed("--config", cfg)
    assert got["output"]["finalize"] is False
    assert got["output"]["split"] == [8.0, 1.0, 1.0]
    got = _printed("--config", cfg, "--finalize", "--split", "1,0,0")
    assert got["output"]["finalize"] is True
    assert got["output"]["split"] == [1.0, 0.0, 0.0]


def test_resolve_without_yaml_uses_cli_values():
    cfg = resolve({"input_dir": "in", "output_dir": "o", "image_size": 64}, set())
    assert cfg.image.image_size == 64 and cfg.source.input_dir == "in"
    assert cfg.image.image_quality == RunConfig().image.image_quality


@pytest.mark.parametrize(("data", "needle"), [
    ({"image": {"image_sise": 3}}, "image.image_sise"),
    ({"imagez": {}}, "imagez"),
    ({"image": {"image_size": "big"}}, "image.image_size"),
    ({"image": {"image_size": True}}, "image.image_size"),
    ({"output": {"finalize": "yes"}}, "output.finalize"),
    ({"output": {"split": "a,b,c"}}, "output.split"),
    ({"source": {"hf_data_files": 3}}, "source.hf_data_files[0]"),
    ({"model": {"batch_size": 1.5}}, "model.batch_size"),
])
def test_yaml_errors_name_the_key(tmp_path, data, needle):
    with pytest.raises(ConfigError) as e:
        load_yaml(_yaml(tmp_path, data))
    assert needle in str(e.value)
    r = run_cli("raw", "--config", _yaml(tmp_path, data), "--print-config", check=False)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_yaml_not_a_mapping_and_missing_file(tmp_path):
    p = tmp_path / "l.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_yaml(p)
    p.write_text("a: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml(p)
    with pytest.raises(ConfigError, match="does not exist"):
        load_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize(("args", "needle"), [
    (["--source-type", "ftp"], "--source-type"),
    (["--resize-mode", "zoom"], "--resize-mode"),
    (["--image-format", "gif"], "--image-format"),
    (["--image-quality", "0"], "--image-quality"),
    (["--shard-size", "0"], "--shard-size"),
    (["--split", "1,1"], "--split"),
    (["--split", "0,0,0"], "--split"),
    (["--split", "x,y,z"], "--split"),
    (["--image-size", "0"], "--image-size"),
    (["--min-size", "-1"], "--min-size"),
    (["--max-samples", "-2"], "--max-samples"),
    (["--max-samples", "0"], "--max-samples"),
    (["--workers", "0"], "--workers"),
])
def test_bad_option_values_end_before_any_work(tmp_path, args, needle):
    out = tmp_path / "out"
    r = run_cli("raw", "--input-dir", str(tmp_path), "--output-dir", str(out), *args, check=False)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_required_options(tmp_path):
    r = run_cli("raw", "--output-dir", str(tmp_path / "o"), "--source-type", "huggingface",
                check=False)
    assert r.returncode == 2 and "--hf-dataset" in r.stderr
    r = run_cli("raw", "--input-dir", str(tmp_path), check=False)
    assert r.returncode == 2 and "--output-dir" in r.stderr


def test_the_output_folder_is_reached_only_as_a_location():
    """The config gives its output folder as a `Location` alone (a local path, or a URL with its
    client): no `path` that would make `s3://bucket/run` a local folder named `s3:`."""
    from shardcook.config.sections import OutputConfig

    assert not hasattr(OutputConfig, "path")
    with pytest.raises(ConfigError, match=r"^--output-dir is required"):
        OutputConfig().location  # noqa: B018 - the property raises
    out = resolve({"input_dir": "in", "output_dir": "runs/out"}, {"input_dir", "output_dir"})
    assert out.output.location.is_local
    assert out.output.location.path == pathlib.Path("runs/out")


def test_runtime_only_options_do_not_block_resume():
    a = resolve({"input_dir": "in", "output_dir": "o"}, set())
    b = resolve({"input_dir": "in", "output_dir": "o2", "workers": 3, "quiet": True,
                 "finalize": False}, set())
    assert output_affecting(a) == output_affecting(b)
    c = resolve({"input_dir": "in", "output_dir": "o", "image_quality": 90}, set())
    assert output_affecting(a) != output_affecting(c)


def test_reference_config_lists_every_field():
    import pathlib

    ref = yaml.safe_load((pathlib.Path(__file__).parents[2] / "configs" / "reference.yaml")
                         .read_text())
    assert ref == {k: dict(v) for k, v in ref.items()}
    assert {s: set(v) for s, v in ref.items()} == {
        s: set(v) for s, v in RunConfig().to_dict().items()}
    # and the defaults it shows are the real ones (paths aside)
    defaults = RunConfig().to_dict()
    for section, values in ref.items():
        for key, value in values.items():
            if key not in ("input_dir", "output_dir"):
                assert value == defaults[section][key], f"{section}.{key}"


@pytest.fixture(scope="module")
def demo_checkout(tmp_path_factory):
    """A folder where `shardcook demo` ran, as a fresh checkout would have it."""
    from shardcook.demo import run_demo

    root = tmp_path_factory.mktemp("checkout")
    run_demo(root / "shardcook-demo")
    return root


@pytest.fixture(scope="module")
def ten_photo_checkout(tmp_path_factory):
    """A checkout where a user put 10 photos with same-stem captions where the configs look."""
    from tests.helpers.raw import make_folder

    root = tmp_path_factory.mktemp("ten")
    make_folder(root / "shardcook-demo" / "images", 10, layout="flat")
    return root


def _hf_copy(images: pathlib.Path, dest: pathlib.Path) -> tuple[pathlib.Path, int]:
    """The images of a folder (same-stem `.txt` captions) as a local Hugging Face dataset
    (`image`, `text`), like the hub examples; with how many rows."""
    import datasets

    files = sorted(p for p in images.iterdir() if p.suffix != ".txt")
    datasets.Dataset.from_dict({
        "image": [{"bytes": p.read_bytes(), "path": None} for p in files],
        "text": [p.with_suffix(".txt").read_text().strip() for p in files],
    }).cast_column("image", datasets.Image()).save_to_disk(str(dest))
    return dest, len(files)


def _hf_copy_of_demo(root):
    """The demo images as a local Hugging Face dataset (`image`, `text`)."""
    return _hf_copy(root / "shardcook-demo" / "images", root / "hf-local")


CONFIGS = pathlib.Path(__file__).parents[2] / "configs"
#: The configs that cannot run as written here, and why; each runs with the one substitution
#: named instead.
NOT_AS_WRITTEN = {
    "huggingface.yaml": "it reads reach-vb/pokemon-blip-captions from the Hugging Face hub; run "
                        "with a local copy of the same images (--hf-dataset) instead",
}


@pytest.mark.parametrize("checkout", ["demo_checkout", "ten_photo_checkout"])
def test_example_configs_run(checkout, request, monkeypatch):
    """Every file in configs/ runs as written, no option added, after `shardcook demo` and on a
    folder of 10 photos, but those in NOT_AS_WRITTEN; webdataset.yaml reads the demo's tars."""
    import json

    from shardcook import validate
    from shardcook.cli import app
    from typer.testing import CliRunner

    root = request.getfixturevalue(checkout)
    monkeypatch.chdir(root)
    names = sorted(p.name for p in CONFIGS.glob("*.yaml"))
    assert names == ["directory.yaml", "huggingface.yaml", "reference.yaml", "webdataset.yaml"]
    for name in names:
        cfg = yaml.safe_load((CONFIGS / name).read_text())
        kind = cfg["source"]["source_type"]
        if kind == "webdataset" and checkout == "ten_photo_checkout":
            continue  # no tars there
        args: list[str] = []
        if kind == "huggingface":
            assert "Hugging Face hub" in NOT_AS_WRITTEN[name]
            hf, _ = _hf_copy(root / "shardcook-demo" / "images", root / f"hf-{name}")
            args = ["--hf-dataset", str(hf)]
        r = CliRunner().invoke(app, ["raw", "--config", str(CONFIGS / name), *args])
        assert r.exit_code == 0, (name, r.output)
        out = root / cfg["output"]["output_dir"]
        assert validate(out).ok, name
        rep = json.loads((out / ".shardcook" / "report.json").read_text())
        n = 10 if checkout == "ten_photo_checkout" else 24
        assert rep["num_written"] == n, (name, rep)
        split = yaml.safe_load((out / ".nv-meta" / "split.yaml").read_text())["split_parts"]
        wanted = cfg["output"].get("split", [1, 0, 0])
        assert [bool(split[s]) for s in ("train", "val", "test")] == [r > 0 for r in wanted]


def _readme_block(title: str) -> list[str]:
    """The command lines of the README's first bash block after the paragraph `title` opens
    (a line continued by a backslash joined)."""
    text = (CONFIGS.parent / "README.md").read_text(encoding="utf-8")
    block = text[text.index(title):].split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("checkout", ["demo_checkout", "ten_photo_checkout"])
def test_readme_raw_examples_run_as_written(checkout, request, tmp_path):
    """The README's raw examples, each as written in a folder of its own holding `photos/` (10
    photos), `./my_ds` (them as a Hugging Face dataset), `configs/` and `shardcook-demo/` (the
    demo's, or 10 photos in its images/). The torchrun line starts 4 workers; it runs on the
    demo's folder only, to spare the time. The other README examples need what this machine
    lacks: encode's FLUX.1-dev and Wan from the hub and a GPU; chatml, finalize and object
    storage the user's own inputs (their own tests run them)."""
    import os
    import shlex
    import subprocess
    import sys

    from shardcook import validate

    root = request.getfixturevalue(checkout)
    lines = _readme_block("**raw**:")
    assert len(lines) == 4 and lines[0].startswith("shardcook raw --input-dir photos/"), lines
    from tests.helpers.raw import make_folder

    photos = make_folder(tmp_path / "photos", 10, layout="flat")
    my_ds, _ = _hf_copy(photos, tmp_path / "my_ds")
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1",
           "PET_MASTER_PORT": str(_free_port())}  # torchrun's --master-port, not on the line
    ran = 0
    for n, line in enumerate(lines):
        args = shlex.split(line, comments=True)
        if args[0] == "torchrun" and checkout == "ten_photo_checkout":
            continue
        work = tmp_path / f"line{n}"
        work.mkdir()
        for name, target in (("photos", photos), ("my_ds", my_ds), ("configs", CONFIGS),
                             ("shardcook-demo", root / "shardcook-demo")):
            (work / name).symlink_to(target)
        program = {"shardcook": [sys.executable, "-m", "shardcook"],
                   "torchrun": [sys.executable, "-m", "torch.distributed.run"]}[args[0]]
        r = subprocess.run([*program, *args[1:]], cwd=work, env=env, capture_output=True,
                           text=True, timeout=300, check=False)
        assert r.returncode == 0, (line, r.stderr[-3000:])
        assert "Traceback" not in r.stderr and "error" not in r.stderr.lower(), (line, r.stderr)
        assert r.stderr.count("INFO: --split") == ("--split" in line or "directory" in line)
        out = next(p for p in (work / "out").rglob(".shardcook")).parent
        assert validate(out).ok, line
        ran += 1
    assert ran == (4 if checkout == "demo_checkout" else 3)


def test_primus_example_configs_run(demo_checkout, monkeypatch):
    """The Primus-style examples run with Primus's command names; the hub ones with a local
    dataset and the demo's tiny encoders substituted on the command line. text_to_image_2m_10k
    reads the hub's tars (`hf_data_files`), so it is only resolved (tests/primus)."""
    import json
    import pathlib

    from shardcook import validate
    from shardcook.cli import app
    from typer.testing import CliRunner

    configs = pathlib.Path(__file__).parents[2] / "configs" / "primus"
    monkeypatch.chdir(demo_checkout)
    hf, n = _hf_copy_of_demo(demo_checkout)
    assert sorted(p.name for p in configs.glob("*.yaml")) == [
        "example_base.yaml", "example_directory.yaml", "example_huggingface.yaml",
        "example_webdataset.yaml", "quickstart_pokemon.yaml", "text_to_image_2m_10k.yaml"]
    model = demo_checkout / "shardcook-demo" / "tiny-flux-DEMO-WEIGHTS"
    tiny = ["--model-path", str(model), "--precision", "fp32", "--t5-max-length", "32",
            "--device", "cpu", "--image-size", "64", "--max-samples", "6"]
    encoded = ["data", "diffusion-encoded"]
    runs = {
        "example_directory.yaml": (["diffusion-raw"], []),
        "quickstart_pokemon.yaml": (["diffusion-encoded"], ["--hf-dataset", str(hf), *tiny]),
        "example_huggingface.yaml": (encoded, ["--hf-dataset", str(hf), *tiny]),
        "example_webdataset.yaml": (encoded, tiny),
        "example_base.yaml": (["data", "diffusion-raw"], ["--image-size", "64"]),
    }
    for name, (command, args) in runs.items():
        cfg = yaml.safe_load((configs / name).read_text())
        r = CliRunner().invoke(app, [*command, "--config", str(configs / name), "--quiet",
                                     *args])
        assert r.exit_code == 0, (name, r.output)
        out = demo_checkout / cfg["output"]["output_dir"]
        assert validate(out, deep=True).ok, name
        rep = json.loads((out / ".shardcook" / "report.json").read_text())
        assert rep["num_written"] == (6 if "--max-samples" in args else n), (name, rep)


def test_split_that_finalize_would_refuse_fails_before_work(tmp_path):
    from tests.helpers.raw import make_folder

    make_folder(tmp_path / "in", 3, photos=0)
    out = tmp_path / "out"
    r = run_cli("raw", "--input-dir", str(tmp_path / "in"), "--output-dir", str(out),
                "--split", "0.5,0.5,0", "--shard-size", "3", check=False)
    assert r.returncode == 2 and "train split would be empty" in r.stderr
    assert not out.exists()
