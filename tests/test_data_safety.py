"""Errors that come after the work is done never throw the work away (issue: data safety).

Real model (tiny.en), real speech, real library and file system; the failures are real too:
a library whose transcripts folder cannot be created, an output folder that is a file, a
voice-profile file that is not UTF-8 or has a bad version.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import espeak, normalize, run_cli
from deskscribe.library.db import Library
from deskscribe.service.files import local_runner
from deskscribe.service.queue import run_queued_item
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
    outcome = run_queued_item(library, item, local_runner(lambda *_: tiny_model))
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


def _recorded_session(words: str) -> Path:
    import numpy as np

    from deskscribe.audio.recorder import SessionRecorder
    from deskscribe.transcript import Segment, Transcript

    with SessionRecorder(chunk_seconds=1.0, meta={"title": "Standup"}) as rec:
        rec.write("mic", np.full(24000, 0.05, np.float32))
        rec.save_transcript(Transcript([Segment(0.0, 1.5, " " + words)], duration=1.5).to_dict())
        return rec.folder


def test_a_stopped_session_the_library_never_got_is_offered_at_start(data: Path) -> None:
    """Stop's library save failed (or the session came from `deskscribe live`, or a restore
    was cut short): the recording is stopped, not interrupted, and still offered."""
    from deskscribe.audio.sessions import list_sessions
    from deskscribe.service.recovery import look_for_interrupted, restore_session

    folder = _recorded_session("the budget is approved")
    assert list_sessions()[0].state == "stopped"
    library = Library()
    try:
        offered = look_for_interrupted(library).sessions
        assert [s.folder for s in offered] == [folder]
        item = restore_session(library, offered[0])
        assert "budget" in library.load_transcript(item).segments[0].text
        assert look_for_interrupted(library).sessions == []  # in the library now: not again
    finally:
        library.close()


def test_sessions_recover_never_replaces_what_is_there(data: Path, tmp_path: Path) -> None:
    folder = _recorded_session("keep the autosave")
    autosaved = (folder / "transcript.json").read_bytes()
    for _ in range(2):
        r = run_cli(
            ["sessions", "recover", "latest", "--format", "json"],
            tmp_path / "store",
            DESKSCRIBE_DATA_DIR=str(data),
        )
        assert r.returncode == 0, r.stderr
    assert (folder / "transcript.json").read_bytes() == autosaved
    assert (folder / "transcript (2).json").is_file() and (folder / "transcript (3).json").is_file()
    assert (folder / "audio.flac").is_file() and (folder / "audio (2).flac").is_file()


def test_unreadable_settings_never_stop_the_app_nor_lose_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from deskscribe import settings

    path = tmp_path / "settings.json"
    monkeypatch.setenv(settings.ENV_FILE, str(path))
    path.write_bytes(b'{"language": "d\xe9"}')  # Latin-1, not UTF-8
    assert settings.load() == {}
    assert (tmp_path / "settings.json.broken").read_bytes() == b'{"language": "d\xe9"}'
    path.write_text('{"language": "de"}')
    path.chmod(0)
    if os.geteuid() != 0:  # root reads anything; elsewhere an unreadable file stays put
        assert settings.load() == {} and path.exists()
    path.chmod(0o600)
    assert settings.get("language") == "de"


def test_a_nul_in_the_library_search_finds_instead_of_failing(tmp_path: Path) -> None:
    from deskscribe.transcript import Segment, Transcript

    library = Library(tmp_path / "library.sqlite3")
    media = tmp_path / "board.wav"
    media.write_bytes(b"x")
    item = library.add_file(media, {})
    library.save_transcript(item, Transcript([Segment(0, 1, " the quarterly budget")]))
    assert [i.id for i in library.search("budget\x00")] == [item]
    assert [i.id for i in library.search("\x00")] == [i.id for i in library.search("")]
    library.close()


def test_a_crafted_ct2_file_is_a_checkpoint_error(tiny_ct2: Path, tmp_path: Path) -> None:
    """A shape that asks for terabytes, or bytes that are not a model, are reported as a
    damaged model file, not as MemoryError/struct.error/ValueError."""
    import struct

    from deskscribe.whisper.weights import CheckpointError, load_checkpoint

    def name(s: str) -> bytes:
        raw = s.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    folder = tmp_path / "crafted"
    folder.mkdir()
    for f in ("config.json", "tokenizer.json", "vocabulary.json"):
        if (tiny_ct2 / f).exists():
            (folder / f).symlink_to(tiny_ct2 / f)
    huge = struct.pack("<B", 2) + struct.pack("<2I", 1 << 20, 1 << 20) + struct.pack("<BI", 0, 16)
    header = struct.pack("<I", 6) + name("whisper") + struct.pack("<II", 1, 1)
    (folder / "model.bin").write_bytes(header + name("x") + huge + bytes(16))
    with pytest.raises(CheckpointError, match="does not match"):
        load_checkpoint(folder)
    (folder / "model.bin").write_bytes(header + b"\xff")  # cut inside a name
    with pytest.raises(CheckpointError):
        load_checkpoint(folder)


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe\x80 not utf-8", b'{"format": "deskscribe-voice-profiles", "version": "2"}'],
    ids=["not-utf8", "bad-version"],
)
def test_file_job_with_a_broken_profile_file_keeps_its_transcript(
    tiny_model, speaker_model: Path, speech_dir: Path, data: Path, tmp_path: Path, content: bytes
) -> None:
    from deskscribe.service.queue import job_options
    from deskscribe.speakers.encoder import SpeakerEncoder

    path = profiles_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    wav = espeak(SPOKEN, speech_dir / "rescue.wav")
    library = Library(tmp_path / "lib" / "library.sqlite3")
    try:
        item = library.add_file(wav, job_options("tiny.en", "en", "auto"))
        outcome = run_queued_item(
            library, item,
            local_runner(lambda *_: tiny_model, lambda _device: SpeakerEncoder(speaker_model)),
        )  # fmt: skip
        assert outcome.status == "done", outcome.error
        assert "transcript safe" in normalize(" ".join(s.text for s in outcome.transcript.segments))
        assert library.get(item).has_transcript
    finally:
        library.close()
    assert path.read_bytes() == content
