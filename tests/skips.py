"""The skips CI accepts: the allow-list (the one place it is kept; docs/testing.md explains it).

With ``CI=true`` in the environment a skipped test is a failure unless its reason matches an
entry below: a skip hides a regression as well as a missing tool, so in CI everything a test
needs (espeak-ng, PulseAudio, the bundle and the .deb, resemblyzer, a package of the ``test``
extra, root for a tmpfs, ...) must be there, and a test that cannot run fails. Without ``CI``
(a developer's machine) such tests still skip. Every run ends with the list of its skips, each
with its reason and whether this list allows it (``tests/conftest.py`` does both).

Only what CI cannot have by design is on the list:

``accelerator``
    A GPU execution provider (CUDA, DirectML, CoreML, ROCm, TensorRT), or the lack of one: the
    CI machine has no GPU, and a GPU machine cannot show the CPU fallback. Write the reason
    with ``gpu(...)``; it then starts with ``GPU:``.
``other OS``
    Code or behaviour of another operating system (Windows-only, macOS-only, POSIX-only or
    Linux-only): CI runs on Debian. Write the reason with ``other_os(system, ...)``; it then
    starts with ``<system> only:``. The entry allows the skip only on a machine that is *not*
    that system, so a Linux-only (or POSIX-only) test that skips on Linux CI still fails.

Anything else is a skip CI must not have. Adding an entry needs the same argument: CI cannot
have this, by design, and another run (the GPU bench, a Windows or macOS build) covers it.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

CI_VALUES = {"true", "1", "yes"}


def in_ci() -> bool:
    """``CI=true`` (or 1/yes) in the environment: skips off the allow-list fail."""
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


@dataclass(frozen=True)
class Allowed:
    name: str
    pattern: re.Pattern[str]
    why: str
    applies: Callable[[re.Match[str]], bool] = lambda match: True


# The systems ``other_os`` names, and how to tell that this machine is one of them.
SYSTEMS: dict[str, Callable[[], bool]] = {
    "Windows": lambda: sys.platform == "win32",
    "macOS": lambda: sys.platform == "darwin",
    "Linux": lambda: sys.platform.startswith("linux"),
    "POSIX": lambda: os.name == "posix",
}
PROVIDERS = ("GPU", "CUDA", "DirectML", "CoreML", "ROCm", "TensorRT")

ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        "accelerator",
        re.compile(rf"^({'|'.join(PROVIDERS)}):"),
        "a GPU execution provider (or its absence): CI has no GPU by design",
    ),
    Allowed(
        "other OS",
        re.compile(rf"^({'|'.join(SYSTEMS)}) only:"),
        "code of another operating system: CI runs on Debian",
        applies=lambda match: not SYSTEMS[match.group(1)](),
    ),
)


def gpu(what: str) -> str:
    """The reason for a skip about a GPU provider (allowed in CI): ``GPU: what``."""
    return f"GPU: {what}"


def other_os(system: str, what: str) -> str:
    """The reason for a skip of another system's code (allowed in CI when this machine is not
    ``system``): ``<system> only: what``."""
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; use one of {', '.join(SYSTEMS)}")
    return f"{system} only: {what}"


def allowed(reason: str) -> Allowed | None:
    """The allow-list entry that ``reason`` matches here, or None (then CI fails the test)."""
    reason = reason.removeprefix("Skipped: ").strip()
    for entry in ALLOWED:
        match = entry.pattern.match(reason)
        if match and entry.applies(match):
            return entry
    return None
