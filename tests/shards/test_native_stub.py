"""`_native.pyi` against the built module: the same public names, the same parameters (names,
kinds, defaults), and real calls whose results have the types the stub declares."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from shardcook import _native
from skimage import data as samples

STUB_PATH = Path(_native.__file__).with_name("_native.pyi")


def _load_stub() -> types.ModuleType:
    """The stub executed as a module: its annotations become real objects to compare with."""
    stub = types.ModuleType("_native_stub")
    text = STUB_PATH.read_text(encoding="utf-8")
    source = compile(text, str(STUB_PATH), "exec", dont_inherit=True)  # annotations as objects
    exec(source, stub.__dict__)  # our own stub, run to read its annotations
    return stub


STUB = _load_stub()
PUBLIC = sorted(
    name for name, value in vars(STUB).items()
    if not name.startswith("_") and getattr(value, "__module__", None) == STUB.__name__
)


def _params(sig: inspect.Signature) -> list[tuple[str, inspect._ParameterKind, object]]:
    return [(p.name, p.kind, p.default) for p in sig.parameters.values() if p.name != "self"]


def _members(cls: type) -> dict[str, object]:
    return {n: v for n, v in vars(cls).items() if not n.startswith("_") or n == "__init__"}


def test_the_stub_and_the_module_name_the_same_things():
    native = sorted(n for n in vars(_native) if not n.startswith("_"))
    assert native == PUBLIC


@pytest.mark.parametrize("name", PUBLIC)
def test_parameters_match(name):
    declared, built = getattr(STUB, name), getattr(_native, name)
    if inspect.isfunction(declared):
        assert _params(inspect.signature(built)) == _params(inspect.signature(declared))
        return
    if hasattr(declared, "_fields"):  # a NamedTuple
        assert built._fields == declared._fields
        return
    for member, value in _members(declared).items():
        if member == "__init__":
            assert _params(inspect.signature(built)) == _params(inspect.signature(value))
        elif isinstance(value, property):
            assert inspect.isdatadescriptor(getattr(built, member)), member
        else:
            assert _params(inspect.signature(getattr(built, member))) == _params(
                inspect.signature(value)), member
    public = {n for n in dir(built) if not n.startswith("_")}
    assert public == {n for n in _members(declared) if n != "__init__"}


# ------------------------------------------------------------------------ types of real results


def _conforms(value: object, hint: object) -> bool:
    """True when `value` is of the stub type `hint` (stub classes stand for the native ones)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:  # only build_info's free-form facts: plain JSON-like values
        return value is None or isinstance(value, (str, int, float, list, dict))
    if hint is type(None) or hint is None:
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if origin is typing.Literal:
        return value in args
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            _conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items())
    if origin is tuple:
        return (isinstance(value, tuple) and len(value) == len(args)
                and all(_conforms(v, a) for v, a in zip(value, args, strict=True)))
    if origin is np.ndarray:
        dtype = typing.get_args(args[1])[0]
        return isinstance(value, np.ndarray) and value.dtype == dtype
    if isinstance(hint, type) and hint.__module__ == STUB.__name__:
        return isinstance(value, getattr(_native, hint.__name__)) and _fields_conform(value, hint)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    raise AssertionError(f"the stub test cannot check {hint!r}; teach _conforms")


def _fields_conform(value: object, declared: type) -> bool:
    if hasattr(declared, "_fields"):
        hints = typing.get_type_hints(declared)
        return all(_conforms(getattr(value, f), hints[f]) for f in declared._fields)
    return all(
        _conforms(getattr(value, n), p.fget.__annotations__["return"])
        for n, p in vars(declared).items() if isinstance(p, property)
    )


def _returns(declared: Callable[..., object]) -> object:
    return declared.__annotations__["return"]


@pytest.fixture
def called() -> Iterator[set[str]]:
    seen: set[str] = set()
    yield seen
    functions = {n for n in PUBLIC if inspect.isfunction(getattr(STUB, n))}
    methods = {f"ShardWriter.{m}" for m in ("write", "close", "abort", "__enter__", "__exit__")}
    assert seen >= functions | methods, "every native function is called with a real input"


def test_real_results_have_the_declared_types(tmp_path, called):
    def check(name: str, result: object) -> object:
        owner, _, attr = name.rpartition(".")
        declared = getattr(getattr(STUB, owner), attr) if owner else getattr(STUB, name)
        hint = _returns(declared)
        if hint is not typing.Self:
            assert _conforms(result, hint), (name, result)
        called.add(name)
        return result

    photo = samples.astronaut()
    jpg = check("encode_image", _native.encode_image(photo, "jpg", 90))
    rows = check("preprocess_batch", _native.preprocess_batch(
        [jpg, bytearray(jpg), memoryview(jpg), np.frombuffer(jpg, np.uint8), b"no image", 3],
        size=64, workers=2))
    assert [r.error_kind for r in rows] == [None] * 4 + ["unsupported_format", "bad_input"]
    check("image_geometry", _native.image_geometry(400, 300, size=64, mode_name="bucket"))
    check("default_buckets", _native.default_buckets(256))
    assert check("pillow_header", _native.pillow_header(jpg)) == (
        photo.shape[1], photo.shape[0], "JPEG", "RGB")

    writer = _native.ShardWriter(tmp_path, shard_size=2, prefix="t-")
    assert check("ShardWriter.__enter__", writer.__enter__()) is writer
    for i in range(3):
        check("ShardWriter.write", writer.write(f"k{i}", {"jpg": jpg, "txt": b"x"}))
    check("ShardWriter.__exit__", writer.__exit__(None))
    shards = check("ShardWriter.close", writer.close())
    assert shards == [("t-000000.tar", 2), ("t-000001.tar", 1)]
    check("ShardWriter.abort", _native.ShardWriter(tmp_path / "other").abort())

    reader = check("read_shard", _native.read_shard(tmp_path / shards[0].name))
    sample = next(reader)
    assert _conforms(sample, STUB.Sample) and sample.key == "k0"
    check("count_samples", _native.count_samples(tmp_path / shards[1].name))
    names = [s.name for s in shards]
    summary = check("index_shards", _native.index_shards(tmp_path, names, tmp_path / "i.sqlite"))
    assert summary.part_names == ["jpg", "txt"]
    verified = check("verify_shards", _native.verify_shards(tmp_path, [(n, None) for n in names]))
    assert [s.problems for s in verified.shards] == [[], []]
    assert check("shard_file_name", _native.shard_file_name(1, prefix="t-")) == names[1]
    tar = (tmp_path / names[0]).read_bytes()
    walk = _native.TarWalk(names[0], len(tar))
    while (needed := check("TarWalk.needed", walk.needed())) is not None:
        check("TarWalk.feed", walk.feed(needed[0], tar[needed[0]:needed[0] + needed[1]]))
    assert walk.offsets is not None and walk.position == walk.offsets[-1] == len(tar) - 1024
    idx = (tmp_path / f"{names[0]}.idx").read_bytes()
    check("write_walks", _native.write_walks(tmp_path, [(names[0], walk)], tmp_path / "w.sqlite"))
    assert (tmp_path / f"{names[0]}.idx").read_bytes() == idx
    check("remove_partial_shards", _native.remove_partial_shards(tmp_path))
    build = check("build_info", _native.build_info())
    assert build["jpeg"]["simd_compiled"] in (True, False)
