"""Small file-system helpers shared by everything that writes user or model files."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX); best effort, not possible on Windows."""
    if os.name != "posix":
        return
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


class UnsafePathError(ValueError):
    """A file name that came from outside (a hub listing, a checkpoint's index) would lead
    out of the folder it belongs in."""


def inside(root: Path, name: str, *, resolve: bool = True) -> Path:
    """``root / name`` for a relative file name from a model, a checkpoint or a hub; refused
    (``UnsafePathError``) when it is empty, absolute, has a drive, a ``..`` part or a
    backslash, or (``resolve``, for files we write) resolves through links outside ``root``.
    The one check for every such name: a hostile mirror listing ``model.bin.part1/../../x``
    must not write there. Readers pass ``resolve=False``: a Hugging Face cache snapshot is a
    folder of links into its blob store, and reading through them is what it is for."""
    parts = name.split("/")
    if (
        not name
        or name.startswith("/")
        or "\\" in name
        or ":" in parts[0]
        or any(p in ("", ".", "..") for p in parts)
    ):
        raise UnsafePathError(f"refusing the file name {name!r}: it leads out of {root}")
    target = Path(root, *parts)
    if resolve and not target.resolve().is_relative_to(Path(root).resolve()):
        raise UnsafePathError(f"refusing the file name {name!r}: it leads out of {root}")
    return target


def private_dir(path: Path) -> Path:
    """Create ``path`` (and missing parents) readable by this user only (0700 on POSIX), and
    tighten it when an older version left it open to others: recordings, transcripts and the
    library's full-text index must not be readable by other accounts on a shared computer."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if os.name == "posix":
        with contextlib.suppress(OSError):
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o700)
    return path
