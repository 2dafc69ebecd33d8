"""The library (SQLite history of sessions and file jobs): schema upgrades, search, delete,
unfinished jobs, skipping done files, transcripts that survive edits; driven through its API as
the GUI and CLI drive it."""

from __future__ import annotations

import json
import sqlite3
import threading
from datetime import datetime
from pathlib import Path

import pytest

from deskscribe.library import ItemNotFoundError, Library, LibraryError, migrations
from deskscribe.library.migrations import LATEST
from deskscribe.transcript import Segment, Transcript

# The schema of the first release (user_version 1), frozen here as that version wrote it:
# a library made by it must open, keep its items and become searchable.
SCHEMA_V1 = """
CREATE TABLE items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('live', 'file')),
    title TEXT NOT NULL, source TEXT NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL,
    duration REAL, status TEXT NOT NULL DEFAULT 'queued', progress REAL NOT NULL DEFAULT 0,
    error TEXT, transcript_path TEXT, options TEXT NOT NULL DEFAULT '{}',
    options_key TEXT NOT NULL DEFAULT '{}', file_size INTEGER, file_mtime REAL
);
CREATE INDEX items_created ON items (created);
CREATE INDEX items_source ON items (source, status);
PRAGMA user_version = 1;
"""


def transcript(*texts: str, speakers: tuple[str | None, ...] = ()) -> Transcript:
    segs = [
        Segment(start=2.0 * i, end=2.0 * i + 1.5, text=" " + t, id=i,
                speaker=speakers[i] if i < len(speakers) else None)
        for i, t in enumerate(texts)
    ]  # fmt: skip
    return Transcript(segments=segs, language="en", duration=2.0 * len(texts))


@pytest.fixture(params=["fts5", "like"])
def lib(request, tmp_path: Path, monkeypatch) -> Library:
    """Both search back ends: FTS5, and LIKE for SQLite builds without it."""
    if request.param == "like":
        monkeypatch.setattr(migrations, "has_fts5", lambda db: False)
    library = Library(tmp_path / "data" / "library.sqlite3")
    yield library
    library.close()


@pytest.fixture
def media(tmp_path: Path) -> Path:
    """Stand-ins for media files: the library only looks at their names, sizes and times."""
    folder = tmp_path / "media"
    folder.mkdir()
    for name in ("interview.mp3", "lecture.m4a", "call.wav"):
        (folder / name).write_bytes(name.encode() * 100)
    return folder


