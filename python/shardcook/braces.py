"""Brace expansion with a limit: `train-{0..9}.tar` as `braceexpand` expands it, but a pattern
that would expand to more than `MAX_EXPANSIONS` names is refused before anything is expanded
(`braceexpand` builds whole ranges eagerly: `{0..99999999}` alone takes minutes)."""

from __future__ import annotations

import re

import braceexpand

from shardcook.errors import ConfigError

#: More names than any split pattern, exclusion or tar list needs.
MAX_EXPANSIONS = 10_000

#: What Energon's split.yaml would brace-expand in a shard name: a brace, or the backslash that
#: escapes one.
BRACE_CHARS = re.compile(r"[{}\\]")

_RANGE = re.compile(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?")


def expansion_count(pattern: str) -> int:
    """An upper bound of how many names `pattern` expands to, computed without expanding."""
    return _sequence(pattern, 0, nested=False)[0]


def expand_braces(pattern: str, *, limit: int = MAX_EXPANSIONS) -> list[str]:
    """The names `pattern` brace-expands to (backslash escapes removed, as `braceexpand` does).

    Raises:
        ConfigError: unbalanced braces, or more than `limit` names; one sentence naming `pattern`.
    """
    count = expansion_count(pattern)
    if count > limit:
        raise ConfigError(
            f"the pattern {pattern!r} expands to {count:,} names, more than the {limit:,} allowed; "
            "use a regular expression or a shorter range"
        )
    try:
        return list(braceexpand.braceexpand(pattern))
    except ValueError as e:  # braceexpand's UnbalancedBracesError
        raise ConfigError(f"the pattern {pattern!r} cannot be brace-expanded ({e})") from None


def _sequence(p: str, i: int, *, nested: bool) -> tuple[int, int]:
    """(count, end) of the run of text and groups from `i` up to a `,` or `}` when `nested`."""
    count = 1
    while i < len(p):
        c = p[i]
        if c == "\\":
            i += 2
        elif nested and c in ",}":
            return count, i
        elif c == "{":
            n, i = _group(p, i)
            count *= n
        else:
            i += 1
    return count, i


def _group(p: str, start: int) -> tuple[int, int]:
    """(count, end) of the `{...}` group opening at `start`: the sum over its alternatives, the
    length of a `{a..b..step}` range, or 1 for a literal such as `{x}`."""
    total, commas, i = 0, 0, start + 1
    while True:
        n, i = _sequence(p, i, nested=True)
        total += n
        if i >= len(p):
            return 1, i  # unbalanced: braceexpand says so
        if p[i] == ",":
            commas, i = commas + 1, i + 1
            continue
        inner, i = p[start + 1 : i], i + 1
        if commas:
            return total, i
        found = _RANGE.fullmatch(inner)
        return (_range_length(found) if found else total), i


def _range_length(found: re.Match[str]) -> int:
    first, last, step = found.group(1), found.group(2), found.group(3)
    if first.lstrip("-").isdigit() and last.lstrip("-").isdigit():
        span = abs(int(last) - int(first))
    elif first.isalpha() and last.isalpha():
        span = abs(ord(last) - ord(first))
    else:
        return 1  # braceexpand leaves a mixed range as literal text
    return span // max(abs(int(step or 1)), 1) + 1
