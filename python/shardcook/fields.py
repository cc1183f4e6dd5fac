"""A setting declared once, on its dataclass field: the command-line option it is (`option`: help,
--help panel, flags) and the rules its value must meet (`Rule`: choices, ranges, a pattern). The
one validator is `typed` (a value against the field's type hint) with `check_fields` (every
field's rules), and every failure is the one sentence `refusal` words: "WHERE must be WHAT, not
VALUE." The run config's sections (`config.sections`), the dataset commands' arguments
(`dataset.arguments`) and the loader side's (`energon.arguments`) are declared this way; the
command line is built from the declarations."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Union

from shardcook.errors import ConfigError

#: The key of a field's metadata that makes it a command-line option (a `CliOption`).
CLI = "cli"
#: The key of a field's metadata holding the `Rule`s its value must meet.
RULES = "rules"
#: The key of a field's metadata saying the option names a file or folder (a `Place`).
PLACE = "place"


@dataclass(frozen=True)
class CliOption:
    """How a field is a command-line option: its --help text (or a function computing it when
    --help is built), its panel, its flags when they are not just `--field-name`, and the wording
    of a command that says it differently (`help_for`, by the command's function name)."""

    help: str | Callable[[], str]
    panel: str | None
    flags: tuple[str, ...] = ()
    help_for: Mapping[str, str] = field(default_factory=dict)

    def help_in(self, command: str) -> str:
        """The help text `command` shows."""
        text = self.help_for.get(command, self.help)
        return text if isinstance(text, str) else text()


@dataclass(frozen=True)
class Rule:
    """What a field's value must be: `holds(value)` is true for a good one, `says` is the words
    after "must be" (a None value is never checked: it means "not set"), `shown(value)` the
    words after "not" (a value whose repr is long or misleading is said another way)."""

    holds: Callable[[Any], bool]
    says: str
    shown: Callable[[Any], str] = repr


def one_of(choices: Sequence[str]) -> Rule:
    """The value is one of `choices`."""
    return Rule(lambda v: v in choices, f"one of {', '.join(choices)}")


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"


def bounded(low: float | None = None, high: float | None = None, *, above: bool = False,
            below: bool = False, unit: str = "", why: str = "") -> Rule:
    """A number of at least `low` (`above`: more than) and at most `high` (`below`: less than);
    `unit` follows the range, `why` the sentence's range in parentheses. NaN never holds."""
    words = []
    if low is not None:
        words.append(f"{'above' if above else 'at least'} {_number(low)}")
    if high is not None:
        words.append(f"{'below' if below else 'at most'} {_number(high)}")
    says = " and ".join(words)
    if low is not None and high is not None and not (above or below):
        says = f"between {_number(low)} and {_number(high)}"
    says += f" {unit}" * bool(unit) + f" ({why})" * bool(why)

    def holds(v: float) -> bool:
        return ((low is None or (v > low if above else v >= low))
                and (high is None or (v < high if below else v <= high)))

    return Rule(holds, says)


def matching(pattern: str, says: str) -> Rule:
    """A string the regular expression `pattern` matches whole."""
    compiled = re.compile(pattern)
    return Rule(lambda v: compiled.fullmatch(v) is not None, says)


@dataclass(frozen=True)
class Place:
    """An option naming a file or folder, parsed into a `storage.Location` when the config is
    resolved: a local path, or also a URL (`urls`); `msc_only` says why only `msc://` ones."""

    urls: bool = False
    msc_only: str | None = None


LOCAL, URL = Place(), Place(urls=True)


def option(default: Any, help: str | Callable[[], str], panel: str | None = None, *,
           flags: tuple[str, ...] = (), help_for: Mapping[str, str] | None = None,
           rules: Sequence[Rule] = (), place: Place | None = None) -> Any:
    """A field that is also a command-line option (help, panel, flags), with the `rules` its
    value must meet and, for a file or folder, its `place`; a list default is copied per
    instance."""
    metadata: dict[str, Any] = {CLI: CliOption(help, panel, flags, dict(help_for or {})),
                                RULES: tuple(rules)}
    if place is not None:
        metadata[PLACE] = place
    return _field(default, metadata)


def setting(default: Any, *rules: Rule) -> Any:
    """A field that is no command-line option, with the `rules` its value must meet."""
    return _field(default, {RULES: rules})


def _field(default: Any, metadata: dict[str, Any]) -> Any:
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def refusal(where: str, says: str, value: Any, shown: Callable[[Any], str] = repr
            ) -> ConfigError:
    """The one sentence a value that fails a check becomes: `where` is how its user spelled the
    setting (`--image-size`, `image.image_size` in backticks, `shuffle_seed`), `shown` how the
    value is said."""
    return ConfigError(f"{where} must be {says}, not {shown(value)}.")


def check_fields(values: Any, where: Callable[[str], str] | None = None) -> None:
    """Raises `refusal` for the first field of the dataclass instance `values` whose value fails
    one of its rules; `where(name)` spells the field (default: `--name`)."""
    for f in dataclasses.fields(values):
        check_rules(where(f.name) if where else flag(f.name), getattr(values, f.name), f)


def check_rules(where: str, value: Any, declared: dataclasses.Field[Any]) -> None:
    """Raises `refusal` when `value` (unless None: not set) fails a rule of the field
    `declared`."""
    for rule in declared.metadata.get(RULES, ()) if value is not None else ():
        if not rule.holds(value):
            raise refusal(where, rule.says, value, rule.shown)


def flag(name: str) -> str:
    """The option a field is on the command line by default: `--image-size` for `image_size`."""
    return f"--{name.replace('_', '-')}"


_TYPE_WORDS = {bool: "True or False", int: "a whole number", float: "a number", str: "a string"}


def typed(where: str, value: Any, hint: Any, *, none: str = "None", quote: bool = False) -> Any:
    """`value` as the type `hint` (bool, int, float, str, a list of one of these, or one of them
    or None), converted where that is lossless: an int or a numeric string to a float, one item
    to a list of it, comma-separated numbers to a list of floats; else `refusal`. `none` is how
    the caller's language spells None (`null` in YAML); `quote` puts `where` in backticks (a
    config file's key)."""
    spelled = f"`{where}`" if quote else where
    or_none = ""
    if typing.get_origin(hint) in (Union, getattr(types, "UnionType", Union)):
        if value is None:
            return None
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
        or_none = f" or {none}"
    if typing.get_origin(hint) is list:
        (inner,) = typing.get_args(hint)
        if isinstance(value, str) and inner is float:
            value = [p for p in value.split(",") if p.strip()]
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise refusal(spelled, f"a list{or_none}", value)
        return [typed(f"{where}[{i}]", v, inner, none=none, quote=quote)
                for i, v in enumerate(value)]
    if hint is float and isinstance(value, (str, int)) and not isinstance(value, bool):
        try:
            return float(value)
        except (ValueError, OverflowError):
            pass
    if isinstance(value, hint) and (hint is bool or not isinstance(value, bool)):
        return value
    raise refusal(spelled, f"{_TYPE_WORDS[hint]}{or_none}", value)
