"""A dataset from elsewhere never runs its own code in the commands that read it: validate, info,
preview and finalize import no module its dataset.yaml names unless it is one of megatron.energon,
megatron.bridge or shardcook (and then only an installed one), run no Python file it names, and
under `python -m shardcook` (what torchrun runs) a file in the current folder cannot stand in for a
library. A sample class they cannot check is a problem, never "ok"."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml
from shardcook import ConfigError, finalize, validate

from tests.helpers.dataset import write_dataset

META = ".nv-meta"


def plant(path, marker):
    """A Python file that, if anything ran it, would leave `marker` behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"open({str(marker)!r}, 'w').close()\n\nclass Evil:\n    pass\n\n"
                    "def f(*a, **k):\n    return a\n")


def set_dataset_yaml(d, content):
    (d / META / "dataset.yaml").write_text(yaml.safe_dump(content))


@pytest.fixture
def hostile(tmp_path):
    """A raw dataset whose dataset.yaml names `evilmod.Evil`, with evilmod.py beside it and files
    named like libraries the commands import later (torch, PIL)."""
    d = write_dataset(tmp_path / "ds")
    set_dataset_yaml(d, {"__module__": "evilmod", "__class__": "Evil",
                         "subflavors": {"encoding": "raw"}})
    ran = tmp_path / "ran"
    ran.mkdir()
    for name in ("evilmod", "torch", "PIL"):
        plant(d / f"{name}.py", ran / name)
    return d, ran


@pytest.mark.parametrize("command, code", [
    (("validate", "."), 1),
    (("validate", ".", "--deep"), 1),
    (("info", "."), 0),
    (("preview", ".", "--out", "../sheet.png"), 0),
    (("finalize", ".", "--force"), 2),
])
def test_python_m_inside_the_dataset_runs_none_of_its_code(hostile, command, code):
    d, ran = hostile
    before = (d / META / "dataset.yaml").read_bytes()
    r = subprocess.run([sys.executable, "-m", "shardcook", *command], cwd=d, capture_output=True,
                       text=True, timeout=300, check=False)
    assert sorted(p.name for p in ran.iterdir()) == []
    assert r.returncode == code, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert (d / META / "dataset.yaml").read_bytes() == before
    if command[0] in ("validate", "finalize"):
        assert "names the module 'evilmod', which is not part of megatron.energon, " \
               "megatron.bridge, shardcook; it was not imported" in r.stdout + r.stderr


def test_a_bridge_module_found_inside_the_dataset_is_not_imported(tmp_path):
    # `python -c` puts the current folder on the module path, as any script run there does
    d = write_dataset(tmp_path / "ds")
    set_dataset_yaml(d, {"__module__": "megatron.bridge.evil", "__class__": "Evil"})
    plant(d / "megatron" / "bridge" / "__init__.py", tmp_path / "ran")
    plant(d / "megatron" / "bridge" / "evil.py", tmp_path / "ran")
    code = "from shardcook import validate; print('\\n'.join(validate('.').problems))"
    r = subprocess.run([sys.executable, "-c", code], cwd=d, capture_output=True, text=True,
                       timeout=300, check=False)
    assert not (tmp_path / "ran").exists()
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == (
        f"{META}/dataset.yaml names the sample class megatron.bridge.evil.Evil, which cannot be "
        "imported here (megatron would be imported from inside the dataset folder)")


@pytest.mark.parametrize("extra", [
    {"sample_loader": "evil.py:f", "part_filter": "evil.py:f"},
    {"part_filter": {"__module__": "evilmod", "__function__": "f"}},
])
def test_code_named_anywhere_in_dataset_yaml_is_a_problem_and_never_run(tmp_path, extra):
    d = write_dataset(tmp_path / "ds")
    set_dataset_yaml(d, {"__module__": "megatron.energon", "__class__": "CaptioningWebdataset",
                         "subflavors": {"encoding": "raw"}, **extra})
    plant(d / META / "evil.py", tmp_path / "ran")
    plant(tmp_path / "evilmod.py", tmp_path / "ran")
    sys.path.insert(0, str(tmp_path))
    try:
        report = validate(d)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("evilmod", None)
    assert not (tmp_path / "ran").exists()
    assert not report.ok
    assert all("was not run" in p or "was not imported" in p for p in report.problems)
    assert len(report.problems) == len(extra)


def test_a_sample_class_that_does_not_exist_is_a_problem(tmp_path):
    d = write_dataset(tmp_path / "ds")
    set_dataset_yaml(d, {"__module__": "megatron.energon", "__class__": "NoSuchWebdataset",
                         "subflavors": {"encoding": "raw"}})
    expected = (f"{META}/dataset.yaml names the sample class megatron.energon.NoSuchWebdataset, "
                "which does not exist")
    assert validate(d).problems == [expected]


def test_finalize_refuses_an_untrusted_sample_type_before_writing(tmp_path):
    d = tmp_path / "ds"
    write_dataset(d)
    before = {p: p.read_bytes() for p in (d / META).iterdir()}
    with pytest.raises(ConfigError, match=r"sample_type 'evilmod:Evil' names a class outside"):
        finalize(d, sample_type="evilmod:Evil", force=True)
    assert {p: p.read_bytes() for p in (d / META).iterdir()} == before


def test_importing_the_command_line_entry_runs_nothing():
    r = subprocess.run([sys.executable, "-c", "import shardcook.__main__"], capture_output=True,
                       text=True, timeout=300, check=False)
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_python_m_shardcook_still_runs_the_command_line():
    r = subprocess.run([sys.executable, "-m", "shardcook", "--help"], capture_output=True,
                       text=True, timeout=300, check=False)
    assert r.returncode == 0 and "Usage" in r.stdout, r.stderr


def test_a_dataset_naming_the_command_line_entry_is_refused_unimported(tmp_path):
    d = write_dataset(tmp_path / "ds")
    set_dataset_yaml(d, {"__module__": "shardcook.__main__", "__class__": "Evil",
                         "subflavors": {"encoding": "raw"}})
    code = (f"import sys; from shardcook import validate; r = validate({str(d)!r}); "
            "print('\\n'.join(r.problems)); print('main imported:', 'shardcook.__main__' in "
            "sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert ("names the module 'shardcook.__main__', a command-line entry that runs a command "
            "when imported; it was not imported") in r.stdout
    assert "main imported: False" in r.stdout
