"""The find and replace bar of the transcript view: Ctrl+F finds (type to highlight, Enter for
the next match), Ctrl+H also replaces, one match or all, with Match case and Whole words;
each replacement is one undoable edit and says how many it changed."""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableView,
    QWidget,
)

from ..transcript.edits import NothingFound, Replace
from .segments_model import TEXT, SegmentsModel


class FindBar(QWidget):
    def __init__(self, model: SegmentsModel, table: QTableView, parent=None) -> None:
        super().__init__(parent)
        self.model, self.table = model, table
        self.edit = QLineEdit()
        self.edit.setPlaceholderText("Find in transcript")
        self.edit.setClearButtonEnabled(True)
        self.edit.textChanged.connect(lambda _t: self.search())
        self.edit.returnPressed.connect(self.next)
        self.case = QCheckBox("Match case")
        self.whole = QCheckBox("Whole words")
        for box in (self.case, self.whole):
            box.toggled.connect(lambda _on: self.search())
        self.count = QLabel()
        self.count.setMinimumWidth(90)
        previous = QPushButton("Previous")
        previous.clicked.connect(self.previous)
        next_button = QPushButton("Next")
        next_button.clicked.connect(self.next)
        self.replace_toggle = QPushButton("Replace…")
        self.replace_toggle.setCheckable(True)
        self.replace_toggle.setToolTip("Replace matches (Ctrl+H)")
        self.replace_toggle.toggled.connect(self._show_replace)
        close = QPushButton("×")
        close.setFlat(True)
        close.setToolTip("Close (Esc)")
        close.clicked.connect(self.close_bar)

        self.replacement = QLineEdit()
        self.replacement.setPlaceholderText("Replace with")
        self.replacement.returnPressed.connect(self.replace_one)
        self.replace_button = QPushButton("Replace")
        self.replace_button.setToolTip("Replace the match in the selected line, then find the next")
        self.replace_button.clicked.connect(self.replace_one)
        self.replace_all_button = QPushButton("Replace all")
        self.replace_all_button.clicked.connect(self.replace_all)
        self.replace_row = QWidget()
        rl = QHBoxLayout(self.replace_row)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.replacement, 1)
        rl.addWidget(self.replace_button)
        rl.addWidget(self.replace_all_button)
        self.replace_row.hide()

        layout = QGridLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setVerticalSpacing(4)
        top = QHBoxLayout()
        top.addWidget(self.edit, 1)
        for w in (self.case, self.whole, self.count, previous, next_button, self.replace_toggle,
                  close):  # fmt: skip
            top.addWidget(w)
        layout.addLayout(top, 0, 0)
        layout.addWidget(self.replace_row, 1, 0)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self.close_bar)
        self._current = -1
        self.hide()

    def open_bar(self, replace: bool = False) -> None:
        self.show()
        if replace:
            self.replace_toggle.setChecked(True)
        self.edit.setFocus()
        self.edit.selectAll()

    def close_bar(self) -> None:
        self.hide()
        self.replace_toggle.setChecked(False)
        self.model.find("")
        self.table.setFocus()

    def _show_replace(self, on: bool) -> None:
        self.replace_row.setVisible(on)
        if on and self.edit.text():
            self.replacement.setFocus()

    def refresh(self) -> None:
        """Search again (another transcript is shown; edits are searched again by the
        model itself)."""
        if self.isVisible():
            self.search()

    def search(self) -> None:
        text = self.edit.text()
        matches = self.model.find(text, self.case.isChecked(), self.whole.isChecked())
        self._current = -1
        self.count.setText(f"{len(matches)} found" if text.strip() else "")
        if matches:
            self.next()

    def next(self) -> None:
        self._step(1)

    def previous(self) -> None:
        self._step(-1)

    def _step(self, by: int) -> None:
        matches = self.model.matches
        if not matches:
            return
        self._current = (self._current + by) % len(matches)
        self._select(matches[self._current])
        self.count.setText(f"{self._current + 1} of {len(matches)}")

    def _select(self, row: int) -> None:
        index = self.model.index(row, TEXT)
        self.table.selectionModel().setCurrentIndex(
            index,
            QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows,
        )
        self.table.scrollTo(index)

    # --- replacing -------------------------------------------------------------------------

    def _replace(self, **where) -> Replace | None:
        find = self.edit.text().strip()
        if not find:
            self.count.setText("Type what to find")
            return None
        edit = Replace(find, self.replacement.text(), case_sensitive=self.case.isChecked(),
                       whole_word=self.whole.isChecked(), **where)  # fmt: skip
        try:
            self.model.do(edit)
        except NothingFound:
            return None
        return edit

    def replace_one(self) -> None:
        """Replace the first match in the current match's line (the selected line when it
        matches), then go to the next match."""
        matches = self.model.matches
        if not matches:
            return
        current = self.table.currentIndex().row()
        rows = [current] if current in matches else []
        rows += [r for r in matches if r >= max(current, 0) and r != current] + matches
        for row in rows:
            if self._replace(index=row, position=0) is not None:
                after = [i for i, r in enumerate(self.model.matches) if r >= row]
                self._current = (after[0] if after else 0) - 1
                self.next()
                if not self.model.matches:
                    self.count.setText("Replaced the last one")
                return
        self.count.setText("0 replaced")

    def replace_all(self) -> None:
        edit = self._replace()
        n = edit.count if edit is not None else 0
        self.count.setText(f"{n} replaced")