def test_upgrade_from_first_schema_keeps_items_and_makes_them_searchable(tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    old_transcript = data / "old.json"
    old_transcript.write_text(transcript("The quarterly budget was approved.").to_json())
    db = sqlite3.connect(data / "library.sqlite3")
    db.executescript(SCHEMA_V1)
    db.execute(
        "INSERT INTO items (kind, title, source, created, updated, duration, status, progress, "
        "transcript_path, options, options_key) VALUES "
        "('file', 'board meeting', '/recordings/board.mp3', '2024-05-01T10:00:00+00:00', "
        "'2024-05-01T10:05:00+00:00', 3600, 'done', 1, ?, '{\"model\": \"tiny.en\"}', "
        '\'{"model":"tiny.en"}\')',
        (str(old_transcript),),
    )
    db.commit()
    db.close()

    lib = Library(data / "library.sqlite3")
    assert lib.schema_version == LATEST
    [item] = lib.search()
    assert (item.title, item.status, item.duration) == ("board meeting", "done", 3600)
    assert item.options == {"model": "tiny.en"}
    assert item.created == datetime.fromisoformat("2024-05-01T10:00:00+00:00")
    assert [i.id for i in lib.search("budget")] == [item.id]  # text from before the upgrade
    assert [i.id for i in lib.search("board.mp3")] == [item.id]  # by source file name
    assert lib.load_transcript(item.id).text == "The quarterly budget was approved."
    lib.close()
    # Opening again runs nothing twice.
    again = Library(data / "library.sqlite3")
    assert again.schema_version == LATEST and len(again.search()) == 1
    again.close()


def test_a_library_from_a_newer_version_is_refused_untouched(tmp_path: Path):
    path = tmp_path / "library.sqlite3"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {LATEST + 1}")
    db.close()
    with pytest.raises(LibraryError, match="newer version of DeskScribe"):
        Library(path)
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == LATEST + 1


def test_a_file_that_is_not_a_database_gets_a_clear_error(tmp_path: Path):
    path = tmp_path / "library.sqlite3"
    path.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(LibraryError, match="cannot be opened"):
        Library(path)


def test_search_by_title_source_and_transcript_words(lib: Library, media: Path, tmp_path: Path):
    a = lib.add_file(media / "interview.mp3", {"model": "tiny.en"})
    b = lib.add_file(media / "lecture.m4a", {"model": "tiny.en"})
    lib.save_transcript(a, transcript("We talked about photosynthesis and chlorophyll."))
    lib.save_transcript(b, transcript("Entropy always increases in a closed system."))
    session = tmp_path / "sessions" / "20240501-100000-abcd"
    session.mkdir(parents=True)
    (session / "transcript.json").write_text(
        transcript("Standup: the release ships Friday.").to_json()
    )
    c = lib.add_live_session(session, "Team standup", duration=600.0)

    assert [i.id for i in lib.search()] == [c, b, a]  # newest first
    assert [i.id for i in lib.search("chlorophyll")] == [a]
    assert [i.id for i in lib.search("photo")] == [a]  # prefixes match
    assert [i.id for i in lib.search("ENTROPY closed")] == [b]  # every word, any case
    assert lib.search("entropy chlorophyll") == []
    assert [i.id for i in lib.search("lecture")] == [b]  # the file's name
    assert [i.id for i in lib.search("friday")] == [c]  # a live session's own transcript
    assert [i.id for i in lib.search("standup", kind="live")] == [c]
    assert lib.search("standup", kind="file") == []
    assert lib.search('"; DROP TABLE items; --') == []  # search text is data, never SQL

    lib.update(a, title="Biology interview")
    assert [i.id for i in lib.search("biology")] == [a]
    lib.save_transcript(a, transcript("Now about mitochondria."))  # an edit re-indexes
    assert lib.search("chlorophyll") == []
    assert [i.id for i in lib.search("mitochondria")] == [a]


def test_adding_the_same_live_session_twice_keeps_one_item(lib: Library, tmp_path: Path):
    folder = tmp_path / "sessions" / "s1"
    folder.mkdir(parents=True)
    first = lib.add_live_session(folder, "Call", duration=12.0)
    assert lib.add_live_session(folder, "Call again") == first
    assert len(lib.search()) == 1


def test_delete_removes_item_and_our_copy_of_the_transcript_but_never_user_media(
    lib: Library, media: Path, tmp_path: Path
):
    a = lib.add_file(media / "interview.mp3", {})
    saved = lib.save_transcript(a, transcript("Delete me please."))
    lib.delete(a, delete_files=True)
    assert lib.search() == [] and lib.search("please") == []
    assert not saved.exists()
    assert (media / "interview.mp3").exists()  # the user's file stays
    with pytest.raises(ItemNotFoundError):
        lib.get(a)

    folder = tmp_path / "sessions" / "s2"
    folder.mkdir(parents=True)
    (folder / "mic-000000.flac").write_bytes(b"audio")
    kept = lib.add_live_session(folder, "Keep audio")
    lib.delete(kept)  # without delete_files the recording stays
    assert folder.exists()
    gone = lib.add_live_session(folder, "Remove audio")
    lib.delete(gone, delete_files=True)
    assert not folder.exists()


def test_unfinished_jobs_are_the_queued_and_the_interrupted(lib: Library, media: Path):
    ids = [lib.add_file(media / n, {}) for n in ("interview.mp3", "lecture.m4a", "call.wav")]
    lib.update(ids[0], status="done", progress=1.0)
    lib.update(ids[1], status="running", progress=0.4)  # the app died while this ran
    assert [i.id for i in lib.unfinished_jobs()] == [ids[1], ids[2]]
    lib.update(ids[2], status="failed", error="'call.wav' is damaged")
    assert [i.id for i in lib.unfinished_jobs()] == [ids[1]]
    assert lib.get(ids[2]).error == "'call.wav' is damaged"
    with pytest.raises(ValueError, match="unknown status"):
        lib.update(ids[1], status="exploded")


def test_find_done_skips_only_the_same_unchanged_file_with_the_same_options(
    lib: Library, media: Path
):
    path = media / "interview.mp3"
    opts = {"model": "tiny.en", "language": None, "speakers": "auto"}
    item = lib.add_file(path, opts)
    assert lib.find_done(path, opts) is None  # queued, not done
    lib.save_transcript(item, transcript("Hello."))
    lib.update(item, status="done")
    assert lib.find_done(path, dict(reversed(opts.items()))).id == item  # key order is no matter
    assert lib.find_done(path, {**opts, "model": "base"}) is None
    assert lib.find_done(media / "lecture.m4a", opts) is None
    Path(lib.get(item).transcript_path).unlink()  # transcript lost: transcribe again
    assert lib.find_done(path, opts) is None
    lib.save_transcript(item, transcript("Hello."))
    path.write_bytes(b"a new recording with the same name")
    assert lib.find_done(path, opts) is None  # the file changed


def test_transcript_edits_are_atomic_and_survive_reopening(lib: Library, media: Path):
    a = lib.add_file(media / "call.wav", {})
    with pytest.raises(LibraryError, match="no transcript yet"):
        lib.load_transcript(a)
    t = transcript("first version", "second line", speakers=("S1", "S2"))
    lib.save_transcript(a, t)
    t.segments[0].text = " edited by the user"
    t.speakers["S1"] = "Alice"
    lib.save_transcript(a, t)
    assert not list(lib.transcripts_dir.glob(".*.tmp"))  # no temp files left behind
    reopened = Library(lib.path)
    loaded = reopened.load_transcript(a)
    assert loaded == t and loaded.speaker_name("S1") == "Alice"
    reopened.close()
    Path(lib.get(a).transcript_path).write_text("{ truncated")
    with pytest.raises(LibraryError, match="cannot be read"):
        lib.load_transcript(a)


def test_threads_write_progress_while_another_reads(lib: Library, media: Path):
    """The queue's worker thread writes progress while the UI thread lists and searches."""
    ids = [lib.add_file(media / "interview.mp3", {"n": n}) for n in range(4)]
    errors: list[BaseException] = []

    def work(item_id: int) -> None:
        try:
            for step in range(50):
                lib.update(item_id, status="running", progress=step / 50)
            lib.update(item_id, status="done", progress=1.0)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        assert len(lib.search("interview")) == 4
    for t in threads:
        t.join()
    assert errors == []
    assert {lib.get(i).status for i in ids} == {"done"}


def test_options_are_kept_as_json(lib: Library, media: Path):
    a = lib.add_file(media / "call.wav", {"model": "base", "formats": ["srt", "txt"]})
    assert lib.get(a).options == {"model": "base", "formats": ["srt", "txt"]}
    raw = sqlite3.connect(lib.path).execute("SELECT options FROM items").fetchone()[0]
    assert json.loads(raw)["formats"] == ["srt", "txt"]


def test_a_new_library_never_overwrites_or_deletes_the_old_ones_transcripts(tmp_path: Path):
    """The user moves a damaged library aside (as its error message says); the new one starts
    its ids at 1 again, and the old transcripts beside it stay exactly as they were."""
    media = tmp_path / "talk.wav"
    media.write_bytes(b"x" * 100)
    old = Library(tmp_path / "data" / "library.sqlite3")
    first = old.add_file(media, {})
    old_file = old.save_transcript(first, transcript("The old meeting about the budget."))
    old_bytes = old_file.read_bytes()
    old.close()
    (tmp_path / "data" / "library.sqlite3").rename(tmp_path / "data" / "library.damaged")
    for extra in ("-wal", "-shm"):
        (tmp_path / "data" / f"library.sqlite3{extra}").unlink(missing_ok=True)

    new = Library(tmp_path / "data" / "library.sqlite3")
    again = new.add_file(media, {})
    assert again == first  # the id repeats ...
    new_file = new.save_transcript(again, transcript("A new meeting."))
    assert new_file != old_file and old_file.read_bytes() == old_bytes  # ... the file does not
    assert new.save_transcript(again, transcript("An edit.")) == new_file  # its own is reused
    new.delete(again)
    assert old_file.read_bytes() == old_bytes and not new_file.exists()
