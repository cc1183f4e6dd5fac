"""Each config field's choices and range are declared on the field (`fields.option`'s rules) and
refused in the one sentence `fields.refusal` words: every field with a rule, given a value no
rule of its kind takes, stops `resolve` with "--OPTION must be ..., not VALUE."; and the wording
of each kind of rule."""

from __future__ import annotations

import dataclasses
import re
import typing

import pytest
from shardcook.config import resolve
from shardcook.config.sections import _SECTION_CLASSES, OPTION_SECTION, option_field
from shardcook.errors import ConfigError
from shardcook.fields import RULES, bounded, matching, one_of, typed


def _ruled_fields() -> list[tuple[str, str, object]]:
    """(section, option name as `resolve` takes it, a value its rules refuse)."""
    found = []
    for section, cls in _SECTION_CLASSES.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if f.metadata.get(RULES):
                name = f.name if OPTION_SECTION[f.name] == section else f"{section}.{f.name}"
                bad = "no pe" if str in (hints[f.name], *typing.get_args(hints[f.name])) else -1
                found.append((section, name, bad))
    return found


def test_the_ruled_fields_are_found():
    names = {name for _, name, _ in _ruled_fields()}
    assert {"shard_size", "image_quality", "precision", "device", "video_fps",
            "source_type", "max_pixels", "chatml.max_pixels"} <= names


@pytest.mark.parametrize(("section", "name", "bad"), _ruled_fields(), ids=lambda v: str(v))
def test_every_ruled_field_refuses_in_one_sentence(tmp_path, section, name, bad):
    (tmp_path / "in").mkdir()
    values = {"input_dir": str(tmp_path / "in"), "output_dir": str(tmp_path / "out"), name: bad}
    if section == "chatml":
        values |= {"source_type": "jsonl", "input_path": str(tmp_path / "d.jsonl")}
    if section == "video":  # a video model's encode run has the section
        values |= {"layout": "wan"}
    if section == "automodel":  # so has an AutoModel cache's
        values |= {"layout": "automodel"}
    with pytest.raises(ConfigError) as caught:
        if section == "ingest":  # ingest resolves its section itself (`config.ingest`)
            from shardcook.config.ingest import INGEST_OPTIONS, ingest_config

            defaults = {n: option_field(n)[0].default for n in INGEST_OPTIONS}
            ingest_config({**defaults, "output_dir": str(tmp_path / "out"), name: bad}, {name},
                          [tmp_path / "in"], None)
        else:
            resolve(values, set(values), encode=section in ("model", "video", "automodel"))
    option = f"--{name.rpartition('.')[2].replace('_', '-')}"
    assert str(caught.value).startswith(f"{option} must be "), str(caught.value)
    assert re.search(r", not (-1(\.0)?|'no pe')\.$", str(caught.value)), str(caught.value)


@pytest.mark.parametrize(("rule", "words"), [
    (bounded(1), "at least 1"),
    (bounded(1, 100), "between 1 and 100"),
    (bounded(high=16383, why="WebP's largest side"), "at most 16383 (WebP's largest side)"),
    (bounded(0, 1, below=True), "at least 0 and below 1"),
    (bounded(0, 1000.0, above=True, unit="frames per second"),
     "above 0 and at most 1000 frames per second"),
    (one_of(("a", "b")), "one of a, b"),
    (matching(r"cpu|cuda", "cpu or cuda"), "cpu or cuda"),
])
def test_rule_wording(rule, words):
    assert rule.says == words


def test_nan_meets_no_range():
    assert not bounded(0, 1, below=True).holds(float("nan"))
    assert not bounded(1).holds(float("nan"))


@pytest.mark.parametrize(("value", "hint", "message"), [
    ("x", int | None, "`a.b` must be a whole number or null, not 'x'."),
    (True, int, "`a.b` must be a whole number, not True."),
    ("yes", bool, "`a.b` must be True or False, not 'yes'."),
    ([1], list[str], "`a.b[0]` must be a string, not 1."),
    ({"k": 1}, list[str] | None, "`a.b` must be a list or null, not {'k': 1}."),
    (10**400, float, "`a.b` must be a number, not " + repr(10**400) + "."),
])
def test_type_refusals(value, hint, message):
    with pytest.raises(ConfigError) as caught:
        typed("a.b", value, hint, none="null", quote=True)
    assert str(caught.value) == message


@pytest.mark.parametrize(("value", "hint", "expected"), [
    ("0.5,0.5", list[float], [0.5, 0.5]),
    (3, float, 3.0),
    ("a", list[str], ["a"]),
    (None, int | None, None),
])
def test_type_conversions(value, hint, expected):
    assert typed("x", value, hint) == expected
