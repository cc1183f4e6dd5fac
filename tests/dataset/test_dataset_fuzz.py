"""Mutates every metadata file of a finished raw dataset (garbage bytes, wrong YAML/JSON types,
negative, huge or string counts, missing, a folder in its place, a YAML key given twice) and runs
`validate`, `validate --json`, `info`, `preview` and `finalize --force` on it in-process: each
gives a true verdict or exits 1/2 with one line, never a traceback; `finalize --force` leaves a
whole dataset. The Python API given device paths, FIFOs and values of the wrong type raises
shardcook's errors, in a child process bounded in memory and time."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shardcook import ShardWriter, build_index, count_samples, finalize, read_shard, validate
from shardcook.config import load_yaml
from shardcook.dataset import info
from shardcook.energon import write_blend
from shardcook.errors import ShardcookError
from shardcook.imaging import preprocess
from shardcook.preview import preview

from tests.helpers.bounded import run_bounded
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import make_folder, run_cli
from tests.helpers.yaml_keys import repeat_key

FILES = [".nv-meta/dataset.yaml", ".nv-meta/split.yaml", ".nv-meta/.info.json",
         ".nv-meta/index.sqlite", ".nv-meta/index.uuid", ".shardcook/manifest.json",
         ".shardcook/finalize.json"]

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=6,
)
#: Values for one field of a well-formed file: the type confusions a careless edit makes.
field_values = st.sampled_from([-1, 2**63, 2**70, 1e20, "2", [], {}, None, True, [1, 2], "x"])


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    make_folder(root / "in", 4)
    run_cli("raw", "--input-dir", str(root / "in"), "--output-dir", str(root / "ds"),
            "--image-size", "32", "--shard-size", "2", "--split", "0.5,0.5,0", "--quiet")
    return root / "ds"


def dump(rel: str, value: object) -> bytes:
    if rel.endswith(".yaml"):
        return yaml.safe_dump(value).encode()
    return json.dumps(value).encode()


def leaf_paths(obj: object, prefix: tuple = ()) -> list[tuple]:
    """Every key path into nested dicts/lists of `obj` (the paths a field edit may hit)."""
    paths = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            paths += leaf_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            paths += leaf_paths(v, (*prefix, i))
    return paths


@st.composite
def mutations(draw):
    rel = draw(st.sampled_from([*FILES, ".nv-meta"]))
    kind = draw(st.sampled_from(["bytes", "value", "field", "missing", "folder"]))
    if rel == ".nv-meta":
        return rel, "file", b"not a folder"
    if kind == "bytes":
        return rel, kind, draw(st.binary(max_size=48))
    if kind == "value":
        return rel, kind, dump(rel, draw(values))
    if kind == "field" and not rel.endswith((".sqlite", ".uuid")):
        return rel, kind, draw(st.integers(0, 10**6)), draw(field_values)
    return rel, kind if kind in ("missing", "folder") else "missing", None


def apply(d: Path, mutation: tuple) -> None:
    rel, kind = mutation[0], mutation[1]
    path = d / rel
    if path.is_dir():
        shutil.rmtree(path)
    elif kind != "field":
        path.unlink(missing_ok=True)
    if kind in ("bytes", "value", "file"):
        path.write_bytes(mutation[2])
    elif kind == "folder":
        path.mkdir()
    elif kind == "field":
        text = path.read_text()
        obj = yaml.safe_load(text) if rel.endswith(".yaml") else json.loads(text)
        paths = leaf_paths(obj)
        *parents, last = paths[mutation[2] % len(paths)]
        target = obj
        for key in parents:
            target = target[key]
        target[last] = mutation[3]
        path.write_bytes(dump(rel, obj))


def true_counts(d: Path) -> tuple[int, int]:
    shards = sorted(d.glob("*.tar"))
    return sum(count_samples(s) for s in shards), len(shards)


def refused_in_one_line(r, codes) -> None:
    assert r.escaped is None, repr(r.escaped)
    assert r.code in codes, (r.code, r.stdout, r.stderr)
    assert "Traceback" not in r.stdout + r.stderr
    if r.code == 2:
        one_error_line(r)


@settings(max_examples=30, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=mutations())
def test_every_command_survives_damaged_metadata(pristine, mutation):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "ds"
        shutil.copytree(pristine, d)
        apply(d, mutation)
        samples, shards = true_counts(d)

        r = cli("validate", d)
        refused_in_one_line(r, (0, 1))
        if r.code == 1:
            problems = [line for line in r.stdout.splitlines() if line.startswith("problem:")]
            assert problems, r.stdout
        r_json = cli("validate", d, "--json")
        refused_in_one_line(r_json, (0, 1))
        assert json.loads(r_json.stdout)["ok"] == (r_json.code == 0) == (r.code == 0)
        r_info = cli("info", d, "--json")
        refused_in_one_line(r_info, (0, 2))
        if r.code == 0:  # a true verdict: what the metadata says is what the shards hold
            info = json.loads(r_info.stdout)
            assert (info["samples"], info["shards"]) == (samples, shards), mutation
        refused_in_one_line(cli("preview", d, "--out", Path(tmp) / "p.png"), (0, 2))

        r = cli("finalize", "--force", d)
        refused_in_one_line(r, (0, 2))
        if r.code == 0:
            after = cli("validate", d, "--json")
            assert after.code == 0, (mutation, after.stdout)
            assert json.loads(after.stdout)["summary"]["samples"] == samples


@settings(max_examples=12, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rel=st.sampled_from([".nv-meta/dataset.yaml", ".nv-meta/split.yaml"]),
       which=st.integers(0, 100))
def test_a_key_given_twice_in_a_dataset_yaml_is_named(pristine, rel, which):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "ds"
        shutil.copytree(pristine, d)
        text, key, line = repeat_key((d / rel).read_text(), which)
        (d / rel).write_text(text)
        needle = f"duplicate key {key!r}"

        r = cli("validate", d)
        refused_in_one_line(r, (1,))
        problems = [p for p in r.stdout.splitlines() if p.startswith("problem:")]
        assert any(needle in p and f"at line {line})" in p for p in problems), (text, r.stdout)
        r = cli("info", d)
        refused_in_one_line(r, (2,))
        assert needle in r.stderr
        r = cli("finalize", "--force", d)  # rebuilds what the shards say
        refused_in_one_line(r, (0, 2))
        if r.code == 0:
            assert cli("validate", d).code == 0


#: The Python API's entry points, each called with one argument replaced (`DS`: the dataset).
API_CALLS = {
    "finalize(directory)": lambda v, ds: finalize(v),
    "finalize(encoding)": lambda v, ds: finalize(ds, force=True, encoding=v),
    "finalize(exclude)": lambda v, ds: finalize(ds, force=True, exclude=v),
    "finalize(split)": lambda v, ds: finalize(ds, force=True, split=v),
    "finalize(split_parts)": lambda v, ds: finalize(ds, force=True, split_parts=v),
    "finalize(shuffle_seed)": lambda v, ds: finalize(ds, force=True, shuffle_seed=v),
    "finalize(sqlite)": lambda v, ds: finalize(ds, force=True, sqlite=v),
    "build_index(directory)": lambda v, ds: build_index(v),
    "validate(directory)": lambda v, ds: validate(v),
    "validate(encoding)": lambda v, ds: validate(ds, encoding=v),
    "info(directory)": lambda v, ds: info(v),
    "preview(directory)": lambda v, ds: preview(v, ds.parent / "p.png"),
    "ShardWriter(directory)": lambda v, ds: ShardWriter(v),
    "ShardWriter(prefix)": lambda v, ds: ShardWriter(ds.parent / "w", prefix=v),
    "ShardWriter(shard_size)": lambda v, ds: ShardWriter(ds.parent / "w", shard_size=v),
    "ShardWriter.write(key)": lambda v, ds: ShardWriter(ds.parent / "w").write(v, {"txt": b"x"}),
    "ShardWriter.write(parts)": lambda v, ds: ShardWriter(ds.parent / "w").write("k", v),
    "count_samples(path)": lambda v, ds: count_samples(v),
    "read_shard(path)": lambda v, ds: read_shard(v),
    "preprocess(inputs)": lambda v, ds: preprocess(v),
    "preprocess(size)": lambda v, ds: preprocess([], size=v),
    "load_yaml(path)": lambda v, ds: load_yaml(v),
    "write_blend(out)": lambda v, ds: write_blend(v, [f"{ds}=1"]),
    "write_blend(entries)": lambda v, ds: write_blend(ds.parent / "m.yaml", v),
    "write_blend(split)": lambda v, ds: write_blend(ds.parent / "m.yaml", [f"{ds}=1"], split=v),
}
#: Values of the wrong type (no str: an empty or relative one names a real folder).
wrong_types = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
               | st.floats(allow_nan=True, allow_infinity=True) | st.binary(max_size=8)
               | st.lists(st.integers(), max_size=2) | st.dictionaries(st.integers(), st.none(),
                                                                       max_size=2)
               | st.sampled_from([object(), 1j, b"\0"]))


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(call=st.sampled_from(sorted(API_CALLS)), value=wrong_types)
def test_the_python_api_refuses_wrong_types_with_its_own_errors(pristine, call, value):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "ds"
        shutil.copytree(pristine, d)
        cwd = os.getcwd()
        os.chdir(tmp)  # whatever a regression writes lands here
        try:
            API_CALLS[call](value, d)
        except ShardcookError:
            pass
        finally:
            os.chdir(cwd)


_DEVICE_PROBE = """
import sys
from pathlib import Path
from shardcook.errors import ShardcookError
from tests.dataset.test_dataset_fuzz import API_CALLS
ds = Path(sys.argv[1])
for path in sys.argv[2:]:
    for name in ("finalize(directory)", "build_index(directory)", "validate(directory)",
                 "info(directory)", "preview(directory)", "ShardWriter(directory)",
                 "count_samples(path)", "read_shard(path)", "load_yaml(path)",
                 "write_blend(entries)"):
        value = [path] if name == "write_blend(entries)" else path
        try:
            result = API_CALLS[name](value, ds)
            outcome = "problems" if getattr(result, "problems", None) else "returned"
        except ShardcookError as e:
            outcome = "refused"
        except BaseException as e:
            outcome = f"{type(e).__name__}: {e}"
        print(f"{name} {path}: {outcome}", flush=True)
    (result,) = API_CALLS["preprocess(inputs)"]([path], ds)
    print(f"preprocess(inputs) {path}: {result.error_kind}", flush=True)
"""


def test_the_python_api_refuses_devices_and_fifos(pristine, tmp_path):
    fifo, fifo_yaml = tmp_path / "pipe.tar", tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    os.mkfifo(fifo_yaml)
    paths = ["/dev/zero", str(fifo), str(fifo_yaml)]
    # in a bounded child: a regression reads /dev/zero until memory runs out or waits forever
    r = run_bounded(f"sys.argv = ['x', {str(pristine)!r}, *{paths!r}]\n{_DEVICE_PROBE}",
                    setup="import sys, shardcook.energon", timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    outcomes = r.stdout.splitlines()
    assert len(outcomes) == 11 * len(paths), r.stdout
    wrong = [o for o in outcomes
             if not o.endswith((": refused", ": problems", ": unreadable"))]
    assert not wrong, wrong
