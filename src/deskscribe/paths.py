"""Where DeskScribe keeps user data: ``$DESKSCRIBE_DATA_DIR`` or the platformdirs data folder."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_dir

from .fsutil import private_dir

ENV_DATA_DIR = "DESKSCRIBE_DATA_DIR"


def data_dir() -> Path:
    """The user data folder, created private (0700) and tightened if an older version left
    it open."""
    override = os.environ.get(ENV_DATA_DIR)
    if override:
        return private_dir(Path(override).expanduser())
    return private_dir(Path(user_data_dir("DeskScribe", appauthor=False)))


def sessions_dir() -> Path:
    """Live sessions: one folder each, holding the recorded audio and the transcript; private
    (0700), and tightened if an older version made it 0755."""
    return private_dir(data_dir() / "sessions")
