"""The Files page, driven as a user drives it: files dropped on the real window (offscreen),
the real tiny.en model in the engine process, real media files made with espeak-ng and PyAV,
real SQLite."""

from __future__ import annotations

import os
import signal

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.register_assert_rewrite("files_support")
pytest_plugins = ["files_support"]  # fixtures: media, ctx, window, with_speakers

from PySide6.QtCore import Qt  # noqa: E402

from conftest import load, wer  # noqa: E402
from deskscribe.gui.queue_model import PROGRESS, STATUS  # noqa: E402
from deskscribe.library import ItemNotFoundError, Library  # noqa: E402
from files_support import FOX, PLANTS, STORY, run_queue, status_cell  # noqa: E402
from gui_support import UiLag  # noqa: E402

# --------------------------------------------------------------------------- the queue


def test_drop_two_files_and_a_broken_one_on_the_window(qtbot, window, ctx, media):
    win, files, _view, _lib = window
    rows = run_queue(qtbot, files, [media["fox"], media["broken"], media["plants"]], target=win)

    assert [rows[n].status for n in ("fox.mp3", "broken.mp3", "plants.m4a")] == [
        "done", "failed", "done"]  # fmt: skip
    reason = status_cell(files, "broken.mp3")
    assert reason.startswith("Failed: ") and "not an audio or video file" in reason
    assert "broken.mp3" in reason
    assert files.summary.text() == "Queue finished: 2 done, 1 failed."
    for name, text in (("fox.mp3", FOX), ("plants.m4a", PLANTS)):
        transcript = ctx.library.load_transcript(rows[name].item_id)
        assert wer(text, transcript.text) <= 0.25, transcript.text
        assert status_cell(files, name) == "Done"
        assert rows[name].duration == pytest.approx(load_seconds(media, name), abs=0.2)
    assert ctx.library.get(rows["broken.mp3"].item_id).status == "failed"
    files.select(rows["broken.mp3"].item_id)  # the whole reason, below the table
    assert (
        files.details.isVisible()
        and files.details.text() == f"broken.mp3: {rows['broken.mp3'].error}"
    )
    assert "Try opening it in a media player" in files.details.text()
    # Retry of the broken file fails again with the same reason, and the queue ends again.
    files.select(rows["broken.mp3"].item_id)
    with qtbot.waitSignal(files.queue_finished, timeout=60_000):
        files.retry_selected()
    assert status_cell(files, "broken.mp3") == reason
    # Remove (the button): the failed file leaves the queue and the library; a done one
    # leaves the queue only, its transcript stays in the library.
    files.select(rows["broken.mp3"].item_id)
    qtbot.mouseClick(files.remove_button, Qt.MouseButton.LeftButton)
    files.select(rows["fox.mp3"].item_id)
    qtbot.mouseClick(files.remove_button, Qt.MouseButton.LeftButton)
    assert [r.path.name for r in files.queue.rows] == ["plants.m4a"]
    assert ctx.library.get(rows["fox.mp3"].item_id).status == "done"
    with pytest.raises(ItemNotFoundError):
        ctx.library.get(rows["broken.mp3"].item_id)


def load_seconds(media, name: str) -> float:
    path = next(p for p in media.values() if p.name == name)
    return len(load(path)) / 16000


def test_a_truncated_file_keeps_what_can_be_read_and_folders_are_searched(
    qtbot, window, ctx, media, tmp_path
):
    _win, files, _view, _lib = window
    folder = tmp_path / "inbox"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "story-cut.mp3").write_bytes(media["truncated"].read_bytes())
    (folder / "notes.txt").write_text("not media, not queued")
    rows = run_queue(qtbot, files, [folder], target=_win)  # the folder dropped on the window
    assert list(rows) == ["story-cut.mp3"]
    row = rows["story-cut.mp3"]
    assert row.status == "done", row.error
    transcript = ctx.library.load_transcript(row.item_id)
    words = len(" ".join(STORY[:2]).split())
    assert wer(" ".join(STORY[:2]), " ".join(transcript.text.split()[:words])) <= 0.3
    # Text up to where the file was cut, none after it.
    half = len(load(media["story"])) / 16000 / 2
    assert half - 12 < transcript.segments[-1].end < half + 2


def test_done_files_are_skipped_unless_asked(qtbot, window, ctx, media):
    _win, files, _view, _lib = window
    first = run_queue(qtbot, files, [media["fox"]])["fox.mp3"]
    assert first.status == "done"
    files.clear_finished()
    again = run_queue(qtbot, files, [media["fox"]])["fox.mp3"]
    assert again.status == "skipped" and again.item_id == first.item_id
    assert status_cell(files, "fox.mp3") == "Already transcribed"
    assert len(ctx.library.search(kind="file")) == 1
    files.clear_finished()
    files.options.redo.setChecked(True)
    redone = run_queue(qtbot, files, [media["fox"]])["fox.mp3"]
    assert redone.status == "done" and redone.item_id != first.item_id
    assert len(ctx.library.search(kind="file")) == 2


