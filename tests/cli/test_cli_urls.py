"""A URL (`msc://`, `s3://`, ...) as a path that stays local is refused in one sentence before
anything is written, by every command and the Python API entry points (`--output-dir
msc://profile/x` used to write a local folder named `msc:` and exit 0). The pipelines'
`--output-dir` and inputs, and the dataset commands, take URLs: tests/storage/ tests those."""

from __future__ import annotations

import pytest
from shardcook import ShardWriter
from shardcook.energon import write_blend
from shardcook.errors import ConfigError
from shardcook.storage.local import check_local_path

from tests.helpers.dataset import cli, one_error_line

URL = "msc://profile/x"

COMMANDS = [
    ["raw", "--input-dir", "https://host/in", "--output-dir", "out"],
    ["raw", "--source-type", "webdataset", "--input-path", "https://h/{0..3}.tar", "--output-dir",
     "o"],
    ["raw", "--source-type", "huggingface", "--hf-dataset", "parquet", "--hf-data-files",
     "https://b/d.parquet", "--output-dir", "out"],
    ["raw", "--config", "s3://bucket/c.yaml", "--output-dir", "out"],
    ["encode", "--input-dir", "in", "--output-dir", "out", "--model-path", "hf://org/flux"],
    ["chatml", "--input", "https://host/a.jsonl", "--output-dir", "out"],
    ["preview", "ds", "--out", "s3://bucket/sheet.png"],
    ["blend", "s3://bucket/mix.yaml", "ds"],
    ["demo", "--output-dir", URL],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_every_command_refuses_a_url_before_writing(tmp_path, monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    r = cli(*args)
    assert r.code == 2 and "is a URL" in one_error_line(r), r.stderr
    assert list(tmp_path.iterdir()) == []


OUTPUT_URLS = [
    ["raw", "--input-dir", "in", "--output-dir", URL],
    ["encode", "--input-dir", "in", "--output-dir", URL, "--print-config"],
    ["chatml", "--input", "a.jsonl", "--output-dir", URL],
]


@pytest.mark.parametrize("args", OUTPUT_URLS, ids=lambda a: " ".join(a))
def test_an_output_url_without_its_profile_is_refused_before_writing(tmp_path, monkeypatch,
                                                                     args):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MSC_CONFIG", str(tmp_path / "none.yaml"))
    r = cli(*args)
    assert r.code == 2 and "cannot open profile 'profile'" in one_error_line(r), r.stderr
    assert list(tmp_path.iterdir()) == []


API = [
    lambda: write_blend("s3://b/mix.yaml", ["ds=1"]),
    lambda: ShardWriter(URL),
    lambda: check_local_path(URL, "path"),
]


@pytest.mark.parametrize("call", API, ids=["write_blend", "ShardWriter", "check_local_path"])
def test_the_python_api_refuses_a_url(tmp_path, monkeypatch, call):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"is a URL \(\w+://\); .* takes local paths only"):
        call()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", ["data/x", "/abs/x", "a:b", "x.yaml", "ORG/NAME"])
def test_local_paths_pass(path):
    check_local_path(path, "path")
