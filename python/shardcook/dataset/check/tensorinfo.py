"""Shape and dtype of a `torch.save`d tensor, an `.npy` array or the tensors inside a plain
`pickle.dumps` (Megatron-Bridge's `pickle` part), read without torch and without running any
pickled code: the pickle is walked by an unpickler that knows only the handful of names a plain
tensor needs and refuses everything else."""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from typing import NoReturn


@dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


_STORAGE_DTYPES = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
}


#: Bytes per value of each storage dtype.
_ITEM_SIZES = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int64": 8, "int32": 4,
               "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


class _Storage:
    """A storage record of a pickle: its dtype, its key (its file in a `torch.save` archive) and
    how many values it holds."""

    def __init__(self, dtype: str, key: str = "", numel: int = 0):
        self.dtype = dtype
        self.key = key
        self.numel = numel


@dataclass(frozen=True)
class _Rebuilt:
    """One tensor as its pickle rebuilds it: a view into a storage."""

    storage: _Storage
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]

    def past_the_end(self) -> bool:
        """Whether the view reaches beyond the storage's values."""
        if 0 in self.size:
            return False
        last = self.offset + sum((n - 1) * s for n, s in zip(self.size, self.stride, strict=False))
        return self.offset < 0 or last >= self.storage.numel


#: The globals a plain tensor's pickle names: `torch.save` uses the first; `pickle.dumps(tensor)`
#: also puts its storage through the second (which torch runs as an unrestricted `torch.load`).
REBUILD_TENSOR = ("torch._utils", "_rebuild_tensor_v2")
STORAGE_FROM_BYTES = ("torch.storage", "_load_from_bytes")


class _TensorUnpickler(pickle.Unpickler):
    """Walks a tensor's pickle, recording each tensor (`rebuilt`) instead of making it."""

    def __init__(self, file: io.BytesIO):
        super().__init__(file)
        self.rebuilt: list[_Rebuilt] = []

    def _rebuild_tensor(self, storage: _Storage, offset: int, size: tuple[int, ...],
                        stride: tuple[int, ...] = (), *_rest: object) -> TensorInfo:
        shape = tuple(int(s) for s in size)
        self.rebuilt.append(_Rebuilt(storage, int(offset), shape, tuple(int(s) for s in stride)))
        return TensorInfo(shape, storage.dtype)

    def find_class(self, module: str, name: str) -> object:
        if (module, name) == REBUILD_TENSOR:
            return self._rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")

    def persistent_load(self, pid: object) -> _Storage:
        # ('storage', storage_type, key, location, numel)
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
            dtype = pid[1] if isinstance(pid[1], str) else "unknown"
            return _Storage(dtype, str(pid[2]), int(pid[4]))
        raise pickle.UnpicklingError("unsupported persistent id")


#: Part names (or name endings) of `torch.save` files and of plain pickles.
TORCH_SAVE_PARTS = ("pth", "pt")
PICKLE_PARTS = ("pickle", "pkl")


def _named(part: str, kinds: tuple[str, ...]) -> bool:
    return part in kinds or part.endswith(tuple(f".{k}" for k in kinds))


def is_torch_save_part(part: str) -> bool:
    """Whether a part of this name holds a `torch.save` file (`pth`, `latents.pth`, ...)."""
    return _named(part, TORCH_SAVE_PARTS)


def tensor_info(data: bytes, part: str) -> TensorInfo | None:
    """The shape and dtype of a `pth` (torch.save zip format) or `npy` part, named so alone or
    as a suffix (`latents.npy`); None when the bytes hold something else (which is not an error
    here: parts may be anything)."""
    try:
        if _named(part, ("npy",)):
            import numpy as np

            arr = np.load(io.BytesIO(data), allow_pickle=False, mmap_mode=None)
            return TensorInfo(tuple(arr.shape), str(arr.dtype))
        if is_torch_save_part(part):
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
                obj = _TensorUnpickler(io.BytesIO(z.read(pkl))).load()
            return obj if isinstance(obj, TensorInfo) else None
    except Exception:  # noqa: BLE001 (arbitrary bytes can fail anywhere in zip/pickle/numpy)
        return None
    return None


