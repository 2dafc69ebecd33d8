"""A guard against a reference-counting bug of PySide6 6.12 on CPython 3.11 and older.

Shiboken 6.12 returns ``None``, ``True`` and ``False`` from C++ calls without a new reference,
as if they were immortal (they are only since CPython 3.12). On older Pythons every void Qt
call drops one reference to ``None`` and every ``Signal.emit`` one to ``True``; after a few
thousand calls — minutes of a live session — the interpreter aborts with "deallocating None".
Giving the three singletons a reference count no run can use up makes them as immortal as
3.12 would; nothing else changes. (Measured in tests/test_gui_app.py.)
"""

from __future__ import annotations

import ctypes
import sys

_GUARD = 1 << 48  # references added: more than any process will ever drop


def needs_guard(pyside_version: str, python: tuple[int, int] = sys.version_info[:2]) -> bool:
    major, minor = (int(p) for p in pyside_version.split(".")[:2])
    return python < (3, 12) and (major, minor) >= (6, 12)


def guard_singletons() -> bool:
    """Apply the guard when this PySide6 and Python need it; True if it was applied."""
    import shiboken6

    if sys.implementation.name != "cpython" or not needs_guard(shiboken6.__version__):
        return False
    for obj in (None, True, False):
        # ob_refcnt is the first field of every object in CPython's release builds.
        ctypes.c_ssize_t.from_address(id(obj)).value += _GUARD
    return True
