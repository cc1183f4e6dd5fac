"""`shardcook raw` configuration: CLI > YAML > defaults, errors naming the key, --print-config."""

from __future__ import annotations

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


def _hf_copy_of_demo(root):
    """The demo images as a local Hugging Face dataset (`image`, `text`), like the hub examples."""
    import datasets

    images = sorted((root / "shardcook-demo" / "images").glob("*.png"))
    datasets.Dataset.from_dict({
        "image": [{"bytes": p.read_bytes(), "path": None} for p in images],
        "text": [p.with_suffix(".txt").read_text().strip() for p in images],
    }).cast_column("image", datasets.Image()).save_to_disk(str(root / "hf-local"))
    return root / "hf-local", len(images)


def test_example_configs_run(demo_checkout, monkeypatch):
    """Every file in configs/ runs as written after `shardcook demo` (hub datasets replaced by a
    local copy on the command line)."""
    import json
    import pathlib

    from shardcook import validate
    from shardcook.cli import app
    from typer.testing import CliRunner

    configs = pathlib.Path(__file__).parents[2] / "configs"
    monkeypatch.chdir(demo_checkout)
    hf, n = _hf_copy_of_demo(demo_checkout)
    names = sorted(p.name for p in configs.glob("*.yaml"))
    assert names == ["directory.yaml", "huggingface.yaml", "reference.yaml", "webdataset.yaml"]
    for name in names:
        cfg = yaml.safe_load((configs / name).read_text())
        local = ["--hf-dataset", str(hf)] if cfg["source"]["source_type"] == "huggingface" else []
        # one input per shard, so the example splits have shards to cut
        r = CliRunner().invoke(app, ["raw", "--config", str(configs / name), "--quiet",
                                     "--shard-size", "1", "--image-size", "64", *local])
        assert r.exit_code == 0, (name, r.output)
        out = demo_checkout / cfg["output"]["output_dir"]
        assert validate(out).ok, name
        rep = json.loads((out / ".shardcook" / "report.json").read_text())
        assert rep["num_written"] == n, (name, rep)


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
                "--split", "0.5,0.5,0", check=False)
    assert r.returncode == 2 and "train split would be empty" in r.stderr
    assert not out.exists()