def torch_save_damage(data: bytes) -> str | None:
    """Why the `torch.save` archive `data` is damaged, or None: every member is read and its CRC
    compared (a flipped byte anywhere shows), and each storage the pickle names must be a member
    holding exactly its values, with the tensor inside it. Bytes that are no archive of one plain
    tensor are for `tensor_info` to tell; they give None here."""
    if not zipfile.is_zipfile(io.BytesIO(data)):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            bad = z.testzip()
            sizes = {info.filename: info.file_size for info in z.infolist()}
            pkl = next((n for n in sizes if n.endswith("/data.pkl")), None)
            pickled = z.read(pkl) if bad is None and pkl is not None else b""
    except Exception as e:  # noqa: BLE001 (a damaged archive can fail anywhere in zipfile)
        detail = str(e).partition("\n")[0]
        return f"its archive is unreadable ({type(e).__name__}: {detail})"
    if bad is not None:
        return f"its archive member {bad} fails its CRC check"
    if pkl is None:
        return None
    unpickler = _TensorUnpickler(io.BytesIO(pickled))
    try:
        unpickler.load()
    except Exception:  # noqa: BLE001 (not the pickle of a plain tensor: tensor_info says so)
        return None
    folder = pkl[: -len("data.pkl")]
    for tensor in unpickler.rebuilt:
        name, storage = f"{folder}data/{tensor.storage.key}", tensor.storage
        needed = storage.numel * _ITEM_SIZES.get(storage.dtype, 0)
        if sizes.get(name) != needed:
            return (f"its tensor's storage {name} should hold {needed} bytes, the archive holds "
                    f"{sizes.get(name, 0)}")
        if tensor.past_the_end():
            return f"its tensor reaches past the end of its storage {name}"
    return None


def _storage_from_bytes(data: bytes) -> _Storage:
    """The storage of a legacy `torch.save` stream (magic, protocol, sys info, the storage
    record, the list of storage keys, then each storage's value count and values), which is what
    `pickle.dumps(tensor)` embeds for each storage.

    Raises:
        ValueError: the values that follow the record are not as many as it says.
    """
    stream = io.BytesIO(data)
    for _ in range(3):
        _TensorUnpickler(stream).load()
    storage = _TensorUnpickler(stream).load()
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("a pickled storage holds something else")
    keys = _TensorUnpickler(stream).load()
    count = int.from_bytes(stream.read(8), "little")
    left = len(data) - stream.tell()
    needed = storage.numel * _ITEM_SIZES.get(storage.dtype, 0)
    if keys != [storage.key] or count != storage.numel or left != needed:
        raise ValueError(f"a tensor's storage should hold {needed} bytes, the pickle holds {left}")
    return storage


class _PickledTensorsUnpickler(_TensorUnpickler):
    def find_class(self, module: str, name: str) -> object:
        if (module, name) == STORAGE_FROM_BYTES:
            return _storage_from_bytes
        return super().find_class(module, name)

    def persistent_load(self, pid: object) -> NoReturn:
        raise pickle.UnpicklingError("a plain pickle has no persistent ids")


def pickled_tensors_info(data: bytes) -> object:
    """What a plain `pickle.dumps` holds, with a `TensorInfo` in place of each tensor.

    Raises:
        pickle.UnpicklingError: the pickle names any global beyond a plain tensor's (its message
            says which); nothing was run.
        ValueError: a tensor's storage is not whole, or the tensor reaches past its end.
    """
    unpickler = _PickledTensorsUnpickler(io.BytesIO(data))
    obj = unpickler.load()
    if any(tensor.past_the_end() for tensor in unpickler.rebuilt):
        raise ValueError("a tensor reaches past the end of its storage")
    return obj


def pickled_summary(data: bytes, part: str) -> str | None:
    """`dtype[shape]` for a pickle part holding one tensor (Bridge's Wan text embedding), `name
    dtype[shape], ...` for one holding a dict of tensors (its FLUX embeddings); None for another
    part or content (never an error: parts may be anything)."""
    if not _named(part, PICKLE_PARTS):
        return None
    try:
        obj = pickled_tensors_info(data)
    except Exception:  # noqa: BLE001 (arbitrary bytes can fail anywhere in a pickle)
        return None
    if isinstance(obj, TensorInfo):
        return str(obj)
    if not isinstance(obj, dict):
        return None
    return ", ".join(f"{k} {v}" for k, v in obj.items() if isinstance(v, TensorInfo)) or None
