"""The transcript view's edit actions, each one undoable step of its model's history:

- Undo / Redo (Ctrl+Z, Ctrl+Shift+Z or Ctrl+Y), named after what they undo;
- the speaker of the selected lines (Alt+1…9: the n-th speaker; Alt+0: a new speaker), or,
  in the line's editor, of the selected words (the same keys, or its right-click menu);
- split a line at the cursor (Ctrl+Enter in the editor) or before a word (right-click), join
  a line with the next (Ctrl+J); times follow the words;
- the right-click menu of the table, which also plays from the word or line clicked.

An edit that cannot be done (join two speakers' lines) says why in the view's banner and
changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QItemSelectionModel, QObject, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QInputDialog, QMenu

from ..transcript.edits import (
    Edit,
    JoinSegments,
    RenameSpeaker,
    SetSpeaker,
    SetWordsSpeaker,
    SplitSegment,
    SplitSegmentAt,
    Together,
    new_speaker_id,
)
from .segment_delegate import LineEditor
from .segments_model import TEXT


class TranscriptEditing(QObject):
    def __init__(self, view) -> None:
        super().__init__(view)
        self.view, self.model, self.table = view, view.model, view.table
        self.delegate = view.delegate
        self.undo_action = self._action("Undo", self.undo, QKeySequence("Ctrl+Z"))
        self.redo_action = self._action("Redo", self.redo, QKeySequence("Ctrl+Shift+Z"),
                                        QKeySequence("Ctrl+Y"))  # fmt: skip
        self.join_action = self._action("Join with the next line", self.join_selected,
                                        QKeySequence("Ctrl+J"))  # fmt: skip
        self.new_speaker_action = self._action("New speaker…", self.new_speaker_for_lines,
                                               QKeySequence("Alt+0"))  # fmt: skip
        for n in range(1, 10):
            self._action(f"Speaker {n}", lambda n=n: self.lines_to_speaker_number(n),
                         QKeySequence(f"Alt+{n}"))  # fmt: skip
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.table.customContextMenuRequested.connect(self.table_menu)
        self.delegate.split_requested.connect(self.split_at)
        self.delegate.speaker_key.connect(self.words_to_speaker_number)
        self.delegate.editor_menu.connect(self.editor_menu)
        self.model.history_changed.connect(self._history_changed)
        self._history_changed()

    def _action(self, text: str, slot: Callable, *keys) -> QAction:
        action = QAction(text, self.view)
        action.setShortcuts(list(keys))
        action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
        action.triggered.connect(lambda _checked=False: slot())
        self.view.addAction(action)
        return action

    # --- doing -----------------------------------------------------------------------------

    def do(self, edit: Edit, select: int | None = None) -> bool:
        """Apply ``edit``; False (and the reason shown) when it cannot be done."""
        try:
            self.model.do(edit)
        except (ValueError, IndexError) as e:
            self.view.banner.show_message(f"{edit.label}: {e}.", "warning")
            return False
        if select is not None:
            self.select(select)
        return True

    def undo(self) -> None:
        edit = self.model.undo()
        if edit is not None:
            self.view.ctx.status_message.emit(f"Undone: {edit.label}")

    def redo(self) -> None:
        edit = self.model.redo()
        if edit is not None:
            self.view.ctx.status_message.emit(f"Redone: {edit.label}")

    def _history_changed(self) -> None:
        h = self.model.history
        self.undo_action.setEnabled(h.can_undo)
        self.redo_action.setEnabled(h.can_redo)
        self.undo_action.setText(f"Undo {h.undo_label.lower()}" if h.can_undo else "Undo")
        self.redo_action.setText(f"Redo {h.redo_label.lower()}" if h.can_redo else "Redo")

    def select(self, row: int) -> None:
        row = min(max(0, row), self.model.rowCount() - 1)
        if row < 0:
            return
        index = self.model.index(row, TEXT)
        self.table.selectionModel().setCurrentIndex(
            index,
            QItemSelectionModel.SelectionFlag.ClearAndSelect
            | QItemSelectionModel.SelectionFlag.Rows,
        )
        self.table.scrollTo(index)

    def selected_rows(self) -> list[int]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        current = self.table.currentIndex()
        return rows or ([current.row()] if current.isValid() else [])

    # --- speakers --------------------------------------------------------------------------

    def speakers(self) -> list[str]:
        """The speakers Alt+1…9 stand for, in the order the list shows them."""
        return self.view.transcript.speaker_ids()

    def lines_to_speaker(self, speaker: str, rows: list[int] | None = None) -> bool:
        rows = self.selected_rows() if rows is None else rows
        if not rows:
            return False
        return self.do(SetSpeaker(rows, speaker), select=rows[0])

    def lines_to_speaker_number(self, n: int) -> None:
        ids = self.speakers()
        if n <= len(ids):
            self.lines_to_speaker(ids[n - 1])

    def _ask_new_speaker(self) -> tuple[str, str | None] | None:
        """(new id, its name or None for the default) from a dialog; None if cancelled."""
        t = self.view.transcript
        sid = new_speaker_id(t)
        default = t.speaker_name(sid)
        name, ok = QInputDialog.getText(self.view, "New speaker", "Name of the new speaker:",
                                        text=default)  # fmt: skip
        if not ok:
            return None
        name = name.strip()
        return sid, (name if name and name != default else None)

    def _with_new_speaker(self, sid: str, name: str | None, edit: Edit) -> Edit:
        edits = [edit] if name is None else [RenameSpeaker(sid, name), edit]
        return Together("New speaker", edits)

    def new_speaker_for_lines(self, rows: list[int] | None = None) -> None:
        rows = self.selected_rows() if rows is None else rows
        if not rows:
            return
        chosen = self._ask_new_speaker()
        if chosen is not None:
            sid, name = chosen
            self.do(self._with_new_speaker(sid, name, SetSpeaker(rows, sid)), select=rows[0])

    def words_edit(self, row: int, chars: tuple[int, int], speaker: str) -> Edit | None:
        """The edit giving the words over characters ``chars`` of line ``row`` to ``speaker``."""
        spans = self.model.word_spans(row)
        a, b = chars
        inside = [k for k, (s, e) in enumerate(spans) if e > a and s < b]
        if not spans or not inside:
            self.view.banner.show_message(
                "This line has no word times to give words to a speaker: split it at the "
                "cursor (Ctrl+Enter) and set the speaker of the new line.", "warning",
            )  # fmt: skip
            return None
        return SetWordsSpeaker(row, inside[0], inside[-1], speaker)

    def words_to_speaker(self, editor: LineEditor, speaker: str | None) -> None:
        """The words selected in ``editor`` were said by ``speaker`` (None: a new one)."""
        chars, row = editor.selection(), editor.row
        if chars is None:
            self.view.banner.show_message("Select the words first, then choose who said them.",
                                          "warning")  # fmt: skip
            return
        self.delegate.finish(editor)  # what was typed first
        if speaker is None:
            chosen = self._ask_new_speaker()
            if chosen is None:
                return
            sid, name = chosen
            edit = self.words_edit(row, chars, sid)
            if edit is not None:
                self.do(self._with_new_speaker(sid, name, edit), select=row)
            return
        edit = self.words_edit(row, chars, speaker)
        if edit is not None:
            self.do(edit, select=row)

    def words_to_speaker_number(self, editor: LineEditor, n: int) -> None:
        ids = self.speakers()
        if n <= len(ids):
            self.words_to_speaker(editor, ids[n - 1])

    # --- split and join --------------------------------------------------------------------

    def split_at(self, row: int, offset: int) -> None:
        """Split line ``row`` at character ``offset`` of its shown text."""
        at = offset + self.model.text_offset(row)
        self.do(SplitSegmentAt(row, at), select=row + 1)

    def split_before_word(self, row: int, word: int) -> None:
        self.do(SplitSegment(row, word), select=row + 1)

    def join(self, row: int) -> None:
        self.do(JoinSegments(row), select=row)

    def join_selected(self) -> None:
        rows = self.selected_rows()
        if rows:
            self.join(rows[0])

    # --- menus -----------------------------------------------------------------------------

    def _speaker_menu(self, menu: QMenu, title: str, choose: Callable[[str | None], None]):
        sub = menu.addMenu(title)
        t = self.view.transcript
        for n, sid in enumerate(self.speakers(), start=1):
            action = sub.addAction(t.speaker_name(sid), lambda sid=sid: choose(sid))
            if n <= 9:
                action.setShortcut(QKeySequence(f"Alt+{n}"))
        if self.speakers():
            sub.addSeparator()
        sub.addAction("New speaker…", lambda: choose(None)).setShortcut(QKeySequence("Alt+0"))
        return sub

    def table_menu(self, pos) -> None:
        index = self.table.indexAt(pos)
        if not index.isValid():
            return
        row = index.row()
        if row not in self.selected_rows():
            self.select(row)
        rows = self.selected_rows()
        word = None
        if index.column() == TEXT:
            offset = self.delegate.offset_at(index, self.table.visualRect(index), pos,
                                             self.table.font())  # fmt: skip
            word = self.model.word_at(row, offset) if offset is not None else None
        seg = self.model.transcript.segments[row]
        menu = QMenu(self.table)
        if word is not None:
            said = seg.words[word].text.strip()
            menu.addAction(f"Play from “{said}”", lambda: self.view.play_at(seg.words[word].start))
        menu.addAction("Play from this line", lambda: self.view.play_from(row))
        menu.addSeparator()
        edit = menu.addAction("Edit text", lambda: self.table.edit(self.model.index(row, TEXT)))
        edit.setShortcut(QKeySequence(Qt.Key.Key_F2))
        lines = "these lines" if len(rows) > 1 else "this line"
        self._speaker_menu(menu, f"Who said {lines}",
                           lambda sid: self.lines_to_speaker(sid, rows) if sid else
                           self.new_speaker_for_lines(rows))  # fmt: skip
        if word:
            said = seg.words[word].text.strip()
            menu.addAction(f"Split before “{said}”", lambda: self.split_before_word(row, word))
        join = menu.addAction(self.join_action.text(), lambda: self.join(row))
        join.setShortcut(self.join_action.shortcut())
        join.setEnabled(row + 1 < self.model.rowCount())
        menu.addSeparator()
        menu.addAction(self.undo_action)
        menu.addAction(self.redo_action)
        menu.exec(self.table.viewport().mapToGlobal(pos))
        menu.deleteLater()

    def editor_menu(self, editor: LineEditor, menu: QMenu) -> None:
        menu.addSeparator()
        split = menu.addAction("Split the line here",
                               lambda: self._split_in_editor(editor))  # fmt: skip
        split.setShortcut(QKeySequence("Ctrl+Return"))
        sub = self._speaker_menu(menu, "Who said the selected words",
                                 lambda sid: self.words_to_speaker(editor, sid))  # fmt: skip
        sub.setEnabled(editor.hasSelectedText())

    def _split_in_editor(self, editor: LineEditor) -> None:
        row, at = editor.row, editor.cursor()
        self.delegate.finish(editor)
        self.split_at(row, at)
