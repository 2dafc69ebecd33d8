"""What every layer shares about failure and progress: the error root, cancellation, progress.

- ``DeskScribeError`` is the root of every error DeskScribe raises on purpose. Its message is
  written for the user and says what to do ("… install one with `deskscribe models install
  tiny.en`"), so a front end (window, terminal, HTTP server) can show ``str(err)`` as it is.
  Classes keep a second, built-in base where callers relied on it (``ProfileError`` is still a
  ``ValueError``).
- ``Cancelled`` is the base of every "the user stopped it" exception: not a failure, nothing to
  report.
- ``EngineError``: the inference runtime (ONNX Runtime) failed while running a model. Its own
  exception types never leave ``whisper/`` and ``speakers/``.
- ``Progress``: the one shape of a progress callback.

This module imports nothing of DeskScribe's: every package may import it.
"""

from __future__ import annotations

from typing import Protocol


class DeskScribeError(Exception):
    """An error DeskScribe raises on purpose; ``str()`` is a message fit for the user."""


class ExtraMissing(DeskScribeError):
    """An optional part is not installed; the message says what to install."""

    def __init__(self, extra: str, needed_by: str) -> None:
        super().__init__(f'{needed_by} needs the {extra} extra: pip install "deskscribe[{extra}]"')


class Cancelled(DeskScribeError):
    """Long work stopped because the user (or the caller) asked; not a failure."""


class EngineError(DeskScribeError):
    """The inference runtime failed while running a model (out of memory, a GPU fault, a
    broken model file found only when it runs). The message is the runtime's own (callers
    put it after what failed, "the transcription engine failed (…)"); its exception is the
    ``__cause__``. Raised by ``whisper.runtime.engine_errors`` around every run of a Whisper
    or speaker model; MemoryError is not wrapped and reaches callers as itself."""


class Progress(Protocol):
    """``progress(done, total, stage="")``: ``done`` of ``total`` units (seconds of audio,
    bytes, fractions of 1.0; ``total`` <= 0 when unknown) of the named ``stage`` (e.g.
    "transcribe", "speakers", "download"; empty when the work has one stage)."""

    def __call__(self, done: float, total: float, stage: str = "") -> None: ...


def first_line(err: BaseException | str, limit: int = 300) -> str:
    """The first line of an error's text (its type's name when it has none), at most
    ``limit`` characters: what a one-line message can carry of a long native error."""
    text = str(err).strip()
    if not text and isinstance(err, BaseException):
        return type(err).__name__
    return text.splitlines()[0][:limit] if text else ""
