"""A transcript's segments as an editable Qt table (time, speaker in colour, text), and the
table view that shows them.

Edits go straight into the `Transcript` it wraps and are announced with `edited`, so the
transcript view can autosave; the model also marks find matches and the segment playing.
"""

from __future__ import annotations

from PySide6.QtCore import (
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QTableView

from ..transcript import Transcript
from .table_model import RowTableModel
from .widgets import clock, speaker_color

COLUMNS = ("Time", "Speaker", "Text")
TIME, SPEAKER, TEXT = range(3)
MATCH_BG = QColor(255, 226, 110, 150)
PLAYING_BG = QColor(90, 160, 255, 70)
Index = QModelIndex | QPersistentModelIndex


class SegmentsModel(RowTableModel):
    COLUMNS = COLUMNS

    edited = Signal()  # the transcript changed (text of a segment)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.transcript = Transcript(segments=[])
        self.matches: list[int] = []
        self._match_set: set[int] = set()
        self.playing: int | None = None
        self._order: list[str] = []

    def set_transcript(self, transcript: Transcript) -> None:
        self.beginResetModel()
        self.transcript = transcript
        self.matches, self._match_set, self.playing = [], set(), None
        self._order = transcript.speaker_ids()
        self.endResetModel()

    def refresh(self) -> None:
        """After a change to the whole transcript (speakers renamed or merged)."""
        self.set_transcript(self.transcript)

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
        if role == Qt.ItemDataRole.ToolTipRole and col == TIME:
            return f"{clock(seg.start)} – {clock(seg.end)}: click to play from here"
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
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        return None

    def setData(self, index: Index, value, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or index.column() != TEXT:
            return False
        seg = self.transcript.segments[index.row()]
        text = " ".join(str(value).split())
        if text == seg.text.strip():
            return False
        seg.text = " " + text if text else ""
        seg.words = []  # word times belonged to the old words
        self.dataChanged.emit(index, index)
        self.edited.emit()
        return True

    # --- find and playback marks -----------------------------------------------------------

    def find(self, text: str) -> list[int]:
        """Rows whose text or speaker contains ``text`` (any case); they are highlighted."""
        needle = text.strip().casefold()
        old = self._match_set
        self.matches = []
        if needle:
            t = self.transcript
            self.matches = [
                i for i, s in enumerate(t.segments)
                if needle in s.text.casefold()
                or (s.speaker and needle in t.speaker_name(s.speaker).casefold())
            ]  # fmt: skip
        self._match_set = set(self.matches)
        for row in old ^ self._match_set:
            self._row_changed(row)
        return self.matches

    def set_playing(self, row: int | None) -> None:
        if row == self.playing:
            return
        old, self.playing = self.playing, row
        for r in (old, row):
            if r is not None:
                self._row_changed(r)

    def row_at(self, seconds: float) -> int | None:
        """The segment playing at ``seconds`` (the last one started by then)."""
        found = None
        for i, s in enumerate(self.transcript.segments):
            if s.start <= seconds + 0.05:
                found = i
            else:
                break
        if found is not None and seconds > self.transcript.segments[found].end + 1.0:
            return None  # between segments
        return found

    def _row_changed(self, row: int) -> None:
        """Only the highlight changed (so the table need not measure the row again)."""
        if 0 <= row < self.rowCount():
            self.dataChanged.emit(
                self.index(row, 0), self.index(row, len(COLUMNS) - 1),
                [Qt.ItemDataRole.BackgroundRole],
            )  # fmt: skip


class SegmentsTable(QTableView):
    """A table whose rows grow to fit their wrapped text, measured only for the rows in view
    (fitting all rows of a 3-hour transcript at once froze the UI for most of a second)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setWordWrap(True)
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
