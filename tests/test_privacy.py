"""What users record and write is readable by them only (POSIX modes), from the first run and
after an upgrade from a version that left folders open."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from deskscribe.audio.recorder import SessionRecorder
from deskscribe.library.db import Library
from deskscribe.paths import data_dir, sessions_dir
from deskscribe.service.live.health import Health, HealthLog
from deskscribe.transcript import Segment, Transcript
from skips import other_os

pytestmark = pytest.mark.skipif(os.name != "posix", reason=other_os("POSIX", "file modes"))


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def usual_umask():
    """The usual umask: without care, files would be 0644 and folders 0755."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def test_new_data_folder_sessions_and_library_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    root = data_dir()
    assert mode(root) == 0o700
    with SessionRecorder(chunk_seconds=1.0) as rec:
        health = HealthLog(rec.folder)
        health.write(Health())
        health.write_summary({"ok": True})
        health.close()
        rec.write("mic", np.full(24000, 0.1, np.float32))  # 1.5 s: one FLAC chunk, one raw
        rec.save_transcript({"segments": []})
        folder = rec.folder
        raw = sorted(folder.glob("*.pcm"))
        assert raw and all(mode(p) == 0o600 for p in raw)
    assert mode(folder) == 0o700
    assert mode(folder.parent) == 0o700, "sessions/ itself"
    assert {"health.jsonl", "health-summary.json"} <= {p.name for p in folder.iterdir()}
    files = [p for p in folder.iterdir() if p.is_file()]
    assert files and all(mode(p) & 0o077 == 0 for p in files), {p.name: oct(mode(p)) for p in files}

    lib = Library()
    item_id = lib.add_file(tmp_path / "talk.wav", {})
    saved = lib.save_transcript(item_id, Transcript([Segment(0, 1, " secret plans")]))
    assert mode(saved) == 0o600
    lib.save_transcript(item_id, Transcript([Segment(0, 1, " edited plans")]))  # replaced
    assert mode(saved) == 0o600
    assert mode(lib.path) == 0o600
    assert mode(lib.transcripts_dir) == 0o700
    assert mode(lib.path.parent) == 0o700


def test_an_open_data_folder_from_an_older_version_is_tightened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = tmp_path / "old-data"
    old.mkdir(mode=0o755)
    os.chmod(old, 0o755)
    (old / "sessions").mkdir(mode=0o755)
    os.chmod(old / "sessions", 0o755)
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(old))
    assert data_dir() == old
    assert mode(old) == 0o700
    assert mode(sessions_dir()) == 0o700
