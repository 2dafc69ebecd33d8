"""The find bar of the transcript view (Ctrl+F): type to highlight, Enter for the next match."""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QTableView, QWidget

from .segments_model import TEXT, SegmentsModel


class FindBar(QWidget):
    def __init__(self, model: SegmentsModel, table: QTableView, parent=None) -> None:
        super().__init__(parent)
        self.model, self.table = model, table
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("Find in transcript")
        self.edit.setClearButtonEnabled(True)
        self.edit.textChanged.connect(self.search)
        self.edit.returnPressed.connect(self.next)
        self.count = QLabel()
        next_button = QPushButton("Next")
        next_button.clicked.connect(self.next)
        close = QPushButton("×")
        close.setFlat(True)
        close.setToolTip("Close (Esc)")
        close.clicked.connect(self.close_bar)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for w in (self.edit, self.count, next_button, close):
            layout.addWidget(w)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self.close_bar)
        self._current = -1
        self.hide()

    def open_bar(self) -> None:
        self.show()
        self.edit.setFocus()
        self.edit.selectAll()

    def close_bar(self) -> None:
        self.hide()
        self.model.find("")
        self.table.setFocus()

    def refresh(self) -> None:
        """Search again (the transcript changed under the bar)."""
        if self.isVisible():
            self.search(self.edit.text())

    def search(self, text: str) -> None:
        matches = self.model.find(text)
        self._current = -1
        self.count.setText(f"{len(matches)} found" if text.strip() else "")
        if matches:
            self.next()

    def next(self) -> None:
        matches = self.model.matches
        if not matches:
            return
        self._current = (self._current + 1) % len(matches)
        index = self.model.index(matches[self._current], TEXT)
        self.table.selectionModel().setCurrentIndex(
            index,
            QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows,
        )
        self.table.scrollTo(index)
        self.count.setText(f"{self._current + 1} of {len(matches)}")
