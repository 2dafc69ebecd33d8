"""The file queue as a Qt table model, and the delegate that draws its progress bars.

A row mirrors one entry of the service's `FileQueue` (one library item): the model holds only
what the table shows and is refreshed from the queue's entries (`sync`), never changed by
hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionProgressBar

from ..service.file_queue import Entry, Status
from .table_model import RowTableModel
from .widgets import clock

COLUMNS = ("File", "Duration", "Status", "Progress")
FILE, DURATION, STATUS, PROGRESS = range(4)
STATUS_TEXT = {
    "queued": "Waiting",
    "waiting": "Waiting for a model",
    "running": "Transcribing",
    "done": "Done",
    "failed": "Failed",
    "cancelled": "Cancelled",
    "skipped": "Already transcribed",
}
Index = QModelIndex | QPersistentModelIndex


@dataclass(frozen=True)
class QueueRow:
    """What the table shows of one `file_queue.Entry`."""

    item_id: int
    path: Path
    status: str = "queued"  # the entry's Status, as its word
    duration: float | None = None
    progress: float = 0.0
    eta: float | None = None
    error: str | None = None  # the reason a file failed (or a note on a finished one)
    server_failed: bool = False

    @classmethod
    def of(cls, e: Entry) -> QueueRow:
        return cls(e.item_id, e.path, e.status.value, e.duration, e.progress, e.eta, e.error,
                   e.server_failed)  # fmt: skip

    @property
    def status_text(self) -> str:
        text = STATUS_TEXT.get(self.status, self.status)
        if self.status == "waiting":
            return text
        return f"{text}: {self.error}" if self.error else text

    @property
    def progress_text(self) -> str:
        if self.status == "running":
            left = f" · {clock(self.eta)} left" if self.eta is not None else " · estimating…"
            return f"{self.progress:.0%}{left}"
        return {"done": "100%", "skipped": "100%"}.get(self.status, "")


class QueueModel(RowTableModel):
    COLUMNS = COLUMNS

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[QueueRow] = []

    def row_objects(self) -> list[QueueRow]:
        return self.rows

    def cell(self, row: QueueRow, _i: int, col: int, role: int):
        if role == Qt.ItemDataRole.DisplayRole:
            if col == FILE:
                return row.path.name
            if col == DURATION:
                if row.duration is not None:
                    return clock(row.duration)
                return "" if Status(row.status).finished else "…"  # "…": not read yet
            if col == STATUS:
                return row.status_text
            return row.progress_text
        if role == Qt.ItemDataRole.ToolTipRole:
            return str(row.path) if col == FILE else row.status_text
        if role == Qt.ItemDataRole.ForegroundRole and col == STATUS and row.status == "failed":
            return QColor("#c0392b")
        return None

    # --- refreshed from the queue -------------------------------------------------------------

    def sync(self, entries: list[Entry]) -> None:
        """Show ``entries`` (the queue's, in its order): rows that are gone removed, new ones
        added at the end (the queue only appends), changed ones redrawn; a selection on the
        rows that stay is kept."""
        keep = {e.item_id for e in entries}
        for i in reversed(range(len(self.rows))):
            if self.rows[i].item_id not in keep:
                self.beginRemoveRows(QModelIndex(), i, i)
                del self.rows[i]
                self.endRemoveRows()
        have = {r.item_id: i for i, r in enumerate(self.rows)}
        new = [QueueRow.of(e) for e in entries if e.item_id not in have]
        for e in entries:
            i = have.get(e.item_id)
            if i is not None and self.rows[i] != (row := QueueRow.of(e)):
                self.rows[i] = row
                self.row_changed(i)
        if new:
            n = len(self.rows)
            self.beginInsertRows(QModelIndex(), n, n + len(new) - 1)
            self.rows.extend(new)
            self.endInsertRows()

    def index_of(self, item_id: int) -> int | None:
        return next((i for i, r in enumerate(self.rows) if r.item_id == item_id), None)

    def row(self, item_id: int) -> QueueRow | None:
        i = self.index_of(item_id)
        return None if i is None else self.rows[i]

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
