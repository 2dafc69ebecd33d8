"""Small file-system helpers shared by everything that writes user or model files."""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .errors import DeskScribeError


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


def write_atomic(
    path: Path, data: bytes | str, *, private: bool = True, replace: bool = True
) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` through ``atomic_file``: readers see the
    old file or the new one, never a mix, and a crash leaves no half-written file."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_file(path, private=private, replace=replace) as tmp, open(tmp, "wb") as fh:
        fh.write(data)


@contextmanager
def atomic_file(path: Path, *, private: bool = True, replace: bool = True) -> Iterator[Path]:
    """A temp file beside ``path`` for the block to write (by name, e.g. an encoder's
    output). When the block ends it is fsync'd and renamed onto ``path``, then the folder is
    fsync'd; when the block fails, the temp file is removed and ``path`` is untouched.

    ``private``: readable by this user only (0600): recordings, transcripts, settings, voice
    profiles. Otherwise the mode a new file gets here (the umask's), or the replaced file's.
    ``replace=False``: never replace an existing file, even one created since the caller
    looked (``FileExistsError``): the file is placed by a hard link, which fails if the name
    is taken; where the file system has no links, by check-then-rename.
    On Windows a rename onto a file that a reader holds open is retried for a second.
    """
    path = Path(path)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # Reopened writable: Windows fsyncs writable handles only.
        fd = os.open(tmp, os.O_RDWR | getattr(os, "O_BINARY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        if not private:
            _public_mode(tmp, path if replace else None)
        if replace:
            _replace(tmp, path)
        else:
            _place_new(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    fsync_dir(path.parent)


def _replace(tmp: Path, path: Path) -> None:
    for attempt in range(50):
        try:
            os.replace(tmp, path)
            return
        except PermissionError:  # Windows: a reader has the old file open for a moment
            if os.name != "nt" or attempt == 49:
                raise
            time.sleep(0.02)


def _place_new(tmp: Path, path: Path) -> None:
    """Move ``tmp`` to ``path`` only if ``path`` does not exist, atomically where possible."""
    try:
        os.link(tmp, path)  # fails if path exists, even if created since the caller's check
    except FileExistsError:
        raise
    except OSError:
        # No hard links here (FAT, some network shares): check-then-rename is the best we have.
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
        _replace(tmp, path)


def _public_mode(tmp: Path, existing: Path | None) -> None:
    """mkstemp makes 0600 files; give ``tmp`` the mode a normal new (or replaced) file has."""
    if os.name != "posix":
        return
    try:
        mode = existing.stat().st_mode & 0o7777 if existing is not None else None
    except OSError:
        mode = None
    if mode is None:
        mode = 0o666 & ~_umask()
    with contextlib.suppress(OSError):
        os.chmod(tmp, mode)


def _umask() -> int:
    try:  # Linux: read it without changing it (changing it is process-wide)
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    current = os.umask(0o022)
    os.umask(current)
    return current


class UnsafePathError(DeskScribeError, ValueError):
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


def private_dir(path: Path, *, tighten: bool = True) -> Path:
    """Create ``path`` and every missing parent readable by this user only (0700 on POSIX);
    with ``tighten``, also tighten ``path`` when an older version left it open to others:
    recordings, transcripts and the library's full-text index must not be readable by other
    accounts on a shared computer. ``tighten=False`` leaves an existing folder's mode alone
    (one the user chose, e.g. a server's ``--data-dir``)."""
    missing = []
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for folder in reversed(missing):  # mkdir(parents=True) would make the parents 0755
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
    if not path.is_dir():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)  # raises the reason
    if tighten and os.name == "posix":
        with contextlib.suppress(OSError):
            if path.stat().st_mode & 0o077:
                os.chmod(path, 0o700)
    return path


def unique_path(path: Path) -> Path:
    """``path``, or ``name (2).ext``, ``name (3).ext``, … if it exists: never overwrite."""
    if not path.exists():
        return path
    n = 2
    while (candidate := path.with_name(f"{path.stem} ({n}){path.suffix}")).exists():
        n += 1
    return candidate


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """The SHA-256 of a file as hex, read in ``chunk``-byte blocks (model files are GBs)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()
