"""A finished transcript is never lost to an error that comes after the work.

When the library cannot store it (full disk, busy or damaged database) or an export fails,
the transcript is written to ``<data folder>/rescued/`` and the user is told where.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from ..fsutil import private_dir
from ..paths import data_dir
from ..transcript import Transcript
from ..transcript.export import export


def rescue_transcript(transcript: Transcript, source: str | Path | None) -> Path:
    """Write ``transcript`` as JSON under the data folder's ``rescued/``; returns the file.
    Raises OSError only when even that cannot be written."""
    folder = private_dir(data_dir() / "rescued")
    stem = Path(str(source)).stem if source else "transcript"
    name = f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}.json"
    target = folder / name
    export(transcript, target, "json", overwrite=False)
    return target


def rescue_note(transcript: Transcript, source: str | Path | None, why: str) -> str:
    """``why``, and where the transcript was kept (or that even that failed)."""
    try:
        return f"{why}; the transcript is kept in {rescue_transcript(transcript, source)}"
    except OSError as e:
        return f"{why}; it could not be kept elsewhere either ({e})"
