"""A transcript's segments as an editable Qt table (time, speaker in colour, text), and the
table view that shows them.

Every change goes through the model's `EditHistory` (``do``, ``undo``, ``redo``: typed text,
speakers, splits, joins, renames, merges, replacements), and is announced with ``edited`` so
the transcript view can autosave. The model also marks find matches, and the line and the word
being heard (``set_heard``), which the text delegate paints.
"""

from __future__ import annotations

import bisect

from PySide6.QtCore import (
    QModelIndex,
    QPersistentModelIndex,
    QPoint,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QTableView

from ..transcript import Transcript
from ..transcript.edits import Edit, EditHistory, EditText, find_pattern, word_spans
from .table_model import RowTableModel
from .widgets import clock, speaker_color

COLUMNS = ("Time", "Speaker", "Text")
TIME, SPEAKER, TEXT = range(3)
MATCH_BG = QColor(255, 226, 110, 150)
PLAYING_BG = QColor(90, 160, 255, 70)
WORD_BG = QColor(255, 196, 60, 200)
Index = QModelIndex | QPersistentModelIndex


class SegmentsModel(RowTableModel):
    COLUMNS = COLUMNS

    edited = Signal()  # the transcript changed (any edit, undo or redo)
    history_changed = Signal()  # what Undo and Redo would do changed

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.transcript = Transcript(segments=[])
        self.history = EditHistory(self.transcript)
        self.matches: list[int] = []
        self._match_set: set[int] = set()
        self._find: tuple[str, bool, bool] = ("", False, False)
        self.playing: int | None = None  # the line being heard
        self.playing_word: int | None = None  # its word being heard (with word times)
        self._order: list[str] = []
        self._starts: list[float] | None = None  # line starts, for finding the one heard

    def set_transcript(self, transcript: Transcript) -> None:
        self.beginResetModel()
        self.transcript = transcript
        self.history = EditHistory(transcript)
        self.matches, self._match_set = [], set()
        self.playing = self.playing_word = None
        self._order = transcript.speaker_ids()
        self._starts = None
        self.endResetModel()
        self.history_changed.emit()

    def refresh(self) -> None:
        """Show the transcript again (after a change to all of it)."""
        self.beginResetModel()
        self._order = self.transcript.speaker_ids()
        self._starts = None
        self.playing = self.playing_word = None
        self.endResetModel()

    # --- editing ---------------------------------------------------------------------------

    def do(self, edit: Edit) -> None:
        """Apply ``edit`` as one undoable step (``ValueError``: it cannot be done; nothing
        changed)."""
        rows = self.rowCount()
        self.history.do(edit)
        self._after_change(rows)

    def undo(self) -> Edit | None:
        rows = self.rowCount()
        edit = self.history.undo()
        if edit is not None:
            self._after_change(rows)
        return edit

    def redo(self) -> Edit | None:
        rows = self.rowCount()
        edit = self.history.redo()
        if edit is not None:
            self._after_change(rows)
        return edit

    def _after_change(self, rows_before: int) -> None:
        if len(self.transcript.segments) != rows_before:
            self.refresh()  # lines split or joined: the rows are not the same rows
        else:
            self._order = self.transcript.speaker_ids()
            self._starts = None
            if rows_before:
                last = self.index(rows_before - 1, len(COLUMNS) - 1)
                self.dataChanged.emit(self.index(0, 0), last)
        self._search_again()
        self.edited.emit()
        self.history_changed.emit()

    def text_offset(self, row: int) -> int:
        """Where the shown text (without its leading space) starts in the segment's text."""
        text = self.transcript.segments[row].text
        return len(text) - len(text.lstrip())

    def word_spans(self, row: int) -> list[tuple[int, int]]:
        """(start, end) of each word of line ``row`` in its shown text ([] without words)."""
        seg = self.transcript.segments[row]
        lead = self.text_offset(row)
        return [(a - lead, b - lead) for a, b in word_spans(seg)] if seg.words else []

    def word_at(self, row: int, offset: int) -> int | None:
        """The word of line ``row`` at character ``offset`` of its shown text (the one before
        it, between words)."""
        spans = self.word_spans(row)
        if not spans:
            return None
        k = bisect.bisect_right([a for a, _ in spans], offset) - 1
        return max(0, k)

    # --- Qt model API ----------------------------------------------------------------------

    def row_objects(self) -> list:
        return self.transcript.segments

    def flags(self, index: Index) -> Qt.ItemFlag:
        flags = super().flags(index)
        return flags | Qt.ItemFlag.ItemIsEditable if index.column() == TEXT else flags

    def cell(self, seg, row: int, col: int, role: int):
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            if col == TIME:
                return clock(seg.start)
            if col == SPEAKER:
                return self.transcript.speaker_name(seg.speaker) if seg.speaker else ""
            return seg.text.strip()
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == TIME:
                return f"{clock(seg.start)} – {clock(seg.end)}: click to play from here"
            if col == TEXT:
                return "Click a word to go there; double-click to edit; right-click for more"
        if role == Qt.ItemDataRole.ForegroundRole and col == SPEAKER and seg.speaker:
            return QBrush(speaker_color(seg.speaker, self._order))
        if role == Qt.ItemDataRole.FontRole and col == SPEAKER:
            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.BackgroundRole:
            if row == self.playing:
                return QBrush(PLAYING_BG)
            if row in self._match_set:
                return QBrush(MATCH_BG)
        if role == Qt.ItemDataRole.TextAlignmentRole and col == TIME:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def setData(self, index: Index, value, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or index.column() != TEXT:
            return False
        seg = self.transcript.segments[index.row()]
        text = " ".join(str(value).split())
        if text == seg.text.strip():
            return False
        # Word times stay with the words that are still there (a diff of old and new words).
        self.do(EditText(index.row(), " " + text if text else ""))
        return True

    # --- find and playback marks -----------------------------------------------------------

    def find(self, text: str, case_sensitive: bool = False, whole_word: bool = False) -> list[int]:
        """Rows whose text or speaker matches ``text``; they are highlighted."""
        self._find = (text, case_sensitive, whole_word)
        old = self._match_set
        self.matches = []
        if text.strip():
            pattern = find_pattern(text.strip(), case_sensitive=case_sensitive,
                                   whole_word=whole_word)  # fmt: skip
            t = self.transcript
            self.matches = [
                i for i, s in enumerate(t.segments)
                if pattern.search(s.text)
                or (s.speaker and pattern.search(t.speaker_name(s.speaker)))
            ]  # fmt: skip
        self._match_set = set(self.matches)
        for row in old ^ self._match_set:
            self._row_changed(row)
        return self.matches

    def _search_again(self) -> None:
        if self._find[0].strip():
            self.find(*self._find)

    def set_playing(self, row: int | None, word: int | None = None) -> None:
        if (row, word) == (self.playing, self.playing_word):
            return
        old, self.playing, self.playing_word = self.playing, row, word
        for r in {old, row}:
            if r is not None:
                self._row_changed(r)

    def heard_at(self, seconds: float) -> tuple[int | None, int | None]:
        """(line, word) being heard at ``seconds``: the last line started by then (None
        between lines), and in it the last word started (None without word times)."""
        segments = self.transcript.segments
        if self._starts is None:
            self._starts = [s.start for s in segments]
        row = bisect.bisect_right(self._starts, seconds + 0.05) - 1
        if row < 0 or seconds > segments[row].end + 1.0:
            return None, None
        words = segments[row].words
        if not words:
            return row, None
        k = bisect.bisect_right([w.start for w in words], seconds + 0.02) - 1
        return row, k if k >= 0 and seconds <= words[k].end + 0.5 else None

    def row_at(self, seconds: float) -> int | None:
        """The line being heard at ``seconds``."""
        return self.heard_at(seconds)[0]

    def _row_changed(self, row: int) -> None:
        """Only the highlight changed (so the table need not measure the row again)."""
        if 0 <= row < self.rowCount():
            self.dataChanged.emit(
                self.index(row, 0), self.index(row, len(COLUMNS) - 1),
                [Qt.ItemDataRole.BackgroundRole],
            )  # fmt: skip


class SegmentsTable(QTableView):
    """A table whose rows grow to fit their wrapped text, measured only for the rows in view
    (fitting all rows of a 3-hour transcript at once froze the UI for most of a second).
    A plain click on a line's text says which character was clicked (``text_clicked``)."""

    text_clicked = Signal(int, int)  # (row, character of its shown text)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
        self._pressed_at: QPoint | None = None
        self._fitted: set[int] = set()
        self._pending = False
        self.verticalScrollBar().valueChanged.connect(lambda _v: self.fit_rows_soon())
        self.horizontalHeader().sectionResized.connect(lambda *_: self.refit())

    def setModel(self, model) -> None:
        super().setModel(model)
        model.modelReset.connect(self.refit)
        model.dataChanged.connect(self._data_changed)
        model.rowsInserted.connect(lambda *_: self.refit())
        model.rowsRemoved.connect(lambda *_: self.refit())

    def refit(self) -> None:
        self._fitted.clear()
        self.fit_rows_soon()

    def _data_changed(self, first, last, roles=()) -> None:
        if roles and Qt.ItemDataRole.DisplayRole not in roles:
            return  # a highlight: the text, so the height, is the same
        self._fitted.difference_update(range(first.row(), last.row() + 1))
        self.fit_rows_soon()

    def fit_rows_soon(self) -> None:
        if not self._pending:
            self._pending = True
            QTimer.singleShot(0, self.fit_visible_rows)

    def fit_visible_rows(self) -> None:
        self._pending = False
        if self.model() is None or not self.model().rowCount():
            return
        rows, height = self.model().rowCount(), self.viewport().height()
        top = max(0, self.rowAt(0))
        bottom = self.rowAt(height)
        if bottom < 0:  # past the last row, or not laid out yet
            bottom = top + height // max(1, self.verticalHeader().minimumSectionSize())
        for row in range(top, min(bottom + 20, rows)):  # and a little below
            if row not in self._fitted:
                self._fitted.add(row)
                self.resizeRowToContents(row)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.fit_rows_soon()

    def mousePressEvent(self, event) -> None:
        plain = event.modifiers() == Qt.KeyboardModifier.NoModifier
        left = event.button() == Qt.MouseButton.LeftButton
        self._pressed_at = event.position().toPoint() if plain and left else None
        super().mousePressEvent(event)

    def mouseReleaseEvent(self, event) -> None:
        super().mouseReleaseEvent(event)
        at, self._pressed_at = self._pressed_at, None
        pos = event.position().toPoint()
        if (
            at is None
            or (pos - at).manhattanLength() > 4
            or self.state() == self.State.EditingState
        ):
            return
        index = self.indexAt(pos)
        delegate = self.itemDelegateForColumn(TEXT)
        if not index.isValid() or index.column() != TEXT or not hasattr(delegate, "offset_at"):
            return
        offset = delegate.offset_at(index, self.visualRect(index), pos, self.font())
        if offset is not None:
            self.text_clicked.emit(index.row(), offset)
