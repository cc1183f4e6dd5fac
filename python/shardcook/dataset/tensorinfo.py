"""Shape and dtype of a `torch.save`d tensor or an `.npy` array, read without torch and without
running any pickled code: the pickle is walked by an unpickler that knows only the handful of
names a plain tensor needs and refuses everything else."""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from dataclasses import dataclass


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


class _TensorUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> object:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
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


def tensor_info(data: bytes, part: str) -> TensorInfo | None:
    """The shape and dtype of a `.pth` (torch.save zip format) or `.npy` part; None when the
    bytes hold something else (which is not an error here: parts may be anything)."""
    try:
        if part.endswith(".npy"):
            import numpy as np

            arr = np.load(io.BytesIO(data), allow_pickle=False, mmap_mode=None)
            return TensorInfo(tuple(arr.shape), str(arr.dtype))
        if part.endswith((".pth", ".pt")):
            with zipfile.ZipFile(io.BytesIO(data)) as z:
                pkl = next(n for n in z.namelist() if n.endswith("/data.pkl"))
                obj = _TensorUnpickler(io.BytesIO(z.read(pkl))).load()
            return obj if isinstance(obj, TensorInfo) else None
    except Exception:  # noqa: BLE001 (arbitrary bytes can fail anywhere in zip/pickle/numpy)
        return None
    return None
