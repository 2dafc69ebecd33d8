"""Every failure of reading a media file that a user can act on: one class each, a message
that names the file and says what to do (``audio.decode`` raises them)."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import DeskScribeError

StrPath = str | os.PathLike[str]


class MediaError(DeskScribeError):
    """A media file cannot be transcribed; `str(err)` is a message fit for the user."""

    def __init__(self, path: StrPath, message: str) -> None:
        super().__init__(message)
        self.path = Path(path)


class MediaNotFoundError(MediaError):
    """The path does not exist or is a folder."""


class UnsupportedMediaError(MediaError):
    """Not a media file FFmpeg can read, or one too damaged to decode."""


class NoAudioStreamError(MediaError):
    """A readable media file without any audio track (e.g. a silent screen recording)."""


class EmptyMediaError(MediaError):
    """A zero-byte file, or one whose audio track holds no samples."""


class MediaTooLongError(MediaError):
    """More audio than ``max_seconds`` was decoded (the container's claim is not trusted)."""

    def __init__(self, path: StrPath, message: str, seconds: float, max_seconds: float) -> None:
        super().__init__(path, message)
        self.seconds, self.max_seconds = seconds, max_seconds


class MediaChangedError(MediaError):
    """The file changed (was truncated, rewritten or still growing) while it was read."""
