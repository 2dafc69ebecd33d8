"""Shared by the Files, transcript view and library page tests: real media files, an isolated
user (data folder, settings, model store with the test models) and the app's window; the real
phone call open in the transcript view, the language model in the store, made transcripts."""

from __future__ import annotations

import os
import random
import warnings
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication

from conftest import EVAL, espeak, load
from deskscribe.gui.app import MainWindow
from deskscribe.gui.context import AppContext
from deskscribe.gui.files_panel import FilesPanel
from deskscribe.gui.queue_model import STATUS
from deskscribe.gui.workers import cancel_all
from deskscribe.llm.store import STARTER_FILE
from deskscribe.transcript import Segment, Transcript
from media import pick_encoder, write_media

FOX = "The quick brown fox jumps over the lazy dog."
PLANTS = "Remember to water the plants on Sunday."
CALL = "Please call me back tomorrow afternoon."
STORY = [
    "The old lighthouse keeper climbed the stairs every evening at sunset.",
    "He lit the great lamp and watched the ships pass safely by the rocks.",
    "One stormy night a small fishing boat lost its way in the fog.",
    "The keeper rang the bell until the sailors found the harbour.",
    "In the morning the whole village came to thank him for his courage.",
    "He smiled and said that he was only doing his job.",
]


# --------------------------------------------------------------------------- media


def encode(wav: Path, out: Path, codec: str) -> Path:
    samples = load(wav)[None, :]
    return write_media(out, samples, rate=16000, codec=codec, bit_rate=64000)


@pytest.fixture(scope="module")
def media(tmp_path_factory, speech_dir: Path) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("media")
    mp3 = pick_encoder("libmp3lame", "mp3")
    fox = encode(espeak(FOX, speech_dir / "gui-fox.wav", voice="en"), folder / "fox.mp3", mp3)
    plants = encode(
        espeak(PLANTS, speech_dir / "gui-plants.wav", voice="en-gb"), folder / "plants.m4a", "aac"
    )
    call = espeak(CALL, speech_dir / "gui-call.wav", voice="en")
    broken = folder / "broken.mp3"
    broken.write_bytes(random.Random(6).randbytes(40_000))
    # A real file cut in half, as an interrupted download or copy leaves it.
    parts = [load(espeak(s, speech_dir / f"gui-story-{i}.wav", voice="en")) for i, s in
             enumerate(STORY)]  # fmt: skip
    gap = np.zeros(8000, np.float32)
    story = np.concatenate([x for p in parts * 3 for x in (p, gap)])  # about 2 minutes
    long_mp3 = write_media(folder / "story.mp3", story[None, :], rate=16000, codec=mp3)
    data = long_mp3.read_bytes()
    truncated = folder / "story-cut.mp3"
    truncated.write_bytes(data[: len(data) // 2])
    return {"fox": fox, "plants": plants, "call": call, "broken": broken,
            "story": long_mp3, "truncated": truncated}  # fmt: skip


# --------------------------------------------------------------------------- the app


@pytest.fixture
def ctx(qapp, tmp_path: Path, tiny_fp32: Path, monkeypatch) -> AppContext:
    store = tmp_path / "models"
    store.mkdir()
    (store / "tiny.en").symlink_to(tiny_fp32, target_is_directory=True)
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(store))
    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    context = AppContext(data_dir=tmp_path / "data")
    yield context
    cancel_all(timeout=30)
    QApplication.processEvents()


@pytest.fixture
def window(qtbot, ctx):
    """The app's main window, and its Files page, transcript view and Library page."""
    win = MainWindow(ctx)
    files, view, library = win.files_panel, win.transcript_view, win.library_panel
    qtbot.addWidget(win)
    win.resize(1100, 750)
    win.show()
    yield win, files, view, library
    files.shutdown()  # the engine process of this test's window


@pytest.fixture
def model_store(ctx: AppContext, llm_gguf: Path) -> Path:
    """The language model starter in the ctx fixture's store, where the app looks for it."""
    folder = Path(os.environ["DESKSCRIBE_MODELS_DIR"]) / "llm"
    folder.mkdir(exist_ok=True)
    (folder / STARTER_FILE).symlink_to(llm_gguf)
    return folder / STARTER_FILE


@pytest.fixture
def opened(qtbot, window, ctx: AppContext, call_transcript: Transcript):
    """The main window with the real phone call open in the transcript view, as if transcribed
    here (``call_transcript``: conftest's, or the one the test module defines); the window
    active. (window, transcript view, item id)"""
    win, _files, view, _library = window
    item_id = ctx.library.add_file(EVAL / "two-speakers.wav", {"model": "tiny.en"})
    ctx.library.save_transcript(item_id, call_transcript)
    ctx.library.update(item_id, status="done", duration=30.0)
    with qtbot.waitSignal(view.loaded, timeout=20_000):
        win.show_transcript(item_id)
    win.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is win, timeout=5_000)
    return win, view, item_id


def drop(target, paths: list[Path]) -> None:
    """Drag files from a file manager and drop them onto ``target`` (what Qt delivers)."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    pos = target.rect().center()
    actions = Qt.DropAction.CopyAction
    with warnings.catch_warnings():  # Qt 6.12 marks the only constructor PySide6 has deprecated
        warnings.simplefilter("ignore", DeprecationWarning)
        enter = QDragEnterEvent(pos, actions, mime, Qt.MouseButton.LeftButton,
                                Qt.KeyboardModifier.NoModifier)  # fmt: skip
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted(), "the window refused the drag"
    event = QDropEvent(QPointF(pos), actions, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)  # fmt: skip
    QApplication.sendEvent(target, event)
    assert event.isAccepted()


def run_queue(qtbot, files: FilesPanel, paths: list[Path], target=None, timeout=180_000):
    with qtbot.waitSignal(files.queue_finished, timeout=timeout):
        if target is not None:
            drop(target, paths)
        else:
            files.add_paths(paths)
    return {r.path.name: r for r in files.queue.rows}


def status_cell(files: FilesPanel, name: str) -> str:
    row = next(i for i, r in enumerate(files.queue.rows) if r.path.name == name)
    return files.queue.data(files.queue.index(row, STATUS))


@pytest.fixture
def with_speakers(ctx: AppContext, speaker_model: Path) -> Path:
    """The test speaker model (Resemblyzer) installed next to the Whisper model."""
    link = Path(os.environ["DESKSCRIBE_MODELS_DIR"]) / "speaker-resemblyzer"
    link.symlink_to(speaker_model, target_is_directory=True)
    return link


# --------------------------------------------------------------------------- transcripts


def made(lines: list[str], speakers: tuple[str, ...] = ("Anna", "Ben")) -> Transcript:
    """A transcript of ``lines``, 7 s apart, spoken in turn by ``speakers``."""
    segs = [Segment(start=7.0 * i + 1.5, end=7.0 * i + 6.0, text=" " + t, id=i,
                    speaker=f"S{i % len(speakers) + 1}") for i, t in enumerate(lines)]  # fmt: skip
    return Transcript(segs, language="en",
                      speakers={f"S{k + 1}": n for k, n in enumerate(speakers)})  # fmt: skip
