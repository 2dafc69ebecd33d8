"""Small ONNX graphs that the engine builds at run time (the VAD cut in two, the decoder's
top-k, the cache update), kept in the user data folder once built.

Building them needs the ``onnx`` package, whose import (with ml_dtypes) is the largest part of
starting a transcription. Kept as bytes, a later start loads them without it. The file name
carries a hash of the builder's code and its parameters, so a changed builder builds again; a
file that cannot be read or loaded is built again too (``load`` raising anything).
"""

from __future__ import annotations

import hashlib
import io
import logging
import marshal
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from .fsutil import write_atomic

log = logging.getLogger(__name__)
T = TypeVar("T")


def cached(
    name: str,
    build: Callable[..., Sequence[bytes]],
    load: Callable[[list[bytes]], T],
    *params: object,
) -> T:
    """``load(blobs)`` of the blobs ``build(*params)`` returns, built once per builder (its
    code) and params."""
    from .paths import data_dir

    digest = hashlib.sha256(marshal.dumps(build.__code__) + repr(params).encode()).hexdigest()
    try:
        path = data_dir() / "graphs" / f"{name}-{digest[:16]}.npz"
    except OSError:  # no data folder: build every time
        return load(list(build(*params)))
    try:
        with np.load(path) as kept:
            return load([kept[f"b{i}"].tobytes() for i in range(len(kept.files))])
    except FileNotFoundError:
        pass
    except Exception:  # damaged, or from elsewhere: build it again
        log.warning("rebuilding the cached graph %s", path.name, exc_info=True)
    blobs = list(build(*params))
    result = load(blobs)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        buf = io.BytesIO()
        np.savez(buf, **{f"b{i}": np.frombuffer(b, np.uint8) for i, b in enumerate(blobs)})
        write_atomic(path, buf.getvalue())
    except OSError:
        log.warning("cannot keep the graph %s", path, exc_info=True)
    return result
