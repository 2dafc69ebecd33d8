"""The transcript view, where a transcript is checked against its recording and corrected:
a player (play/pause with Space, a position slider, -5/+5 s with Ctrl+arrows, speed with the
pitch kept, volume; the line and the word being heard are marked and kept in view; a click on
a word goes there), the lines (edit, speakers, split, join, undo: `transcript_editing`), find
and replace, the speakers (rename, merge, remember a voice), export and copy.

Every committed edit is saved to the library at once, on a worker thread (one save at a time;
edits made during a save are saved right after it), so nothing typed is lost and the UI never
waits for the disk. `flush` saves synchronously, for quitting.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontMetrics, QGuiApplication, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QPushButton,
    QSplitter,
    QTabWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .. import settings
from ..service.playback import SKIP_SECONDS, Playback, PlaybackState
from ..transcript import SubtitleRules, Transcript, export, render
from .ask_dialog import AskDialog
from .export_dialog import TranslateRunner, ask_export, copy_translation
from .find_bar import FindBar
from .notes_panel import NotesPanel
from .player_bar import PlayerBar
from .segment_delegate import TextDelegate
from .segments_model import SPEAKER, TEXT, TIME, SegmentsModel, SegmentsTable
from .speakers_panel import SpeakersPanel
from .transcript_editing import TranscriptEditing
from .widgets import Banner, clock, heading, muted, select_rows
from .workers import run_in_worker


def snapshot(t: Transcript) -> Transcript:
    """A copy for a worker thread to write while the user goes on editing: new segment objects
    and speaker names, shared word lists. Cheap (a 3000-segment deepcopy took 100 ms), and safe
    because edits replace a segment (and its words) instead of changing it in place; a merge
    relabels words in place, and is saved again right after."""
    return dataclasses.replace(
        t, segments=[copy.copy(s) for s in t.segments], speakers=dict(t.speakers)
    )


class TranscriptView(QWidget):
    saved = Signal(int)  # item id, after an autosave reached the disk
    loaded = Signal(int)  # item id, once its transcript is shown
    exported = Signal(object)  # the Path written by export_to

    def __init__(self, ctx, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.item_id: int | None = None
        self.item = None
        self.model = SegmentsModel(self)
        self.model.edited.connect(self._changed)
        self.playback = Playback()
        self._pending: dict[int, Transcript] = {}  # item id -> newest unsaved version
        self._save_job = None
        self._heard_row: int | None = None
        self._notice = ""  # the playback notice shown, if any
        self._translation = None  # the TranslateRunner at work, if any

        self.title = heading("Transcript")
        self.meta = muted(wrap=False)
        self.banner = Banner()
        self.player_bar = PlayerBar(self.playback)
        self.player_bar.position.connect(self._heard)
        self.player_bar.failed.connect(self._playback_failed)
        self.player_bar.state_changed.connect(self._playback_state)

        self.table = SegmentsTable()
        self.table.setModel(self.model)
        self.delegate = TextDelegate(self.model, self.table)
        self.table.setItemDelegateForColumn(TEXT, self.delegate)
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
        self.table.text_clicked.connect(self._text_clicked)
        self.find_bar = FindBar(self.model, self.table)
        self.editing = TranscriptEditing(self)
        self.model.history_changed.connect(self._show_undo)

        self.speakers_panel = SpeakersPanel(self)
        self.speakers = self.speakers_panel.list
        self.merge_button = self.speakers_panel.merge_button
        self.remember_button = self.speakers_panel.remember_button
        self.voice_saved = self.speakers_panel.voice_saved

        self.undo_button = self._tool(self.editing.undo_action)
        self.redo_button = self._tool(self.editing.redo_action)
        self.copy_button = QPushButton("Copy all")
        self.copy_button.setToolTip("Copy the whole transcript (Ctrl+C copies the selected lines)")
        self.copy_button.clicked.connect(self.copy_all)
        self.export_button = QPushButton("Export…")
        self.export_button.clicked.connect(self.export_dialog)
        self.find_button = QPushButton("Find…")
        self.find_button.setToolTip("Find and replace (Ctrl+F, Ctrl+H)")
        self.find_button.clicked.connect(self.show_find)
        self.ask_button = QPushButton("Ask…")
        self.ask_button.setToolTip("Ask the language model a question about this recording")
        self.ask_button.clicked.connect(self.ask_dialog)
        top = QHBoxLayout()
        top.addWidget(self.undo_button)
        top.addWidget(self.redo_button)
        top.addStretch(1)
        for b in (self.find_button, self.ask_button, self.copy_button, self.export_button):
            top.addWidget(b)

        split = QSplitter()
        split.addWidget(self.table)
        split.addWidget(self.speakers_panel)
        split.setStretchFactor(0, 4)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        self.notes_panel = NotesPanel(self)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(split, "Transcript")
        self.tabs.addTab(self.notes_panel, "Notes")

        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addWidget(self.meta)
        layout.addWidget(self.banner)
        layout.addLayout(top)
        layout.addWidget(self.find_bar)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.player_bar)

        context = Qt.ShortcutContext.WidgetWithChildrenShortcut
        for keys, slot in (
            (QKeySequence.StandardKey.Find, self.show_find),
            (QKeySequence("Ctrl+H"), lambda: self.find_bar.open_bar(replace=True)),
            (QKeySequence(Qt.Key.Key_Space), self.player_bar.toggle),
            (QKeySequence("Ctrl+Left"), lambda: self.player_bar.skip(-SKIP_SECONDS)),
            (QKeySequence("Ctrl+Right"), lambda: self.player_bar.skip(SKIP_SECONDS)),
        ):
            QShortcut(keys, self, slot, context=context)
        QShortcut(QKeySequence.StandardKey.Copy, self.table, self.copy_selected)
        self.speakers_panel.show_speakers()

    def _tool(self, action) -> QToolButton:
        button = QToolButton()
        button.setDefaultAction(action)
        button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        return button

    # --- opening ---------------------------------------------------------------------------

    def open_item(self, item_id: int) -> None:
        """Show library item ``item_id`` (loaded on a worker thread)."""
        self.stop()
        self.banner.hide()
        run_in_worker(
            self._load, item_id, on_done=self._show, on_error=self._load_failed, name="open"
        )

    def _load(self, item_id: int):
        from ..audio.playback import tracks_of

        item = self.ctx.library.get(item_id)
        return item, self.ctx.library.load_transcript(item_id), tracks_of(item.source)

    def _show(self, result) -> None:
        self.item, transcript, tracks = result
        self.item_id = self.item.id
        if self.item_id in self._pending:  # edits of this item not on disk yet
            transcript = snapshot(self._pending[self.item_id])
        self.title.setText(self.item.title)
        self.meta.setText(self._describe(transcript))
        self.model.set_transcript(transcript)
        self._speakers_shown()
        self.find_bar.refresh()
        self.notes_panel.show_notes()
        self.playback.open(self.item.source)
        self.player_bar.set_tracks(tracks)
        ends = [s.end for s in transcript.segments]
        self.player_bar.set_length(max([transcript.duration or 0.0, *ends]))
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

    def snapshot(self) -> Transcript:
        return snapshot(self.transcript)

    # --- saving ---------------------------------------------------------------------------

    def _changed(self) -> None:
        self._speakers_shown()
        if self.item_id is None:
            return
        self._pending[self.item_id] = snapshot(self.transcript)
        self._pump()

    def set_notes(self, notes: dict | None) -> None:
        """Keep ``notes`` with the transcript shown, saved as an edit is (not undoable: the
        Notes tab's own Edit is how notes are changed)."""
        self.transcript.notes = notes
        self._changed()

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

    def _speakers_shown(self) -> None:
        ids = self.transcript.speaker_ids()
        metrics, pad = self.table.fontMetrics(), 24
        self.table.setColumnWidth(TIME, metrics.horizontalAdvance("0:00:00") + pad)
        bold = self.table.font()
        bold.setBold(True)
        names = [self.transcript.speaker_name(s) for s in ids] or [""]
        widest = max(QFontMetrics(bold).horizontalAdvance(n) for n in names)
        self.table.setColumnWidth(SPEAKER, min(240, max(60, widest + pad)))
        self.table.setColumnHidden(SPEAKER, not ids)
        self.speakers_panel.show_speakers()

    def rename_speaker(self, speaker_id: str, name: str) -> None:
        self.speakers_panel.rename(speaker_id, name)

    def merge_speakers(self, from_id: str, into_id: str) -> None:
        self.speakers_panel.merge(from_id, into_id)

    def rename_dialog(self) -> None:
        self.speakers_panel.rename_dialog()

    def merge_dialog(self) -> None:
        self.speakers_panel.merge_dialog()

    def remember_dialog(self) -> None:
        self.speakers_panel.remember_dialog()

    def _show_undo(self) -> None:
        for button in (self.undo_button, self.redo_button):
            button.setToolTip(button.defaultAction().text())

    # --- playback --------------------------------------------------------------------------

    def _clicked(self, index) -> None:
        if index.column() == TIME:
            self.play_from(index.row())

    def _text_clicked(self, row: int, offset: int) -> None:
        """A click on a word: go there (playing on from it, or from there on the next Play)."""
        word = self.model.word_at(row, offset)
        seg = self.transcript.segments[row]
        seconds = seg.words[word].start if word is not None else seg.start
        self.player_bar.seek(seconds)

    def play_from(self, row: int) -> None:
        if self.item is None or not 0 <= row < len(self.transcript.segments):
            return
        self.play_at(self.transcript.segments[row].start)

    def play_at(self, seconds: float) -> None:
        if self.item is not None:
            self.player_bar.play_at(seconds)

    def toggle_play(self) -> None:
        self.player_bar.toggle()

    def stop(self) -> None:
        self.playback.stop()
        self.model.set_playing(None)

    def _heard(self, seconds: float) -> None:
        """Mark the line and the word at ``seconds``; keep the line in view while playing."""
        row, word = self.model.heard_at(seconds)
        self.model.set_playing(row, word)
        follow = (
            self.playback.state is PlaybackState.PLAYING
            and self.table.state() != QAbstractItemView.State.EditingState
        )
        if row is not None and row != self._heard_row and follow:
            index = self.model.index(row, TEXT)
            self.table.scrollTo(index, QAbstractItemView.ScrollHint.EnsureVisible)
        self._heard_row = row

    def _playback_state(self, state: PlaybackState) -> None:
        if state in (PlaybackState.IDLE, PlaybackState.ENDED, PlaybackState.FAILED):
            self.model.set_playing(None)
            self._heard_row = None
        elif state is PlaybackState.PLAYING and self.banner.text.text() == self._notice:
            self.banner.hide()  # it plays now: the notice is out of date

    def _playback_failed(self, message: str) -> None:
        """One notice, with a close button; the next Play tries again."""
        self.banner.show_message(message, "error")
        self._notice = message

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
        """Where, in which format and, for subtitles, by which rules (the Settings' first)."""
        if self.item is None:
            return
        start = Path(self.item.source).with_suffix(".txt")
        if self.item.kind == "live":
            start = Path.home() / f"{self.item.title}.txt"
        choice = ask_export(self, start, self.transcript)
        if choice is None:
            return
        if choice.translate:
            self.translate_then_export(choice)
        else:
            self.export_to(choice.path, choice.fmt, choice.rules, choice.language)

    def translate_then_export(self, choice) -> None:
        """Translate into ``choice.language`` (a progress dialog with Cancel), keep the track
        with the transcript (saved as an edit is), then export in that language."""
        item_id = self.item_id
        runner = self._translation = TranslateRunner(self.snapshot(), choice.language, self)

        def finish() -> None:
            self._translation = None
            runner.deleteLater()

        def done(translated, missing: int) -> None:
            finish()
            if self.item_id != item_id:
                self.banner.show_message(
                    "The translation was not kept: another recording was opened.", "warning"
                )
                return
            given = copy_translation(self.transcript, translated, runner.key)
            self._changed()
            note = f"; {missing} lines keep their original text" if missing else ""
            self.ctx.status_message.emit(f"Translated {given} lines into {runner.name}{note}")
            self.export_to(choice.path, choice.fmt, choice.rules, runner.key)

        def failed(message: str) -> None:
            finish()
            self.banner.show_message(f"Not translated: {message}", "error")

        def cancelled() -> None:
            finish()
            self.ctx.status_message.emit("Translation cancelled: nothing was changed")

        runner.done.connect(done)
        runner.failed.connect(failed)
        runner.cancelled.connect(cancelled)
        runner.start()

    def export_to(
        self,
        path: Path,
        fmt: str | None = None,
        rules: SubtitleRules | None = None,
        language: str | None = None,
    ) -> None:
        """Write the transcript as shown (edits and names included) on a worker thread; SRT
        and VTT by ``rules`` (default: the Settings' subtitle rules); ``language``: in that
        translation (JSON keeps every language as it is)."""
        fmt = fmt or path.suffix.lstrip(".").lower() or "txt"
        if not path.suffix:
            path = path.with_suffix(f".{fmt}")
        rules = rules or settings.subtitle_rules()
        shown = self.snapshot()
        if language and fmt != "json":
            shown = shown.translated(language)
        run_in_worker(
            functools.partial(export, shown, path, fmt, overwrite=True, subtitles=rules),
            on_done=self._exported, name="export",
            on_error=lambda e: self.banner.show_message(f"Export failed: {e}", "error"),
        )  # fmt: skip

    def ask_dialog(self) -> None:
        """Ask the language model about this recording; a cited line is shown and heard."""
        if self.item is None:
            return
        dialog = AskDialog(self.ctx, self, sources=[(self.item_id, self.item.title,
                                                     self.snapshot())])  # fmt: skip
        here = self.item_id
        dialog.open_at.connect(lambda i, s: self.go_to(s) if i == here else None)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.show()
        self.ask_window = dialog  # the one open (tests reach it here)

    def go_to(self, seconds: float) -> None:
        """Select the line at ``seconds``, show it, and move the player there."""
        rows = [i for i, s in enumerate(self.transcript.segments) if s.start <= seconds <= s.end]
        if rows:
            select_rows(self.table, rows[:1])
            self.table.scrollTo(self.model.index(rows[0], 0))
        self.player_bar.seek(seconds)

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
