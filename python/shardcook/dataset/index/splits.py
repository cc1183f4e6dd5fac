"""Train/val/test splits by whole shard, computed exactly as `energon prepare` does, but checked
before anything is written: a bad ratio, a pattern that matches nothing, an empty or missing train
split or a shard in two splits is an error instead of a silently broken dataset."""

from __future__ import annotations

import difflib
import fnmatch
import logging
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from shardcook.braces import expand_braces
from shardcook.errors import ConfigError

log = logging.getLogger(__name__)

SPLIT_NAMES = ("train", "val", "test")


@dataclass
class Splits:
    """Shard names per split, in Energon's order, and warnings worth showing."""

    parts: dict[str, list[str]]
    warnings: list[str] = field(default_factory=list)


def parse_ratio(text: str | Sequence[float]) -> tuple[float, float, float]:
    """Parses `0.8,0.1,0.1` (or a sequence) into three finite non-negative numbers with a positive
    train share: the one parser of `--split` for finalize, raw, encode and the config file."""
    try:
        values = [float(x) for x in (text.split(",") if isinstance(text, str) else text)]
    except (TypeError, ValueError):
        values = []
    shown = text if isinstance(text, str) else ",".join(str(v) for v in text)
    if (len(values) != 3 or not all(math.isfinite(v) and v >= 0 for v in values)
            or not math.isfinite(sum(values)) or sum(values) <= 0):
        raise ConfigError(
            f"invalid split {shown!r}: give three non-negative numbers with a positive sum for "
            "train,val,test, e.g. 0.8,0.1,0.1 or 8,1,1"
        )
    if values[0] == 0:
        raise ConfigError(
            f"invalid split {shown!r}: the train ratio is 0, so the train split would be empty; "
            "give train a positive share, e.g. 0.8,0.1,0.1"
        )
    return values[0], values[1], values[2]


def _normalized(ratio: Sequence[float]) -> list[float]:
    """`ratio` checked (`parse_ratio`) and scaled to sum to 1."""
    ratio = parse_ratio(ratio)
    total = sum(ratio)
    return [r / total for r in ratio]


def _ends(n: int, normalized: Sequence[float]) -> list[int]:
    """Where Energon cuts a list of `n` shards: each split's end, `int(n * cumulative_ratio)`."""
    ends, cumulative = [], 0.0
    for r in normalized:
        cumulative += r
        ends.append(int(n * cumulative))
    return ends


def train_need(ratio: Sequence[float]) -> int:
    """The fewest shards whose cut by `ratio` leaves train a shard."""
    train = _normalized(ratio)[0]
    need = math.ceil(1 / train)
    while int(need * train) < 1:  # float rounding: the smallest n Energon accepts
        need += 1
    return need


def split_by_ratio(
    shards: Sequence[str], ratio: Sequence[float], shuffle_seed: int | None = None
) -> Splits:
    """Cuts the shard list at `int(n * cumulative_ratio)`, as `energon prepare --split-ratio`."""
    normalized = _normalized(ratio)
    order = list(shards)
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(order)
    parts: dict[str, list[str]] = {}
    start = 0
    for name, end in zip(SPLIT_NAMES, _ends(len(order), normalized), strict=True):
        parts[name] = order[start:end]
        start = end
    splits = Splits(parts)
    if not parts["train"]:
        raise ConfigError(
            f"the train split would be empty: {len(order)} shard(s) with train ratio "
            f"{normalized[0]:.3g} need at least {train_need(ratio)} shards; write smaller shards "
            "(a lower --shard-size) or raise the train ratio"
        )
    for name, r in zip(SPLIT_NAMES[1:], normalized[1:], strict=True):
        if r > 0 and not parts[name]:
            splits.warnings.append(
                f"the {name} split is empty: {len(order)} shard(s) are too few for a {name} "
                f"ratio of {r:.3g}; Energon will find no {name} data"
            )
    return splits


