"""The file queue as a Qt table model, and the delegate that draws its progress bars.

A row mirrors one library item (a file job). The model holds only what the table shows; the
library is the record, the files panel keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionProgressBar

from .widgets import clock

COLUMNS = ("File", "Duration", "Status", "Progress")
FILE, DURATION, STATUS, PROGRESS = range(4)
STATUS_TEXT = {
    "queued": "Waiting",
    "running": "Transcribing",
    "done": "Done",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "skipped": "Already transcribed",
}
FINISHED = ("done", "failed", "cancelled", "skipped")
Index = QModelIndex | QPersistentModelIndex


@dataclass
class QueueRow:
    item_id: int
    path: Path
    status: str = "queued"  # a library status, or "skipped" (done before: not run again)
    duration: float | None = None
    progress: float = 0.0
    eta: float | None = None
    error: str | None = None  # the reason a file failed (or a note on a finished one)

    @property
    def status_text(self) -> str:
        text = STATUS_TEXT.get(self.status, self.status)
        return f"{text}: {self.error}" if self.error else text

    @property
    def progress_text(self) -> str:
        if self.status == "running":
            left = f" · {clock(self.eta)} left" if self.eta is not None else " · estimating…"
            return f"{self.progress:.0%}{left}"
        return {"done": "100%", "skipped": "100%"}.get(self.status, "")


class QueueModel(QAbstractTableModel):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[QueueRow] = []

    # --- Qt model API ----------------------------------------------------------------------

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        row, col = self.rows[index.row()], index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == FILE:
                return row.path.name
            if col == DURATION:
                if row.duration is not None:
                    return clock(row.duration)
                return "" if row.status in FINISHED else "…"  # "…": not read yet
            if col == STATUS:
                return row.status_text
            return row.progress_text
        if role == Qt.ItemDataRole.ToolTipRole:
            return str(row.path) if col == FILE else row.status_text
        if role == Qt.ItemDataRole.ForegroundRole and col == STATUS and row.status == "failed":
            return QColor("#c0392b")
        if role == Qt.ItemDataRole.UserRole:
            return row
        return None

    # --- changes ---------------------------------------------------------------------------

    def add(self, row: QueueRow) -> None:
        n = len(self.rows)
        self.beginInsertRows(QModelIndex(), n, n)
        self.rows.append(row)
        self.endInsertRows()

    def remove(self, item_id: int) -> None:
        i = self.index_of(item_id)
        if i is not None:
            self.beginRemoveRows(QModelIndex(), i, i)
            del self.rows[i]
            self.endRemoveRows()

    def index_of(self, item_id: int) -> int | None:
        return next((i for i, r in enumerate(self.rows) if r.item_id == item_id), None)

    def row(self, item_id: int) -> QueueRow | None:
        i = self.index_of(item_id)
        return None if i is None else self.rows[i]

    def change(self, item_id: int, **fields) -> None:
        i = self.index_of(item_id)
        if i is None:
            return
        for k, v in fields.items():
            setattr(self.rows[i], k, v)
        self.dataChanged.emit(self.index(i, 0), self.index(i, len(COLUMNS) - 1))

    def next_queued(self) -> QueueRow | None:
        return next((r for r in self.rows if r.status == "queued"), None)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.rows:
            out[r.status] = out.get(r.status, 0) + 1
        return out


class ProgressDelegate(QStyledItemDelegate):
    """A native progress bar with the percentage and time left, in the Progress column."""

    def paint(self, painter, option, index: Index) -> None:
        row: QueueRow = index.data(Qt.ItemDataRole.UserRole)
        if row is None or row.status not in ("running", "done", "skipped"):
            super().paint(painter, option, index)
            return
        bar = QStyleOptionProgressBar()
        bar.rect = option.rect.adjusted(2, 3, -2, -3)
        bar.minimum, bar.maximum = 0, 1000
        bar.progress = 1000 if row.status != "running" else int(row.progress * 1000)
        bar.text = row.progress_text
        bar.textVisible = True
        bar.textAlignment = Qt.AlignmentFlag.AlignCenter
        bar.state = option.state | QStyle.StateFlag.State_Horizontal
        style = option.widget.style() if option.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ProgressBar, bar, painter, option.widget)
