"""The Library page: every live session and file job, searchable; open, rename, delete, reveal.

Searches run on a worker thread (the newest one wins); the list refreshes whenever the app says
the library changed (`AppContext.library_changed`). "Ask…" opens `AskDialog`, a question across
the library answered by the language model; a line it cites, clicked, is re-emitted as
``open_at(item_id, seconds)`` for the window to open that recording there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ..library import Item
from .queue_model import STATUS_TEXT
from .table_model import RowTableModel
from .widgets import Banner, clock, heading, select_rows
from .workers import run_in_worker

COLUMNS = ("Title", "Kind", "Date", "Length", "Status")
TITLE, KIND, DATE, LENGTH, STATUS = range(5)
Index = QModelIndex | QPersistentModelIndex


class LibraryModel(RowTableModel):
    COLUMNS = COLUMNS

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.items: list[Item] = []

    def set_items(self, items: list[Item]) -> None:
        self.beginResetModel()
        self.items = items
        self.endResetModel()

    def row_objects(self) -> list[Item]:
        return self.items

    def cell(self, item: Item, _row: int, col: int, role: int):
        if role == Qt.ItemDataRole.DisplayRole:
            if col == TITLE:
                return item.title
            if col == KIND:
                return "Live session" if item.kind == "live" else "File"
            if col == DATE:
                return item.created.strftime("%Y-%m-%d %H:%M")
            if col == LENGTH:
                return clock(item.duration) if item.duration else ""
            return STATUS_TEXT.get(item.status, item.status)
        if role == Qt.ItemDataRole.ToolTipRole:
            return item.error if col == STATUS and item.error else item.source
        return None


class LibraryPanel(QWidget):
    open_at = Signal(int, float)  # a line an answer cites: its item id, its start in seconds

    def __init__(self, ctx, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.model = LibraryModel(self)
        self._search_seq = 0
        self.ask_dialog = None  # the Ask dialog, once opened (kept with its last answer)

        self.search_edit = QLineEdit()
        self.search_edit.setPlaceholderText("Search titles, file names and transcripts")
        self.search_edit.setClearButtonEnabled(True)
        self.kind = QComboBox()
        self.kind.addItem("Everything", None)
        self.kind.addItem("Live sessions", "live")
        self.kind.addItem("Files", "file")
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(200)
        self._debounce.timeout.connect(self.refresh)
        self.search_edit.textChanged.connect(lambda _t: self._debounce.start())
        self.kind.currentIndexChanged.connect(lambda _i: self.refresh())
        self.ask_button = QPushButton("Ask…")
        self.ask_button.setToolTip(
            "Ask a question across your recordings: a language model answers from the "
            "transcripts that match it best, citing their lines"
        )
        self.ask_button.clicked.connect(self.ask)

        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(TITLE, QHeaderView.ResizeMode.Stretch)
        for col in (KIND, DATE, LENGTH, STATUS):
            header.setSectionResizeMode(col, QHeaderView.ResizeMode.ResizeToContents)
        self.table.doubleClicked.connect(lambda _i: self.open_selected())
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())

        self.open_button = QPushButton("Open")
        self.rename_button = QPushButton("Rename…")
        self.reveal_button = QPushButton("Show in folder")
        self.delete_button = QPushButton("Delete…")
        self.open_button.clicked.connect(self.open_selected)
        self.rename_button.clicked.connect(self.rename_selected)
        self.reveal_button.clicked.connect(self.reveal_selected)
        self.delete_button.clicked.connect(self.delete_selected)
        QShortcut(QKeySequence.StandardKey.Delete, self.table, self.delete_selected)
        QShortcut(QKeySequence(Qt.Key.Key_F2), self.table, self.rename_selected)
        QShortcut(QKeySequence(Qt.Key.Key_Return), self.table, self.open_selected)

        self.banner = Banner()
        top = QHBoxLayout()
        top.addWidget(self.search_edit, 1)
        top.addWidget(self.kind)
        top.addWidget(self.ask_button)
        buttons = QHBoxLayout()
        for b in (self.open_button, self.rename_button, self.reveal_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.delete_button)
        layout = QVBoxLayout(self)
        layout.addWidget(heading("Library"))
        layout.addWidget(self.banner)
        layout.addLayout(top)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)

        ctx.library_changed.connect(self.refresh)
        self._update_buttons()
        self.refresh()

    # --- listing -------------------------------------------------------------------------

    def refresh(self) -> None:
        self._search_seq += 1
        seq, text, kind = self._search_seq, self.search_edit.text(), self.kind.currentData()
        run_in_worker(
            self.ctx.library.search, text, kind,
            on_done=lambda items: self._show(seq, items),
            on_error=lambda e: self.banner.show_message(f"The library cannot be read: {e}", "error"),
            name="library-search",
        )  # fmt: skip

    def _show(self, seq: int, items: list[Item]) -> None:
        if seq != self._search_seq:
            return  # an older search finishing late
        selected = {i.id for i in self.selected_items()}
        self.model.set_items(items)
        select_rows(self.table, [row for row, item in enumerate(items) if item.id in selected])
        self._update_buttons()

    @property
    def searching(self) -> bool:
        return self._debounce.isActive()

    def selected_items(self) -> list[Item]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [self.model.items[r] for r in rows if r < len(self.model.items)]

    def select(self, item_id: int) -> None:
        for row, item in enumerate(self.model.items):
            if item.id == item_id:
                select_rows(self.table, [row])
                return

    def _update_buttons(self) -> None:
        items = self.selected_items()
        one = len(items) == 1
        self.open_button.setEnabled(one and items[0].transcript_path is not None)
        self.rename_button.setEnabled(one)
        self.reveal_button.setEnabled(one)
        self.delete_button.setEnabled(bool(items))

    # --- actions ---------------------------------------------------------------------------

    def ask(self) -> None:
        """Open the Ask dialog (one, kept with its last answer, not modal)."""
        from .ask_dialog import AskDialog

        if self.ask_dialog is None:
            self.ask_dialog = AskDialog(self.ctx, self)
            self.ask_dialog.open_at.connect(self.open_at)
        self.ask_dialog.show()
        self.ask_dialog.raise_()
        self.ask_dialog.activateWindow()
        self.ask_dialog.question.setFocus()

    def open_selected(self) -> None:
        items = self.selected_items()
        if items and items[0].transcript_path:
            self.ctx.open_transcript.emit(items[0].id)
        elif items:
            self.banner.show_message(
                f"'{items[0].title}' has no transcript yet ({items[0].status}).", "info"
            )

    def rename_selected(self) -> None:
        items = self.selected_items()
        if not items:
            return
        title, ok = QInputDialog.getText(self, "Rename", "New title:", text=items[0].title)
        if ok and title.strip():
            self.rename(items[0].id, title.strip())

    def rename(self, item_id: int, title: str) -> None:
        self.ctx.library.update(item_id, title=title)
        self.ctx.library_changed.emit()

    def delete_selected(self) -> None:
        items = self.selected_items()
        if not items:
            return
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Delete from the library")
        names = items[0].title if len(items) == 1 else f"{len(items)} items"
        box.setText(f"Delete {names} from the library?")
        box.setInformativeText(
            "Transcripts and edits made in DeskScribe are deleted. Your own audio and video "
            "files are never deleted."
        )
        also_audio = None
        if any(i.kind == "live" for i in items):
            also_audio = QCheckBox("Also delete the recorded audio of live sessions")
            box.setCheckBox(also_audio)
        box.setStandardButtons(QMessageBox.StandardButton.Cancel)
        delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        if box.clickedButton() is delete:
            files = also_audio is not None and also_audio.isChecked()
            self.delete([i.id for i in items], delete_files=files)

    def delete(self, ids: list[int], delete_files: bool = False) -> None:
        library = self.ctx.library
        run_in_worker(
            lambda: [library.delete(i, delete_files=delete_files) for i in ids],
            on_done=lambda _r: self.ctx.library_changed.emit(),
            on_error=lambda e: self.banner.show_message(f"Could not delete: {e}", "error"),
            name="library-delete",
        )

    def reveal_selected(self) -> None:
        items = self.selected_items()
        if not items:
            return
        path = Path(items[0].source)
        if not path.exists():
            self.banner.show_message(f"'{path}' no longer exists; it was moved or deleted.")
            return
        from ..models.store import reveal_command

        try:
            subprocess.Popen(reveal_command(path), start_new_session=True)
        except OSError as e:
            self.banner.show_message(f"Could not open the file manager: {e}", "error")