def test_ui_stays_responsive_with_eta_and_cancel_while_transcribing(qtbot, window, ctx, media):
    """The UI thread is never blocked > 100 ms while a real transcription runs (`UiLag`: the
    gaps of a 10 ms timer, less the time the OS kept the ready thread off every CPU). The row
    shows progress with time left, and Cancel stops the job."""
    _win, files, _view, _lib = window
    seen_eta: list[str] = []

    def eta() -> None:
        row = files.queue.rows[0] if files.queue.rows else None
        if row is not None and row.status == "running" and "left" in row.progress_text:
            seen_eta.append(files.queue.data(files.queue.index(0, PROGRESS)))

    lag = UiLag(lambda: files.queue.rows[0].progress_text if files.queue.rows else "", eta)
    with qtbot.waitSignal(files.queue_finished, timeout=300_000):
        files.add_paths([media["story"]])
        lag.start()
    lag.stop()
    lag.check()
    row = files.queue.rows[0]
    assert row.status == "done", row.error
    assert seen_eta and seen_eta[-1].endswith("left"), seen_eta[-3:]
    assert wer(" ".join(STORY * 3), ctx.library.load_transcript(row.item_id).text) <= 0.25

    # Again with "transcribe again", cancelled half way: the row says so, Retry finishes it.
    files.options.redo.setChecked(True)
    files.add_paths([media["story"]])
    qtbot.waitUntil(lambda: len(files.queue.rows) == 2 and files.queue.rows[1].progress > 0.2,
                    timeout=120_000)  # fmt: skip
    job = files.queue.rows[1]
    files.select(job.item_id)
    with qtbot.waitSignal(files.queue_finished, timeout=60_000):
        files.cancel_selected()
    assert files.queue.data(files.queue.index(1, STATUS)) == "Cancelled"
    assert ctx.library.get(job.item_id).status == "cancelled"
    with qtbot.waitSignal(files.queue_finished, timeout=300_000):
        files.retry_selected()
    assert files.queue.row(job.item_id).status == "done"


def test_resume_unfinished_jobs_after_a_crash(qtbot, window, ctx, media):
    _win, files, _view, _lib = window
    library: Library = ctx.library
    item = library.add_file(media["plants"], {"model": "tiny.en", "language": None,
                                              "speakers": "off"})  # fmt: skip
    library.update(item, status="running", progress=0.3)  # the app was killed here
    with qtbot.waitSignal(files.queue_finished, timeout=120_000):
        files.resume_jobs(library.unfinished_jobs())
    assert library.get(item).status == "done"
    assert wer(PLANTS, library.load_transcript(item).text) <= 0.25
    assert library.unfinished_jobs() == []


def test_an_engine_crash_fails_that_file_alone(qtbot, window, ctx, media):
    """A file that crashes the engine process (a native crash: here the process is killed mid
    job) fails with a reason; the next file is transcribed by a fresh engine."""
    _win, files, _view, _lib = window
    files.add_paths([media["story"], media["fox"]])
    qtbot.waitUntil(lambda: bool(files.queue.rows) and files.queue.rows[0].progress > 0.1,
                    timeout=120_000)  # fmt: skip
    with qtbot.waitSignal(files.queue_finished, timeout=120_000):
        os.kill(files.engine._proc.pid, signal.SIGKILL)
    rows = {r.path.name: r for r in files.queue.rows}
    assert rows["story.mp3"].status == "failed"
    assert "engine stopped unexpectedly" in status_cell(files, "story.mp3")
    assert rows["fox.mp3"].status == "done"
    assert wer(FOX, ctx.library.load_transcript(rows["fox.mp3"].item_id).text) <= 0.25


def test_export_automatically_into_a_folder_never_overwrites(qtbot, window, ctx, media, tmp_path):
    _win, files, _view, _lib = window
    out = tmp_path / "exports"
    options = files.options
    for fmt, box in options.formats.items():
        box.setChecked(fmt in ("srt", "txt"))
    options.set_export_folder(out)
    options.automatic.setChecked(True)
    options.redo.setChecked(True)
    run_queue(qtbot, files, [media["fox"]])
    srt = (out / "fox.srt").read_text(encoding="utf-8")
    assert srt.startswith("1\n00:00:0") and wer(FOX, (out / "fox.txt").read_text()) <= 0.25
    run_queue(qtbot, files, [media["fox"]])  # again: a second set beside the first
    assert (out / "fox (2).srt").exists() and (out / "fox.srt").read_text() == srt
    assert sorted(p.name for p in out.iterdir()) == ["fox (2).srt", "fox (2).txt", "fox.srt",
                                                     "fox.txt"]  # fmt: skip
    # The choices are remembered for the next start.
    assert ctx.get("output_formats") == "txt,srt" and ctx.get("export_automatically") is True
    assert ctx.get("output_dir") == str(out)


def test_the_window_shows_a_queue_driven_from_outside_it(qtbot, window, ctx, media):
    """The page follows the service's queue, whoever drives it (a watched folder's thread,
    a second ``deskscribe FILE``): rows come, run, finish and go without the page's buttons."""
    import threading

    from deskscribe.service.queue import job_options

    _win, files, _view, _lib = window
    queue = files.file_queue
    options = job_options("tiny.en", None, "off")
    with qtbot.waitSignal(files.queue_finished, timeout=120_000):
        threading.Thread(target=queue.add, args=([media["fox"], media["broken"]], options)).start()
    rows = {r.path.name: r for r in files.queue.rows}
    assert rows["fox.mp3"].status == "done" and rows["broken.mp3"].status == "failed"
    assert status_cell(files, "fox.mp3") == "Done"
    assert wer(FOX, ctx.library.load_transcript(rows["fox.mp3"].item_id).text) <= 0.25
    threading.Thread(target=queue.remove, args=([rows["broken.mp3"].item_id],)).start()
    qtbot.waitUntil(lambda: [r.path.name for r in files.queue.rows] == ["fox.mp3"],
                    timeout=10_000)  # fmt: skip
    threading.Thread(target=queue.clear_finished).start()
    qtbot.waitUntil(lambda: files.queue.rowCount() == 0, timeout=10_000)
