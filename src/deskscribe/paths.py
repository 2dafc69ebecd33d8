"""Where DeskScribe keeps user data: ``$DESKSCRIBE_DATA_DIR`` or the platformdirs data folder."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_dir

ENV_DATA_DIR = "DESKSCRIBE_DATA_DIR"


def data_dir() -> Path:
    override = os.environ.get(ENV_DATA_DIR)
    if override:
        return Path(override).expanduser()
    return Path(user_data_dir("DeskScribe", appauthor=False))


def sessions_dir() -> Path:
    """Live sessions: one folder each, holding the recorded audio and the transcript."""
    return data_dir() / "sessions"
