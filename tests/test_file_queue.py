"""The file queue as a service (``service.file_queue.FileQueue``), with no Qt: real tiny.en,
real media files, a real library; jobs in this process (``service.files.local_runner``), or
in the engine process where the test is about the process. Cancel, retry and remove through
its API; files waiting for a model start by themselves once one is installed; a queue killed
with SIGKILL resumes from the library."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import espeak, load, wer
from deskscribe.library import Library
from deskscribe.service.file_queue import FileQueue, QueueChanged, Status
from deskscribe.service.files import local_runner
from deskscribe.service.models import ModelCache
from deskscribe.service.queue import job_options
from media import pick_encoder, write_media

FOX = "The quick brown fox jumps over the lazy dog."
STORY = (
    "The meeting began with a short review of last week's numbers, which were better than "
    "expected. After that the team talked about the new office and the move in spring."
)


@pytest.fixture(scope="module")
def files(tmp_path_factory, speech_dir) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("queue-media")
    fox = espeak(FOX, speech_dir / "queue-fox.wav")
    story = load(espeak(STORY, speech_dir / "queue-story.wav"))
    gap = np.zeros(8000, np.float32)
    # About 2 minutes. (tiny.en garbles espeak's first sentence here, so texts are checked
    # at WER < 0.45: a wrong or missing transcript is far above that.)
    long = np.concatenate([x for _ in range(8) for x in (story, gap)])
    mp3 = pick_encoder("libmp3lame", "mp3")
    story_mp3 = write_media(folder / "story.mp3", long[None, :], rate=16000, codec=mp3)
    notes = folder / "notes.mp3"
    notes.write_text("meeting notes, not audio\n" * 50)
    return {"fox": fox, "story": story_mp3, "notes": notes}


@pytest.fixture
def store(tmp_path, monkeypatch, tiny_fp32) -> Path:
    """An isolated user with tiny.en installed."""
    store = tmp_path / "models"
    store.mkdir()
    (store / "tiny.en-fp32").symlink_to(tiny_fp32, target_is_directory=True)
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(store))
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    return store


def in_process(models: ModelCache | None = None) -> dict:
    models = models or ModelCache()
    return {"local": local_runner(models.model, models.speaker_encoder)}


def wait_for(predicate, timeout: float = 120.0, what: str = "") -> None:
    done = threading.Event()
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        done.wait(0.05)


def test_cancel_retry_and_remove_through_the_service_api(store, tmp_path, files):
    library = Library(tmp_path / "library.sqlite3")
    queue = FileQueue(library, **in_process()).start()
    events: list[QueueChanged] = []
    queue.subscribe(events.append)
    try:
        options = job_options("tiny.en-fp32", None, "off")
        story, fox, notes = (q.item_id for q in queue.add(
            [files["story"], files["fox"], files["notes"]], options))  # fmt: skip
        assert queue.entry(notes).status is Status.FAILED  # not media: failed at once, alone
        assert "notes.mp3" in queue.entry(notes).error
        wait_for(lambda: queue.entry(story).progress > 0.1, what="progress on the long file")
        queue.remove([fox])  # waiting: gone from the queue and the library
        assert queue.entry(fox) is None
        assert all(i.id != fox for i in library.search(kind="file"))
        queue.cancel([story])
        wait_for(lambda: queue.entry(story).status is Status.CANCELLED, what="the cancel")
        assert library.get(story).status == "cancelled"
        assert any(e.outcome is not None and e.outcome.status == "cancelled" for e in events)
        queue.retry([story])
        assert queue.wait_until_finished(300)
        assert queue.entry(story).status is Status.DONE
        assert wer(" ".join([STORY] * 8), library.load_transcript(story).text) < 0.45
        queue.clear_finished()
        assert [e.item_id for e in queue.entries()] == [notes]  # the failed one stays
        assert any(story in e.ids and e.progress for e in events)  # progress was notified
        # A retry that fails at once still ends with the queue saying it is finished, once,
        # after the file's outcome (a window reading the queue later never sees it busy).
        said = sum(e.finished for e in events)
        queue.retry([notes])
        wait_for(lambda: sum(e.finished for e in events) == said + 1, what="finished")
        last = [i for i, e in enumerate(events) if e.outcome and e.outcome.item_id == notes]
        assert max(i for i, e in enumerate(events) if e.finished) > last[-1]
        assert queue.entry(notes).status is Status.FAILED
    finally:
        queue.shutdown()


def test_files_wait_for_a_model_and_start_when_one_is_installed(tmp_path, monkeypatch, files,
                                                                tiny_fp32):  # fmt: skip
    store = tmp_path / "models"
    store.mkdir()
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(store))
    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    library = Library(tmp_path / "library.sqlite3")
    queue = FileQueue(library, **in_process()).start()
    events: list[QueueChanged] = []
    queue.subscribe(events.append)
    try:
        (item,) = (q.item_id for q in queue.add([files["fox"]], job_options(None, None, "off")))
        wait_for(lambda: queue.entry(item).status is Status.WAITING, what="waiting")
        assert "install one" in queue.entry(item).error
        assert not any(e.finished for e in events)  # a file waiting is not finished
        assert library.get(item).status == "queued"  # in the library it is still queued
        (store / "tiny.en-fp32").symlink_to(tiny_fp32, target_is_directory=True)
        queue.models_changed()  # what the Models page's install says when it is done
        assert queue.wait_until_finished(120)
        assert queue.entry(item).status is Status.DONE
        wait_for(lambda: any(e.finished for e in events), what="finished")
        assert wer(FOX, library.load_transcript(item).text) < 0.3
    finally:
        queue.shutdown()


KILLED = textwrap.dedent("""
    import sys, time
    from deskscribe.library import Library
    from deskscribe.service.file_queue import FileQueue
    from deskscribe.service.queue import job_options

    library = Library(sys.argv[1])
    queue = FileQueue(library).start()  # jobs in the engine process, as in the window
    queue.add([sys.argv[2]], job_options("tiny.en-fp32", None, "off"))
    while True:
        time.sleep(1)
""")


def test_a_queue_killed_mid_job_resumes_from_the_library(store, tmp_path, files):
    db = tmp_path / "library.sqlite3"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(db), str(files["story"])],
                            env=os.environ.copy())  # fmt: skip
    try:
        library = Library(db)
        wait_for(lambda: db.exists() and any(i.progress > 0.05
                                             for i in library.unfinished_jobs()),
                 what="the job under way in the killed queue")  # fmt: skip
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (left,) = library.unfinished_jobs()
    assert left.status == "running"
    queue = FileQueue(library, **in_process()).start()
    try:
        assert [i.id for i in queue.recover()] == [left.id]
        assert queue.wait_until_finished(300)
        assert queue.entry(left.id).status is Status.DONE
        assert library.unfinished_jobs() == []
        assert wer(" ".join([STORY] * 8), library.load_transcript(left.id).text) < 0.45
    finally:
        queue.shutdown()
