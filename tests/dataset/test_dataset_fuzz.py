"""Mutates every metadata file of a finished raw dataset (garbage bytes, wrong YAML/JSON types,
negative, huge or string counts, missing, a folder in its place) and runs `validate`,
`validate --json`, `info`, `preview` and `finalize --force` on it in-process: each gives a true
verdict or exits 1/2 with one line, never a traceback; `finalize --force` leaves a whole dataset."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shardcook import count_samples

from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import make_folder, run_cli

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
