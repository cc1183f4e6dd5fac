"""`shardcook blend` / `write_blend`: MetadatasetV2 files that Energon reads with the weights."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import yaml
from shardcook.energon import (
    BlendEntry,
    DiffusionBatch,
    RawImageBatch,
    get_diffusion_loader,
    parse_blend_entry,
    write_blend,
)
from shardcook.errors import ConfigError

from tests.helpers.energon import make_encoded_dataset, make_raw_dataset


@pytest.fixture(scope="module")
def two_encoded(tmp_path_factory):
    root = tmp_path_factory.mktemp("blend")
    a = make_encoded_dataset(root / "a", 30, key_prefix="a", shard_size=10)
    b = make_encoded_dataset(root / "b", 30, key_prefix="b", shard_size=10)
    return root, a, b


def test_parse_blend_entry():
    assert parse_blend_entry("data/x=0.25") == BlendEntry(Path("data/x"), 0.25)
    assert parse_blend_entry("data/a=b=2") == BlendEntry(Path("data/a=b"), 2.0)
    assert parse_blend_entry("data/x") == BlendEntry(Path("data/x"), 1.0)
    for bad in ("x=abc", "x=0", "x=-1", "x=nan", "=1"):
        with pytest.raises(ConfigError):
            parse_blend_entry(bad)


def test_write_blend_writes_relative_metadataset_v2(two_encoded):
    root, a, b = two_encoded
    out = write_blend(root / "mixes" / "mix.yaml", [f"{a.path}=3", BlendEntry(b.path, 1)])
    doc = yaml.safe_load(out.read_text())
    assert doc["__module__"] == "megatron.energon" and doc["__class__"] == "MetadatasetV2"
    assert doc["splits"]["train"]["blend"] == [
        {"path": "../a", "weight": 3.0},
        {"path": "../b", "weight": 1.0},
    ]


def test_write_blend_refuses_what_is_not_a_dataset(tmp_path, two_encoded):
    _, a, _ = two_encoded
    with pytest.raises(ConfigError, match="not a prepared Energon dataset"):
        write_blend(tmp_path / "m.yaml", [f"{a.path}=1", f"{tmp_path}=1"])
    with pytest.raises(ConfigError, match=r"\.yaml"):
        write_blend(tmp_path / "m.yml", [f"{a.path}=1"])
    with pytest.raises(ConfigError, match="at least one"):
        write_blend(tmp_path / "m.yaml", [])
    assert not (tmp_path / "m.yaml").exists()


def test_blend_weights_hold_over_thousands_of_samples(two_encoded):
    root, a, b = two_encoded
    out = write_blend(root / "w31.yaml", [f"{a.path}=3", f"{b.path}=1"])
    w = get_diffusion_loader(out, batch_size=10, num_workers=0)
    counts = Counter(k[0] for _ in range(300) for k in next(w).__key__)
    total = counts["a"] + counts["b"]
    assert total == 3000
    # Binomial std at p=0.75, n=3000 is 0.008; 0.03 is almost 4 std.
    assert abs(counts["a"] / total - 0.75) < 0.03, counts


def test_blend_of_raw_and_encoded_batches_each_kind_apart(tmp_path, two_encoded):
    _, a, _ = two_encoded
    raw = make_raw_dataset(tmp_path / "raw", 12, sizes=[(16, 16)])
    out = write_blend(tmp_path / "mixed.yaml", [f"{a.path}=1", f"{raw.path}=1"])
    w = get_diffusion_loader(out, batch_size=4, num_workers=0)
    kinds = Counter()
    for _ in range(20):
        batch = next(w)
        kinds[type(batch).__name__] += 1
        if isinstance(batch, DiffusionBatch):
            assert all(k.startswith("a") for k in batch.__key__)
        else:
            assert isinstance(batch, RawImageBatch)
            assert batch.images.shape[1:] == (3, 16, 16)
    assert kinds["DiffusionBatch"] > 0 and kinds["RawImageBatch"] > 0


def test_cli_blend(tmp_path, two_encoded):
    from shardcook.cli import app
    from typer.testing import CliRunner

    _, a, b = two_encoded
    out = tmp_path / "cli.yaml"
    result = CliRunner().invoke(app, ["blend", str(out), f"{a.path}=0.7", f"{b.path}=0.3"])
    assert result.exit_code == 0, result.output
    assert str(out) in result.output
    blend = yaml.safe_load(out.read_text())["splits"]["train"]["blend"]
    assert [e["weight"] for e in blend] == [0.7, 0.3]

    result = CliRunner().invoke(app, ["blend", str(tmp_path / "bad.yaml"), f"{a.path}=zero"])
    assert result.exit_code == 2
    assert "PATH=WEIGHT" in result.output
