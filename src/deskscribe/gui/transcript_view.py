"""The transcript view: read, edit, play, find, rename or merge speakers, export, copy.

Every committed edit is saved to the library at once, on a worker thread (one save at a time;
edits made during a save are saved right after it), so nothing typed is lost and the UI never
waits for the disk. `flush` saves synchronously, for quitting.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QFontMetrics, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..audio.playback import Player
from ..transcript import FORMATS, Transcript, export, render
from .file_options import FORMAT_LABELS
from .find_bar import FindBar
from .segments_model import SPEAKER, TEXT, TIME, SegmentsModel, SegmentsTable
from .widgets import Banner, clock, heading, muted, speaker_color
from .workers import run_in_worker


def snapshot(t: Transcript) -> Transcript:
    """A copy for a worker thread to write while the user goes on editing: new segment objects
    and speaker names, shared word lists. Cheap (a 3000-segment deepcopy took 100 ms), and safe
    because edits replace a segment's text and word list instead of changing them in place; a
    merge relabels words in place, and is saved again right after."""
    return dataclasses.replace(
        t, segments=[copy.copy(s) for s in t.segments], speakers=dict(t.speakers)
    )


class TranscriptView(QWidget):
    saved = Signal(int)  # item id, after an autosave reached the disk
    loaded = Signal(int)  # item id, once its transcript is shown
    exported = Signal(object)  # the Path written by export_to
    playback_error = Signal(str)  # from the player's thread; shown in the banner
    voice_saved = Signal(str)  # a voice profile's name, once "Remember voice" saved it

    def __init__(self, ctx, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.item_id: int | None = None
        self.item = None
        self.model = SegmentsModel(self)
        self.model.edited.connect(self._changed)
        self.player = Player(on_error=self.playback_error.emit)
        self.playback_error.connect(lambda m: self.banner.show_message(m, "error"))
        self._pending: dict[int, Transcript] = {}  # item id -> newest unsaved version
        self._save_job = None

        self.title = heading("Transcript")
        self.meta = muted(wrap=False)
        self.banner = Banner()

        self.play_button = QPushButton("Play")
        self.play_button.setToolTip("Play from the selected segment (or click a time)")
        self.play_button.clicked.connect(self.toggle_play)
        self.copy_button = QPushButton("Copy all")
        self.copy_button.setToolTip("Copy the whole transcript (Ctrl+C copies the selected lines)")
        self.copy_button.clicked.connect(self.copy_all)
        self.export_button = QPushButton("Export…")
        self.export_button.clicked.connect(self.export_dialog)
        self.find_button = QPushButton("Find")
        self.find_button.clicked.connect(self.show_find)
        top = QHBoxLayout()
        top.addWidget(self.play_button)
        top.addStretch(1)
        for b in (self.find_button, self.copy_button, self.export_button):
            top.addWidget(b)

        self.table = SegmentsTable()
        self.table.setModel(self.model)
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
            | QAbstractItemView.EditTrigger.AnyKeyPressed
        )
        header = self.table.horizontalHeader()
        # Widths from the text they hold, not ResizeToContents: that mode measures every row
        # again on each layout change, which is slow on long transcripts.
        header.setSectionResizeMode(TIME, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(SPEAKER, QHeaderView.ResizeMode.Interactive)
        header.setSectionResizeMode(TEXT, QHeaderView.ResizeMode.Stretch)
        self.table.clicked.connect(self._clicked)
        self.find_bar = FindBar(self.model, self.table)

        self.speakers = QListWidget()
        self.speakers.setToolTip("Speakers in this transcript")
        self.rename_button = QPushButton("Rename…")
        self.rename_button.clicked.connect(self.rename_dialog)
        self.merge_button = QPushButton("Merge into…")
        self.merge_button.setToolTip("The selected speaker is the same person as another one")
        self.merge_button.clicked.connect(self.merge_dialog)
        self.remember_button = QPushButton("Remember voice…")
        self.remember_button.setToolTip(
            "Save the selected speaker's voice under a name: new transcripts with speaker "
            "labels name that voice (only a voice fingerprint is kept, never audio)"
        )
        self.remember_button.clicked.connect(self.remember_dialog)
        side = QWidget()
        sl = QVBoxLayout(side)
        sl.setContentsMargins(0, 0, 0, 0)
        sl.addWidget(QLabel("Speakers"))
        sl.addWidget(self.speakers, 1)
        sl.addWidget(self.rename_button)
        sl.addWidget(self.merge_button)
        sl.addWidget(self.remember_button)
        self.speakers_box = side

        split = QSplitter()
        split.addWidget(self.table)
        split.addWidget(side)
        split.setStretchFactor(0, 4)
        split.setStretchFactor(1, 1)

        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addWidget(self.meta)
        layout.addWidget(self.banner)
        layout.addLayout(top)
        layout.addWidget(self.find_bar)
        layout.addWidget(split, 1)

        QShortcut(QKeySequence.StandardKey.Find, self, self.show_find)
        QShortcut(QKeySequence.StandardKey.Copy, self.table, self.copy_selected)
        self._tick = QTimer(self)
        self._tick.setInterval(100)
        self._tick.timeout.connect(self._follow_playback)
        self._show_speakers()

    # --- opening ---------------------------------------------------------------------------

    def open_item(self, item_id: int) -> None:
        """Show library item ``item_id`` (loaded on a worker thread)."""
        self.stop()
        self.banner.hide()
        run_in_worker(
            self._load, item_id, on_done=self._show, on_error=self._load_failed, name="open"
        )

    def _load(self, item_id: int):
        return self.ctx.library.get(item_id), self.ctx.library.load_transcript(item_id)

    def _show(self, result) -> None:
        self.item, transcript = result
        self.item_id = self.item.id
        if self.item_id in self._pending:  # edits of this item not on disk yet
            transcript = snapshot(self._pending[self.item_id])
        self.title.setText(self.item.title)
        self.meta.setText(self._describe(transcript))
        self.model.set_transcript(transcript)
        self._show_speakers()
        self.find_bar.refresh()
        self.loaded.emit(self.item_id)

    def _load_failed(self, exc: BaseException) -> None:
        self.banner.show_message(str(exc), "error")

    def _describe(self, t: Transcript) -> str:
        parts = [self.item.source_name]
        if t.duration:
            parts.append(clock(t.duration))
        spoken = _languages_spoken(t)
        if len(spoken) > 1:  # "en, de": a recording that changes language
            parts.append(", ".join(spoken))
        elif t.language:
            parts.append(t.language)
        if t.model:
            parts.append(t.model)
        return " · ".join(parts)

    @property
    def transcript(self) -> Transcript:
        return self.model.transcript

    # --- saving ---------------------------------------------------------------------------

    def _changed(self) -> None:
        if self.item_id is None:
            return
        self._pending[self.item_id] = snapshot(self.transcript)
        self._pump()

    def _pump(self) -> None:
        """Start the next save unless one is running (the newest edit of each item wins)."""
        if self._save_job is not None or not self._pending:
            return
        item_id = next(iter(self._pending))
        snapshot = self._pending.pop(item_id)
        self._save_job = run_in_worker(
            self.ctx.library.save_transcript, item_id, snapshot,
            on_done=lambda _p: self._saved(item_id),
            on_error=lambda e: self._save_failed(item_id, snapshot, e), name="autosave",
        )  # fmt: skip

    def _saved(self, item_id: int) -> None:
        self._save_job = None
        self.saved.emit(item_id)
        self.ctx.library_changed.emit()
        self._pump()

    def _save_failed(self, item_id: int, snapshot: Transcript, exc: BaseException) -> None:
        self._save_job = None
        self._pending.setdefault(item_id, snapshot)  # keep it; a newer edit replaces it
        self.banner.show_message(
            f"Your edits could not be saved ({exc}). They are kept here; saving is tried "
            "again with your next edit.", "error", "Try again", self._pump,
        )  # fmt: skip

    def flush(self) -> None:
        """Save every unsaved edit now, on this thread (when the app quits)."""
        if self._save_job is not None:
            self._save_job.wait(10.0)
        while self._pending:
            item_id = next(iter(self._pending))
            self.ctx.library.save_transcript(item_id, self._pending.pop(item_id))

    # --- speakers --------------------------------------------------------------------------

    def _fit_columns(self, ids: list[str]) -> None:
        metrics, pad = self.table.fontMetrics(), 24
        self.table.setColumnWidth(TIME, metrics.horizontalAdvance("0:00:00") + pad)
        bold = self.table.font()
        bold.setBold(True)
        names = [self.transcript.speaker_name(s) for s in ids] or [""]
        widest = max(QFontMetrics(bold).horizontalAdvance(n) for n in names)
        self.table.setColumnWidth(SPEAKER, min(240, max(60, widest + pad)))

    def _show_speakers(self) -> None:
        self.speakers.clear()
        ids = self.transcript.speaker_ids()
        self._fit_columns(ids)
        self.table.setColumnHidden(SPEAKER, not ids)
        for sid in ids:
            entry = QListWidgetItem(self.transcript.speaker_name(sid))
            entry.setData(Qt.ItemDataRole.UserRole, sid)
            entry.setForeground(speaker_color(sid, ids))
            self.speakers.addItem(entry)
        if ids:
            self.speakers.setCurrentRow(0)
        self.speakers_box.setVisible(bool(ids))
        self.merge_button.setEnabled(len(ids) > 1)

    def _selected_speaker(self) -> str | None:
        entry = self.speakers.currentItem()
        return entry.data(Qt.ItemDataRole.UserRole) if entry is not None else None

    def rename_speaker(self, speaker_id: str, name: str) -> None:
        self.transcript.rename_speaker(speaker_id, name)
        self._speakers_changed()

    def merge_speakers(self, from_id: str, into_id: str) -> None:
        self.transcript.merge_speakers(from_id, into_id)
        self._speakers_changed()

    def _speakers_changed(self) -> None:
        self.model.refresh()
        self._show_speakers()
        self._changed()

    def rename_dialog(self) -> None:
        sid = self._selected_speaker()
        if sid is None:
            return
        name, ok = QInputDialog.getText(
            self, "Rename speaker", f"Name for {self.transcript.speaker_name(sid)}:",
            text=self.transcript.speaker_name(sid),
        )  # fmt: skip
        if ok:
            self.rename_speaker(sid, name)

    def merge_dialog(self) -> None:
        sid = self._selected_speaker()
        others = [s for s in self.transcript.speaker_ids() if s != sid]
        if sid is None or not others:
            return
        names = [self.transcript.speaker_name(s) for s in others]
        name, ok = QInputDialog.getItem(
            self, "Merge speakers",
            f"{self.transcript.speaker_name(sid)} is the same person as:", names, 0, False,
        )  # fmt: skip
        if ok:
            self.merge_speakers(sid, others[names.index(name)])

    def remember_dialog(self) -> None:
        sid = self._selected_speaker()
        if sid is None:
            return
        name, ok = QInputDialog.getText(
            self, "Remember voice",
            f"Name new transcripts give the voice of {self.transcript.speaker_name(sid)}:",
            text=self.transcript.speaker_name(sid),
        )  # fmt: skip
        if ok and name.strip():
            self.remember_voice(sid, name.strip())

    def remember_voice(self, speaker_id: str, name: str) -> None:
        """Learn ``speaker_id``'s voice from this item's recording (on a worker) and save it
        as the voice profile ``name``."""
        if self.item is None:
            return
        t = snapshot(self.transcript)
        t.source = self.item.source
        self.remember_button.setEnabled(False)
        self.banner.show_message(f"Learning the voice of {name}…")

        def done(profile) -> None:
            self.remember_button.setEnabled(True)
            self.banner.show_message(
                f"Saved the voice of {profile.name}. New transcripts with speaker labels will "
                "name this voice (Models page: Voice profiles)."
            )
            self.ctx.profiles_changed.emit()
            self.voice_saved.emit(profile.name)

        def failed(exc: BaseException) -> None:
            self.remember_button.setEnabled(True)
            self.banner.show_message(f"Could not remember the voice: {exc}", "error")

        run_in_worker(_remember, self.ctx, t, speaker_id, name, on_done=done, on_error=failed)

    # --- playback --------------------------------------------------------------------------

    def _clicked(self, index) -> None:
        if index.column() == TIME:
            self.play_from(index.row())

    def play_from(self, row: int) -> None:
        if self.item is None or not 0 <= row < len(self.transcript.segments):
            return
        self.banner.hide()
        self.player.play(self.item.source, self.transcript.segments[row].start)
        self.model.set_playing(row)
        self.play_button.setText("Stop")
        self._tick.start()

    def toggle_play(self) -> None:
        if self.player.is_playing:
            self.stop()
            return
        rows = self.table.selectionModel().selectedRows()
        self.play_from(rows[0].row() if rows else 0)

    def stop(self) -> None:
        self.player.stop()
        self._tick.stop()
        self.model.set_playing(None)
        self.play_button.setText("Play")

    def _follow_playback(self) -> None:
        if not self.player.is_playing:
            self.stop()
            return
        if self.player.position() > 0:
            self.model.set_playing(self.model.row_at(self.player.position()))

    # --- find ------------------------------------------------------------------------------

    def show_find(self) -> None:
        self.find_bar.open_bar()

    # --- copy and export -------------------------------------------------------------------

    def copy_all(self) -> None:
        QGuiApplication.clipboard().setText(str(render(self.transcript, "txt")))
        self.ctx.status_message.emit("Copied the transcript to the clipboard")

    def copy_selected(self) -> None:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        if not rows:
            self.copy_all()
            return
        t = self.transcript
        part = Transcript(segments=[t.segments[r] for r in rows], speakers=t.speakers)
        QGuiApplication.clipboard().setText(str(render(part, "txt")))

    def export_dialog(self) -> None:
        if self.item is None:
            return
        filters = [f"{FORMAT_LABELS[f]} (*.{f})" for f in FORMATS]
        start = Path(self.item.source).with_suffix(".txt")
        if self.item.kind == "live":
            start = Path.home() / f"{self.item.title}.txt"
        path, chosen = QFileDialog.getSaveFileName(self, "Export transcript", str(start),
                                                   ";;".join(filters))  # fmt: skip
        if path:
            fmt = FORMATS[filters.index(chosen)] if chosen in filters else None
            self.export_to(Path(path), fmt)

    def export_to(self, path: Path, fmt: str | None = None) -> None:
        """Write the transcript as shown (edits and names included) on a worker thread."""
        fmt = fmt or path.suffix.lstrip(".").lower() or "txt"
        if not path.suffix:
            path = path.with_suffix(f".{fmt}")
        run_in_worker(
            functools.partial(export, snapshot(self.transcript), path, fmt, overwrite=True),
            on_done=self._exported, name="export",
            on_error=lambda e: self.banner.show_message(f"Export failed: {e}", "error"),
        )  # fmt: skip

    def _exported(self, path: Path) -> None:
        self.ctx.status_message.emit(f"Exported {path}")
        self.exported.emit(path)


def _languages_spoken(t: Transcript) -> list[str]:
    """The segments' languages, the most spoken first ("en", "de")."""
    seconds: dict[str, float] = {}
    for s in t.segments:
        if s.language:
            seconds[s.language] = seconds.get(s.language, 0.0) + max(0.0, s.end - s.start)
    return sorted(seconds, key=lambda code: -seconds[code])


def _remember(ctx, transcript: Transcript, speaker_id: str, name: str):
    from ..speakers.encoder import SpeakerModelError
    from ..speakers.profiles import ProfileError, remember_voice

    try:
        encoder = ctx.speaker_encoder()
    except SpeakerModelError as e:
        raise ProfileError(str(e)) from None
    if encoder is None:
        raise ProfileError("no speaker model is installed; install one on the Models page first")
    return remember_voice(transcript, speaker_id, encoder, name=name)
