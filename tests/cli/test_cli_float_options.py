"""Every number option that takes a float refuses inf, -inf, nan, a negative and a huge value
in one sentence with exit 2, before anything is written (no OverflowError, no Infinity in a
manifest). The options come from the config's float fields, so a new one is covered too."""

from __future__ import annotations

import typing

import pytest
from shardcook.config.sections import _SECTION_CLASSES

from tests.helpers.chatml import turns, write_images, write_jsonl
from tests.helpers.dataset import cli, one_error_line
from tests.helpers.raw import make_folder

BAD = ("inf", "-inf", "nan", "-1", "1e308")


def _float_options() -> list[tuple[str, str]]:
    """(command, --option) of every float config field, plus Primus's --train-split and the
    --split ratios (a list of floats)."""
    out = [("raw", "--train-split"), ("encode", "--train-split"), ("raw", "--split")]
    for section, cls in _SECTION_CLASSES.items():
        for name, hint in typing.get_type_hints(cls).items():
            if hint is float:
                commands = {"chatml": ("chatml",), "ingest": ("ingest",)}.get(
                    section, ("raw", "encode"))
                out += [(c, f"--{name.replace('_', '-')}") for c in commands]
    return out


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("floats")
    src = make_folder(root / "in", 2, photos=0)
    names = write_images(root / "chat", 2)
    jsonl = write_jsonl(root / "chat" / "d.jsonl",
                        [{"image": n, "conversations": turns(1)} for n in names])
    return src, jsonl


def test_the_float_options_are_found():
    found = _float_options()
    assert {("chatml", "--video-fps"), ("chatml", "--val-fraction"),
            ("chatml", "--test-fraction"), ("ingest", "--stall-timeout")} <= set(found)


@pytest.mark.parametrize("command, option", _float_options())
@pytest.mark.parametrize("value", BAD)
def test_float_option_values_that_cannot_work(inputs, tmp_path, command, option, value):
    src, jsonl = inputs
    out = tmp_path / "out"
    given = f"{value},0,0" if option == "--split" else value
    source = {"chatml": ["--input", jsonl], "ingest": [src]}.get(command, ["--input-dir", src])
    r = cli(command, *source, "--output-dir", out, f"{option}={given}")
    if option == "--split" and value == "1e308":  # 1e308,0,0 is the ratio 1,0,0
        assert r.code == 0 and r.escaped is None, (r.code, r.stderr, r.escaped)
        return
    assert r.code == 2, (r.code, r.stderr, r.escaped)
    assert option in one_error_line(r)
    assert not out.exists()
