"""Hypothesis over CLI option values (numbers negative, 0, huge, inf/nan, text up to 100,000
characters; paths missing, files, folders, URLs) for raw, encode, finalize, validate, info,
preview and blend, run in-process: each exits 0, 1 or 2 with no traceback, and an exit 2 (one
`error:` line, or click's usage box for a value of the wrong type) writes nothing. Also: a config
file or metadataset with a key given twice, and junk in torchrun's environment variables."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shardcook.errors import ConfigError

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import make_folder, run_cli
from tests.helpers.yaml_keys import repeat_key

NUMBERS = ["-1", "0", "1", "3", "2147483648", "1000000000000", "inf", "nan", "-0.5", "1e400",
           "-inf", "9" * 5000]
TEXTS = ["", " ", "abc", "tr ain", "{a,b", "../x", "1,0", "0,0,1", "cuda:99", "tpu:0", "nan",
         "inf,0,0", "x" * 100_000, "{" * 5000, "s3://bucket/x"]
PATH_KINDS = ["missing", "file", "folder", "dataset", "url", "long"]

#: Per command: the options to fuzz and the kind of value each takes.
OPTIONS = {
    "raw": {"--shard-size": "n", "--image-size": "n", "--max-size": "n", "--min-size": "n",
            "--image-quality": "n", "--workers": "n", "--max-samples": "n", "--split": "t",
            "--resize-mode": "t", "--image-format": "t", "--input-dir": "p", "--output-dir": "p"},
    "encode": {"--batch-size": "n", "--t5-max-length": "n", "--seed": "n", "--device": "t",
               "--precision": "t", "--latent-mode": "t", "--image-size": "n"},
    "finalize": {"--split": "t", "--split-parts": "t", "--shuffle-seed": "n", "--exclude": "t",
                 "--encoding": "t"},
    "validate": {"--encoding": "t", "DIR": "p"},
    "info": {"DIR": "p"},
    "preview": {"--count": "n", "--out": "p", "DIR": "p"},
    "blend": {"--split": "t", "OUT": "p", "ENTRY": "p", "WEIGHT": "n"},
}


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long for the file system
        return False


def _tree(root: Path) -> dict[str, str]:
    if root.is_file():
        return {"": hashlib.sha256(root.read_bytes()).hexdigest()}
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("clifuzz")
    src = make_folder(root / "in", 3, photos=0)
    run_cli("raw", "--input-dir", str(src), "--output-dir", str(root / "ds"), "--image-size",
            "32", "--shard-size", "2", "--quiet")
    (root / "a-file.txt").write_text("not a dataset")
    return root, src, root / "ds"


def _path(kind: str, root: Path, work: Path, suffix: str) -> Path:
    return {"missing": work / f"missing/x{suffix}", "file": root / "a-file.txt",
            "folder": root / "in", "dataset": work / "ds", "url": Path(f"msc://profile/x{suffix}"),
            "long": work / ("n" * 5000 + suffix)}[kind]


def _args(command: str, option: str, value: str, work: Path, src: Path) -> tuple[list, Path]:
    """The command line with `option` set to `value`, and the path it writes (checked on exit 2)."""
    ds = work / "ds"
    if command == "raw":
        out = work / "out"
        base = {"--input-dir": str(src), "--output-dir": str(out), "--image-size": "32",
                "--shard-size": "2"}
        base[option] = value
        out = Path(base["--output-dir"])
        return ["raw", *[x for kv in base.items() for x in kv], "--quiet"], out
    if command == "encode":  # --print-config: every option check, no model needed
        return ["encode", "--input-dir", str(src), "--output-dir", str(work / "out"),
                "--image-size", "32", option, value, "--print-config"], work / "out"
    if command == "finalize":
        return ["finalize", str(ds), option, value, "--force", "--no-sqlite"], ds
    if command in ("validate", "info"):
        return ([command, value] if option == "DIR" else [command, str(ds), option, value]), ds
    if command == "preview":
        out = work / "sheet.png"
        args = {"DIR": str(ds), "--out": str(out), "--count": "2"}
        args[option] = value
        out = Path(args["--out"])
        return ["preview", args["DIR"], "--out", args["--out"], "--count", args["--count"]], out
    out, entry, weight, split = str(work / "m.yaml"), str(ds), "1", "train"
    if option == "OUT":
        out = value
    elif option == "ENTRY":
        entry = value
    elif option == "WEIGHT":
        weight = value
    else:
        split = value
    return ["blend", out, f"{entry}={weight}", "--split", split], Path(out)


@st.composite
def cases(draw):
    command = draw(st.sampled_from(sorted(OPTIONS)))
    option = draw(st.sampled_from(sorted(OPTIONS[command])))
    kind = OPTIONS[command][option]
    value = draw(st.sampled_from(NUMBERS if kind == "n" else TEXTS if kind == "t"
                                 else PATH_KINDS))
    return command, option, kind, value


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
def test_cli_option_values(world, case):
    command, option, kind, value = case
    root, src, ds = world
    work = Path(tempfile.mkdtemp(dir=root))
    cwd = os.getcwd()
    os.chdir(work)  # a URL taken for a relative path would be written here
    try:
        shutil.copytree(ds, work / "ds")
        if kind == "p":
            suffix = {"--out": ".png", "OUT": ".yaml"}.get(option, "")
            value = str(_path(value, root, work, suffix))
        args, written = _args(command, option, value, work, src)
        before = _tree(written) if _exists(written) else None
        r = cli(*args)
        assert r.escaped is None, (args, repr(r.escaped))
        assert r.code in (0, 1, 2), (args, r.code, r.stderr)
        assert "Traceback" not in r.stdout + r.stderr, args
        if r.code == 2:
            if not r.stderr.startswith("Usage:"):  # else click's own parse error box
                one_error_line(r)
            after = _tree(written) if _exists(written) else None
            assert after == before, (args, "changed on exit 2")
        assert not (work / "msc:").exists(), (args, "a URL written as a local folder")
    finally:
        os.chdir(cwd)
        shutil.rmtree(work, ignore_errors=True)


def _config_text(src: Path, out: Path) -> str:
    return yaml.safe_dump({
        "source": {"input_dir": str(src), "max_samples": 3},
        "output": {"output_dir": str(out), "shard_size": 2, "split": [1, 0, 0]},
        "image": {"image_size": 32, "image_quality": 90, "resize_mode": "crop"},
        "data_format": {"caption_column": None},
    }, sort_keys=False)


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 100))
def test_a_config_key_given_twice_is_named_with_its_line(world, which):
    root, src, _ = world
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        text, key, line = repeat_key(_config_text(src, work / "out"), which)
        (work / "c.yaml").write_text(text)
        r = cli("raw", "--config", work / "c.yaml")
        assert r.code == 2 and f"duplicate key {key!r}" in one_error_line(r), (text, r.stderr)
        assert f"at line {line})" in r.stderr, (text, r.stderr)
        assert not (work / "out").exists()
    finally:
        shutil.rmtree(work, ignore_errors=True)


@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 100), nested=st.booleans())
def test_a_metadataset_key_given_twice_is_named(world, which, nested):
    from shardcook.energon import get_diffusion_loader, write_blend

    root, _, ds = world
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        inner = write_blend(work / "inner.yaml", [f"{ds}=1"], check=False)
        text, key, _ = repeat_key(inner.read_text(), which)
        inner.write_text(text)
        target = inner
        if nested:
            target = write_blend(work / "outer.yaml", [f"{ds}=1"], check=False)
            target.write_text(target.read_text().replace(f"path: {os.path.relpath(ds, work)}",
                                                         "path: inner.yaml"))
        r = cli("blend", work / "mix.yaml", target)
        assert r.code == 2 and f"duplicate key {key!r}" in one_error_line(r), (text, r.stderr)
        assert not (work / "mix.yaml").exists()
        with pytest.raises(ConfigError, match=f"duplicate key {key!r}"):
            get_diffusion_loader(target, batch_size=1, num_workers=0, rank=0, world_size=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


TORCHRUN_JUNK = ["", "abc", "-1", "0", "1", "2", "3", "1.5", "nan", "inf", "9" * 40, "0x10",
                 " 1", "1e3", "\u0661", "256.1.1.1", "127.0.0.1", "localhost", "::1", "65536",
                 "x" * 5000]


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=st.fixed_dictionaries({}, optional={
    name: st.sampled_from(TORCHRUN_JUNK)
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}))
def test_torchrun_variables_with_junk_end_in_one_sentence(world, monkeypatch, env):
    root, src, _ = world
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        with monkeypatch.context() as m:
            for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
                         "TORCHELASTIC_USE_AGENT_STORE"):
                m.delenv(name, raising=False)
            for name, value in env.items():
                m.setenv(name, value)
            m.setenv("SHARDCOOK_JOIN_TIMEOUT", "1")
            r = cli("raw", "--input-dir", src, "--output-dir", work / "out", "--image-size",
                    "32", "--quiet", "--workers", "1")
        assert r.escaped is None, (env, repr(r.escaped))
        assert r.code in (0, 2), (env, r.code, r.stderr)
        if r.code == 2:
            one_error_line(r)
            assert not (work / "out").exists() or not list((work / "out").glob("*.tar")), env
    finally:
        shutil.rmtree(work, ignore_errors=True)
