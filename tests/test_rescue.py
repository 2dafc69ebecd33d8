"""Errors that come after the work is done never throw the work away (issue: data safety).

Real model (tiny.en), real speech, real library and file system; the failures are real too:
a library whose transcripts folder cannot be created, an output folder that is a file, a
voice-profile file that is not UTF-8 or has a bad version.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import espeak, normalize, run_cli
from deskscribe.library.db import Library
from deskscribe.library.jobs import run_file_job
from deskscribe.speakers.profiles import ProfileError, list_profiles, profiles_path

SPOKEN = "Please keep this transcript safe even when the disk is full."


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def _rescued(data: Path) -> list[Path]:
    return sorted((data / "rescued").glob("*.json"))


def test_file_job_whose_library_cannot_save_keeps_the_transcript(
    tiny_model, speech_dir: Path, data: Path, tmp_path: Path
) -> None:
    wav = espeak(SPOKEN, speech_dir / "rescue.wav")
    library = Library(tmp_path / "lib" / "library.sqlite3")
    (tmp_path / "lib" / "transcripts").write_text("a file where the folder should be")
    item = library.add_file(wav, {})
    outcome = run_file_job(library, item, lambda _name: tiny_model)
    assert outcome.status == "failed"
    kept = _rescued(data)
    assert len(kept) == 1 and str(kept[0]) in outcome.error, outcome.error
    text = " ".join(s["text"] for s in json.loads(kept[0].read_text())["segments"])
    assert "transcript safe" in normalize(text)
    assert library.get(item).error == outcome.error  # the app shows where it is


def test_cli_export_that_fails_keeps_the_transcript(
    tiny_fp32: Path, speech_dir: Path, data: Path, tmp_path: Path
) -> None:
    wav = espeak(SPOKEN, speech_dir / "rescue.wav")
    blocked = tmp_path / "out"
    blocked.write_text("not a folder")
    r = run_cli(
        ["transcribe", str(wav), "--model", str(tiny_fp32), "--output-dir", str(blocked)],
        tmp_path / "store",
        DESKSCRIBE_DATA_DIR=str(data),
    )
    assert r.returncode == 1
    kept = _rescued(data)
    assert len(kept) == 1 and str(kept[0]) in r.stderr, r.stderr
    assert "the export failed" in r.stderr


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe not utf-8 \x80", b'{"format": "deskscribe-voice-profiles", "version": "two"}'],
    ids=["not-utf8", "bad-version"],
)
def test_a_broken_profile_file_is_a_profile_error(data: Path, content: bytes) -> None:
    """Callers (file jobs, the CLI, live Stop) catch ProfileError and keep the transcript;
    any other exception escaped them and threw the finished work away."""
    path = profiles_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    with pytest.raises(ProfileError, match="move the file away"):
        list_profiles()
    assert path.read_bytes() == content  # never overwritten