def inputs_by_split(num_inputs: int, shard_size: int, ratio: Sequence[float]) -> list[int]:
    """How many of `num_inputs` inputs each split gets when they are written `shard_size` to a
    shard (the last shard holds the rest) and the shards are cut by `ratio`."""
    shards = -(-num_inputs // shard_size)
    ends = [min(end * shard_size, num_inputs) for end in _ends(shards, _normalized(ratio))]
    return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def empty_splits(num_inputs: int, shard_size: int, ratio: Sequence[float]) -> list[str]:
    """The splits with a non-zero ratio that get no input at `shard_size` inputs per shard."""
    got = inputs_by_split(num_inputs, shard_size, ratio)
    return [name for name, r, n in zip(SPLIT_NAMES, parse_ratio(ratio), got, strict=True)
            if r > 0 and n == 0]


def fit_shard_size(num_inputs: int, shard_size: int, ratio: Sequence[float]) -> int:
    """Inputs per shard for `num_inputs` inputs split by `ratio`: `shard_size` when every split
    with a non-zero ratio gets a shard; else the largest smaller size whose shards split the
    inputs exactly as one input per shard would (the closest whole shards can come to the
    ratio, and at worst 1), so few inputs still fill every split they can."""
    if num_inputs == 0 or not empty_splits(num_inputs, shard_size, ratio):
        return shard_size
    by_input = inputs_by_split(num_inputs, 1, ratio)
    return next(size for size in range(min(shard_size, num_inputs), 0, -1)
                if inputs_by_split(num_inputs, size, ratio) == by_input)


def _expansions(pattern: str) -> list[str]:
    """The brace expansions of a split pattern, as Energon makes them.

    Brace expansion treats a backslash as an escape and removes it, so `\\.` in a pattern
    reaches the regex as `.`; that is Energon's behaviour and we keep it.
    """
    try:
        return expand_braces(pattern)
    except ConfigError as e:
        raise ConfigError(f"split pattern {pattern!r}: {e}") from None


def _compiled(pattern: str, expansions: Sequence[str]) -> list[re.Pattern[str]]:
    """Each brace expansion of `pattern` compiled as a regex, as Energon does."""
    compiled = []
    for text in expansions:
        try:
            compiled.append(re.compile(text))
        except re.error as e:
            raise ConfigError(
                f"split pattern {pattern!r} expands to {text!r}, which is not a valid regular "
                f"expression ({e})"
            ) from None
    return compiled


#: A `*` or `?` that repeats nothing in a regex (at the start, or after a plain character): what
#: a glob (`*.tar`, `shard-??.tar`) has and a regex rarely means.
_GLOB_MARK = re.compile(r"(?:^|[^.)\]*+?])[*?]")


def _named(shards: Sequence[str]) -> str:
    """A few shard names for a message."""
    shown = ", ".join(repr(s) for s in shards[:3])
    return shown + (f" and {len(shards) - 3} more" if len(shards) > 3 else "")


def _as_regex(glob: str) -> str:
    """The regex selecting what `glob` selects (no backslashes: brace expansion strips them)."""
    return "".join({"*": ".*", "?": "."}.get(c) or (f"[{c}]" if c in ".+()|^$" else c)
                   for c in glob) + "$"


def _glob_refusal(name: str, pattern: str, expansions: Sequence[str], shards: Sequence[str],
                  selected: Sequence[str] | None) -> ConfigError | None:
    """The refusal of a pattern that looks like a glob and selects other shards as the regex
    Energon reads it as (`selected`; None: not a valid regex) than as a glob."""
    if not any(_GLOB_MARK.search(text) for text in expansions):
        return None
    as_glob = [s for s in shards if any(fnmatch.fnmatchcase(s, text) for text in expansions)]
    if not as_glob or as_glob == selected:
        return None
    regex = _as_regex(pattern) if len(expansions) == 1 else None
    reads = ("it is not valid" if selected is None else
             f"it selects {_named(selected)}" if selected else "it selects no shard")
    return ConfigError(
        f"split pattern {name}:{pattern!r} looks like a glob, which would select "
        f"{_named(as_glob)}, but split patterns are regular expressions (as in Energon), and "
        f"as one {reads}; write it as a regex"
        + (f", e.g. {name}:{regex!r}" if regex else "")
    )


def _no_shard(name: str, pattern: str, compiled: Sequence[re.Pattern[str]],
              shards: Sequence[str]) -> ConfigError:
    """The refusal of a pattern that selects no shard, naming the shards it could have meant."""
    found = [s for s in shards if any(p.search(s) for p in compiled)]
    nearest = difflib.get_close_matches(pattern, shards, 3, 0)
    meant = (f"searched anywhere in the path it finds {_named(found)} (put '.*' before it to "
             "select those)" if found else f"the nearest shard names are {_named(nearest)}")
    return ConfigError(
        f"split pattern {name}:{pattern!r} matches none of the {len(shards)} shards, as patterns "
        "are matched from the start of the shard path after brace expansion, which also removes "
        f"backslashes; {meant}"
    )


def split_by_patterns(shards: Sequence[str], patterns: Mapping[str, str]) -> Splits:
    """Assigns shards to splits by `re.match` of each brace expansion, as Energon does; refuses
    a pattern that selects no shard, or looks like a glob and selects other shards as a regex,
    naming the shards it could have meant."""
    if not patterns:
        raise ConfigError("give at least one split pattern, e.g. train:'train-.*'")
    parts: dict[str, list[str]] = {}
    for name, pattern in patterns.items():
        expansions = _expansions(pattern)
        try:
            compiled = _compiled(pattern, expansions)
        except ConfigError as invalid:
            raise (_glob_refusal(name, pattern, expansions, shards, None) or invalid) from None
        parts[name] = [s for s in shards if any(p.match(s) for p in compiled)]
        refusal = _glob_refusal(name, pattern, expansions, shards, parts[name])
        if refusal is not None:
            raise refusal
        if not parts[name]:
            raise _no_shard(name, pattern, compiled, shards)
    splits = Splits(parts)
    covered = {s for names in parts.values() for s in names}
    uncovered = [s for s in shards if s not in covered]
    if uncovered:
        splits.warnings.append(
            f"{len(uncovered)} shard(s) are in no split (e.g. {uncovered[0]!r}); no loader will "
            "read them"
        )
    return splits


def check_parts(parts: Mapping[str, Sequence[str]], *, need_train: bool = True) -> None:
    """Refuses split parts without a train split (unless `need_train` is False: a layout whose
    splits are folders of their own), or with a shard in two splits: Energon loads both, but
    training would find no data, or read a shard's samples in two splits."""
    if need_train and "train" not in parts:
        raise ConfigError(
            f"the split patterns name no train split (only {', '.join(parts)}), and training "
            "reads the train split; add one, e.g. train:'.*'"
        )
    owner: dict[str, str] = {}
    for name, names in parts.items():
        for shard in names:
            if shard in owner:
                raise ConfigError(
                    f"shard {shard} is in both the {owner[shard]} and the {name} split, so its "
                    "samples would be read by both; write split patterns that match each shard "
                    "once"
                )
            owner[shard] = name


def parts_by_name(shards: Sequence[str]) -> dict[str, str] | None:
    """Split patterns from Megatron-Bridge's shard names (`train-`, `val-`, `test-` prefixes)
    when every shard carries one; None when none does.

    Raises:
        ConfigError: some shards carry a split prefix and others do not.
    """
    named = {s: next((n for n in SPLIT_NAMES if s.startswith(f"{n}-")), None) for s in shards}
    prefixed = [s for s, n in named.items() if n is not None]
    if not prefixed:
        return None
    if len(prefixed) < len(shards):
        other = next(s for s, n in named.items() if n is None)
        raise ConfigError(
            f"shard {prefixed[0]} is named for its split but {other} is not, and nothing records "
            "which split each belongs to; say so with --split-parts, e.g. train:'train-.*'"
        )
    return {n: f"{n}-.*" for n in SPLIT_NAMES if n in named.values()}


def parse_split_parts(items: Sequence[str]) -> dict[str, str]:
    """Parses CLI `NAME:PATTERN` items."""
    parts: dict[str, str] = {}
    for item in items:
        name, sep, pattern = item.partition(":")
        if not sep or not name or not pattern:
            raise ConfigError(
                f"--split-parts {item!r} must look like NAME:PATTERN, e.g. train:'train-.*'"
            )
        parts[name] = pattern
    return parts


_number = re.compile(r"\d+")


def collapse(names: Sequence[str]) -> list[str]:
    """Order-keeping brace collapse of shard names (Energon's `bracecollapse.collapse` with
    `keep_order=True`): runs of names that differ in one number, counting up by one with the same
    width, become `prefix{first..last}suffix`."""

    def tokenize(s: str) -> tuple[list[str], list[str]]:
        return _number.split(s), _number.findall(s)

    out: list[str] = []
    i = 0
    while i < len(names):
        lits0, nums0 = tokenize(names[i])
        if not nums0:
            out.append(names[i])
            i += 1
            continue
        slot, prev, end = -1, nums0, i
        j = i + 1
        while j < len(names):
            lits1, nums1 = tokenize(names[j])
            if lits1 != lits0 or len(nums1) != len(nums0):
                break
            diff = [k for k, (a, b) in enumerate(zip(prev, nums1, strict=True)) if int(a) != int(b)]
            if len(diff) != 1:
                break
            k = diff[0]
            if len(nums1[k]) != len(prev[k]) or (slot != -1 and slot != k):
                break
            if int(nums1[k]) != int(prev[k]) + 1:
                break
            slot, prev, end = k, nums1, j
            j += 1
        if end > i:
            pieces = []
            for k, lit in enumerate(lits0[:-1]):
                pieces.append(lit)
                pieces.append(f"{{{nums0[k]}..{prev[k]}}}" if k == slot else nums0[k])
            pieces.append(lits0[-1])
            out.append("".join(pieces))
            i = end + 1
        else:
            out.append(names[i])
            i += 1
    return out


def literal_pattern(names: Sequence[str]) -> str:
    """A split pattern matching exactly `names` (no backslashes: brace expansion strips them)."""

    def literal(name: str) -> str:
        # `^` alone in a class would negate it; `[]^]` also admits `]`, harmless for shard names
        return "".join("[]^]" if c == "^" else f"[{c}]" if c in ".*+?()[]|$" else c
                       for c in name)

    return "(" + "|".join(literal(n) for n in names) + ")$"
