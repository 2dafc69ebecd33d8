"""Read torch checkpoints into numpy without torch (weights only, no code runs).

A restricted unpickler builds only containers, ``OrderedDict``, tensor rebuilds and storage
classes; any other global is refused, so a checkpoint cannot run code. Both of torch's
formats are understood: the zip archive (torch >= 1.6: ``*/data.pkl`` + ``*/data/<key>``)
and the legacy stream that Resemblyzer ships (magic, protocol and system pickles, the main
pickle, the list of storage keys, then each storage as an int64 element count and its bytes).
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DeskScribeError

_DTYPES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "BFloat16Storage": np.uint16,  # widened to float32 below
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


class CheckpointFormatError(DeskScribeError):
    """The file is not a torch checkpoint we can read (the message says why)."""


@dataclass(frozen=True)
class _Storage:
    key: str
    dtype: str


@dataclass(frozen=True)
class _Tensor:
    storage: _Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]


def _rebuild_tensor(storage, offset, shape, stride, *_):
    return _Tensor(storage, int(offset), tuple(shape), tuple(stride))


def _rebuild_parameter(data, *_):
    return data


class _Unpickler(pickle.Unpickler):
    """Builds only containers, tensors and storages; refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("torch._utils", "_rebuild_parameter"):
            return _rebuild_parameter
        if module == "torch" and name in _DTYPES:
            return name
        raise CheckpointFormatError(
            f"the checkpoint needs {module}.{name}, which a weights-only reader does not load"
        )

    def persistent_load(self, pid: Any) -> Any:
        if not isinstance(pid, tuple) or pid[0] != "storage":
            raise CheckpointFormatError(f"unsupported persistent id {pid!r:.80}")
        if len(pid) == 6 and pid[5] is not None:
            raise CheckpointFormatError("storage views (torch < 0.4 checkpoints) are not supported")
        return _Storage(str(pid[2]), pid[1])


def read_torch_checkpoint(path: str | Path) -> Any:
    """The object saved in a torch checkpoint, with every tensor as a numpy array."""
    path = Path(path)
    try:
        if zipfile.is_zipfile(path):
            obj, storages = _read_zip(path)
        else:
            obj, storages = _read_legacy(path)
        return _materialise(obj, storages)
    except CheckpointFormatError:
        raise
    except (pickle.UnpicklingError, EOFError, KeyError, ValueError, TypeError, struct.error) as err:
        raise CheckpointFormatError(f"{path} is not a readable torch checkpoint ({err})") from None


def _read_zip(path: Path) -> tuple[Any, dict[str, bytes]]:
    with zipfile.ZipFile(path) as archive:
        pkl = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
        if pkl is None:
            raise CheckpointFormatError(f"{path} is a zip file without data.pkl")
        prefix = pkl[: -len("data.pkl")]
        obj = _Unpickler(io.BytesIO(archive.read(pkl))).load()
        keys = {t.storage.key for t in _tensors(obj)}
        return obj, {k: archive.read(f"{prefix}data/{k}") for k in keys}


def _read_legacy(path: Path) -> tuple[Any, dict[str, bytes]]:
    with open(path, "rb") as fh:
        if _Unpickler(fh).load() != _LEGACY_MAGIC:
            raise CheckpointFormatError(f"{path} is not a torch checkpoint (bad magic number)")
        _Unpickler(fh).load()  # protocol version
        sys_info = _Unpickler(fh).load()
        if not isinstance(sys_info, dict) or not sys_info.get("little_endian", True):
            raise CheckpointFormatError(f"{path} was not saved on a little-endian machine")
        obj = _Unpickler(fh).load()
        keys = _Unpickler(fh).load()
        dtypes = {t.storage.key: t.storage.dtype for t in _tensors(obj)}
        storages = {}
        for key in keys:
            (count,) = struct.unpack("<q", fh.read(8))
            size = np.dtype(_DTYPES[dtypes.get(key, "ByteStorage")]).itemsize
            storages[key] = fh.read(count * size)
            if len(storages[key]) != count * size:
                raise CheckpointFormatError(f"{path} is truncated (a storage is cut short)")
        return obj, storages


def _tensors(obj: Any):
    if isinstance(obj, _Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _tensors(v)


def _materialise(obj: Any, storages: dict[str, bytes]) -> Any:
    if isinstance(obj, _Tensor):
        dtype = np.dtype(_DTYPES[obj.storage.dtype])
        flat = np.frombuffer(storages[obj.storage.key], dtype=dtype)
        last = obj.offset + sum((n - 1) * st for n, st in zip(obj.shape, obj.stride, strict=True))
        if (
            obj.offset < 0
            or min(obj.stride, default=0) < 0
            or (all(obj.shape) and last >= len(flat))
        ):
            raise CheckpointFormatError("a tensor reaches past the end of its storage")
        if not obj.shape:
            array = flat[obj.offset : obj.offset + 1].reshape(())
        else:
            strides = tuple(s * dtype.itemsize for s in obj.stride)
            array = np.lib.stride_tricks.as_strided(flat[obj.offset :], obj.shape, strides)
        array = np.array(array)  # own, writable, contiguous
        if obj.storage.dtype == "BFloat16Storage":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        return array
    if isinstance(obj, dict):
        return type(obj)((k, _materialise(v, storages)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_materialise(v, storages) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_materialise(v, storages) for v in obj)
    return obj
