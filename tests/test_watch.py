"""Watch folders (``service.watch``) with the real queue and tiny.en: a file copied in slowly
is transcribed once, after the copy ends; a restart does not run it again; a bad file fails
alone; a playlist dropped in reads nothing; and ``deskscribe watch`` does the same in its own
process, stopping with exit 0 on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import espeak, wer
from deskscribe.library import Library
from deskscribe.service.file_queue import FileQueue, Status
from deskscribe.service.files import local_runner
from deskscribe.service.models import ModelCache
from deskscribe.service.watch import FolderWatcher, WatchFolder

FOX = "The quick brown fox jumps over the lazy dog."
PLANTS = "Remember to water the plants on Sunday."


@pytest.fixture
def user(tmp_path, monkeypatch, tiny_fp32) -> Path:
    store = tmp_path / "models"
    store.mkdir()
    (store / "tiny.en-fp32").symlink_to(tiny_fp32, target_is_directory=True)
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(store))
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    return tmp_path


def slow_copy(src: Path, dst: Path, seconds: float, pieces: int = 10) -> float:
    """Copy ``src`` to ``dst`` in ``pieces`` writes spread over ``seconds`` (a copy from a
    slow drive, or a recorder still writing); the time the last byte went in."""
    data = src.read_bytes()
    step = -(-len(data) // pieces)
    with open(dst, "wb") as out:
        for i in range(0, len(data), step):
            out.write(data[i : i + step])
            out.flush()
            time.sleep(seconds / pieces)
    return time.monotonic()


def watch_until(watcher: FolderWatcher, queue: FileQueue, done, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the watch did not finish in time"
        watcher.poll()
        time.sleep(watcher.interval)


def test_a_slow_copy_is_transcribed_once_after_it_ends(user, speech_dir):
    inbox = user / "inbox"
    inbox.mkdir()
    library = Library()
    models = ModelCache()
    queue = FileQueue(library, local=local_runner(models.model)).start()
    folder = WatchFolder(inbox, formats=("txt", "srt"))
    handed: list[tuple[Path, float, int]] = []

    def hand_over(path: Path, f: WatchFolder) -> None:
        handed.append((path, time.monotonic(), path.stat().st_size))
        queue.add([path], f.options())

    state = user / "data" / "watch-state.json"
    watcher = FolderWatcher([folder], hand_over, state, interval=0.2, settle=1.0)
    try:
        source = espeak(FOX, speech_dir / "watch-fox.wav")
        ended: list[float] = []
        copy = threading.Thread(target=lambda: ended.append(
            slow_copy(source, inbox / "fox.wav", 5.0)))  # fmt: skip
        copy.start()
        watch_until(watcher, queue, lambda: not copy.is_alive() and queue.finished and handed)
        copy.join()
        assert len(handed) == 1, handed
        path, at, size = handed[0]
        assert path == inbox / "fox.wav"
        assert size == source.stat().st_size and at >= ended[0]  # whole, after the copy ended
        (entry,) = queue.entries()
        assert entry.status is Status.DONE, entry.error
        assert wer(FOX, (inbox / "fox.txt").read_text()) < 0.3
        assert (inbox / "fox.srt").exists()
        for _ in range(5):
            watcher.poll()
        assert len(handed) == 1  # polled again: not again
        # A restart (a new watcher on the same state) does not run it again either ...
        again = FolderWatcher([folder], hand_over, state, interval=0.2, settle=0.0)
        again.poll()
        again.poll()
        assert len(handed) == 1
        # ... but a new recording under the same name is new.
        os.utime(inbox / "fox.wav", ns=(time.time_ns(), time.time_ns() + 10**9))
        again.poll()
        again.poll()
        assert len(handed) == 2
    finally:
        queue.shutdown()


def test_a_bad_file_fails_alone_and_a_playlist_reads_nothing(user, speech_dir, tmp_path):
    inbox = user / "inbox"
    inbox.mkdir()
    secret = espeak("The vault code is seven four nine.", speech_dir / "watch-secret.wav")
    (inbox / "notes.mp3").write_text("not audio at all\n" * 40)
    (inbox / "talk.m3u8").write_text(f"#EXTM3U\n#EXTINF:3,\n{secret}\n#EXT-X-ENDLIST\n")
    (inbox / "talk.mp3").write_bytes(b"")  # an empty file is never taken
    espeak(PLANTS, inbox / "plants.wav")
    library = Library()
    models = ModelCache()
    queue = FileQueue(library, local=local_runner(models.model)).start()
    folder = WatchFolder(inbox)
    watcher = FolderWatcher([folder], lambda p, f: queue.add([p], f.options()),
                            user / "data" / "watch-state.json", interval=0.2, settle=0.4)  # fmt: skip
    try:
        watch_until(watcher, queue, lambda: len(queue.entries()) == 2 and queue.finished)
        rows = {e.path.name: e for e in queue.entries()}
        assert set(rows) == {"notes.mp3", "plants.wav"}  # .m3u8 is not a media file name
        assert rows["notes.mp3"].status is Status.FAILED
        assert rows["plants.wav"].status is Status.DONE
        assert wer(PLANTS, (inbox / "plants.txt").read_text()) < 0.3
        # The same playlist under a media name: decoded as untrusted media, so refused.
        (inbox / "sneaky.mp3").write_text((inbox / "talk.m3u8").read_text())
        watch_until(watcher, queue, lambda: len(queue.entries()) == 3 and queue.finished)
        sneaky = next(e for e in queue.entries() if e.path.name == "sneaky.mp3")
        assert sneaky.status is Status.FAILED and "749" not in (sneaky.error or "")
        assert not (inbox / "sneaky.txt").exists()
    finally:
        queue.shutdown()


def test_deskscribe_watch_in_its_own_process_stops_cleanly_on_sigterm(user, speech_dir):
    inbox, out = user / "inbox", user / "out"
    inbox.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "deskscribe", "watch", str(inbox), "--format", "txt",
         "--output-dir", str(out), "--interval", "0.3", "--settle", "0.6"],
        env=os.environ.copy(), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        slow_copy(espeak(FOX, speech_dir / "watch-cli-fox.wav"), inbox / "fox.wav", 2.0, 4)
        deadline = time.monotonic() + 120
        while not (out / "fox.txt").exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "deskscribe watch wrote nothing"
            time.sleep(0.2)
        assert wer(FOX, (out / "fox.txt").read_text()) < 0.3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        said = proc.stderr.read()
        assert "fox.wav: done" in said, said
    finally:
        if proc.poll() is None:
            proc.kill()
    library = Library()
    (item,) = library.search(kind="file")
    assert item.status == "done" and Path(item.source).name == "fox.wav"
