"""Hypothesis over CLI option values (numbers negative, 0, huge, inf/nan, text; paths missing,
files, folders) for raw, encode, finalize, validate, info, preview and blend, run in-process:
each exits 0, 1 or 2 with no traceback, and an exit 2 (one `error:` line, or click's usage box
for a value of the wrong type) writes nothing."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import make_folder, run_cli

NUMBERS = ["-1", "0", "1", "3", "2147483648", "1000000000000", "inf", "nan", "-0.5", "1e400"]
TEXTS = ["", " ", "abc", "tr ain", "{a,b", "../x", "1,0", "0,0,1", "cuda:99", "tpu:0"]
PATH_KINDS = ["missing", "file", "folder", "dataset"]

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
            "folder": root / "in", "dataset": work / "ds"}[kind]


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
    try:
        shutil.copytree(ds, work / "ds")
        if kind == "p":
            suffix = {"--out": ".png", "OUT": ".yaml"}.get(option, "")
            value = str(_path(value, root, work, suffix))
        args, written = _args(command, option, value, work, src)
        before = _tree(written) if written.exists() else None
        r = cli(*args)
        assert r.escaped is None, (args, repr(r.escaped))
        assert r.code in (0, 1, 2), (args, r.code, r.stderr)
        assert "Traceback" not in r.stdout + r.stderr, args
        if r.code == 2:
            if not r.stderr.startswith("Usage:"):  # else click's own parse error box
                one_error_line(r)
            after = _tree(written) if written.exists() else None
            assert after == before, (args, "changed on exit 2")
    finally:
        shutil.rmtree(work, ignore_errors=True)
