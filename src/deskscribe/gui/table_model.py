"""`RowTableModel`: the plumbing every table of the app shares (the file queue, the library,
a transcript's lines): one row per object, named columns, the object itself under
``UserRole``. A table says what its rows are (``row_objects``) and what a cell shows
(``cell``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt

Index = QModelIndex | QPersistentModelIndex


class RowTableModel(QAbstractTableModel):
    COLUMNS: tuple[str, ...] = ()

    def row_objects(self) -> Sequence[Any]:
        raise NotImplementedError

    def cell(self, obj: Any, row: int, column: int, role: int) -> Any:
        """What ``role`` shows of ``obj`` (row ``row``) in ``column``; None: nothing."""
        raise NotImplementedError

    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.row_objects())

    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.COLUMNS)

    def headerData(self, section: int, orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.COLUMNS[section]
        return None

    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        obj = self.row_objects()[index.row()]
        if role == Qt.ItemDataRole.UserRole:
            return obj
        return self.cell(obj, index.row(), index.column(), role)

    def row_changed(self, row: int) -> None:
        """Redraw every cell of ``row``."""
        self.dataChanged.emit(self.index(row, 0), self.index(row, len(self.COLUMNS) - 1))
