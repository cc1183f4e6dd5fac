"""The commands that work on Energon datasets (`finalize`, `preview`, `blend` and the loader)
take an AutoModel cache for what it is, because `dataset/kind.py` decides it for all of them: one
sentence naming the cache and the commands that do take it, exit code 2, the cache untouched."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from shardcook.energon import dataset_encoding
from shardcook.errors import ConfigError

from tests.automodel.test_automodel_checks import shardcook, written  # noqa: F401


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def sentence(cache: Path, command: str) -> str:
    return (f"{cache} is a NeMo AutoModel cache, which AutoModel's dataloader reads as it is; "
            f"{command} takes a folder of tar shards, and `shardcook validate` and `info` take "
            f"{cache}.")


@pytest.mark.parametrize("command", ["finalize", "preview", "blend"])
def test_each_command_refuses_a_cache_in_one_sentence_and_changes_nothing(
        written: Path, tmp_path: Path, command: str) -> None:  # noqa: F811
    before = tree(written)
    args = {"finalize": ["finalize", str(written)],
            "preview": ["preview", str(written), "--out", str(tmp_path / "sheet.png")],
            "blend": ["blend", str(tmp_path / "mix.yaml"), f"{written}=1"]}[command]
    result = shardcook(*args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert " ".join(result.stderr.split()).endswith(
        " ".join(sentence(written, f"`shardcook {command}`").split())), result.stderr
    assert tree(written) == before
    assert list(tmp_path.iterdir()) == []


def test_the_loader_refuses_a_cache(written: Path) -> None:  # noqa: F811
    with pytest.raises(ConfigError) as e:
        dataset_encoding(written)
    assert str(e.value) == sentence(written, "shardcook's loader")
