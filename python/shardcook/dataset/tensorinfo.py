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


class _Storage:
    def __init__(self, dtype: str):
        self.dtype = dtype


def _rebuild_tensor(storage: _Storage, _offset: int, size: tuple[int, ...],
                    *_rest: object) -> TensorInfo:
    return TensorInfo(tuple(int(s) for s in size), storage.dtype)


#: The globals a plain tensor's pickle names: `torch.save` uses the first; `pickle.dumps(tensor)`
#: also puts its storage through the second (which torch runs as an unrestricted `torch.load`).
REBUILD_TENSOR = ("torch._utils", "_rebuild_tensor_v2")
STORAGE_FROM_BYTES = ("torch.storage", "_load_from_bytes")


class _TensorUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if (module, name) == REBUILD_TENSOR:
            return _rebuild_tensor
        if module == "torch" and name in _STORAGE_DTYPES:
            return _STORAGE_DTYPES[name]
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")

    def persistent_load(self, pid: object) -> _Storage:
        # ('storage', storage_type, key, location, numel)
        if isinstance(pid, tuple) and len(pid) >= 2 and pid[0] == "storage":
            return _Storage(pid[1] if isinstance(pid[1], str) else "unknown")
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
    """The shape and dtype of a `.pth` (torch.save zip format) or `.npy` part; None when the
    bytes hold something else (which is not an error here: parts may be anything)."""
    try:
        if part.endswith(".npy"):
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


def _storage_from_bytes(data: bytes) -> _Storage:
    """The storage of a legacy `torch.save` stream (magic, protocol, sys info, then the object),
    which is what `pickle.dumps(tensor)` embeds for each storage."""
    stream = io.BytesIO(data)
    for _ in range(3):
        _TensorUnpickler(stream).load()
    storage = _TensorUnpickler(stream).load()
    if not isinstance(storage, _Storage):
        raise pickle.UnpicklingError("a pickled storage holds something else")
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
    """
    return _PickledTensorsUnpickler(io.BytesIO(data)).load()


def pickled_summary(data: bytes, part: str) -> str | None:
    """`name dtype[shape], ...` for a pickle part holding a dict of tensors (Megatron-Bridge's
    embeddings); None for another part or content (never an error: parts may be anything)."""
    if not _named(part, PICKLE_PARTS):
        return None
    try:
        obj = pickled_tensors_info(data)
    except Exception:  # noqa: BLE001 (arbitrary bytes can fail anywhere in a pickle)
        return None
    if not isinstance(obj, dict):
        return None
    return ", ".join(f"{k} {v}" for k, v in obj.items() if isinstance(v, TensorInfo)) or None
