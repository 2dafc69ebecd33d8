"""How a line's text is drawn and edited in the transcript table.

`TextDelegate` draws the text with the word being heard marked (karaoke), sizes the row for
the wrapped text, and finds the character under the mouse (a click on a word seeks there). Its
editor, `LineEditor`, adds to the usual text editing: Ctrl+Enter splits the line at the
cursor, Alt+1..9 gives the selected words to a speaker, and its right-click menu carries the
view's word actions (``editor_menu``).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QPoint, QPointF, QRect, QSize, Qt, Signal
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QKeyEvent,
    QPalette,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextOption,
)
from PySide6.QtWidgets import (
    QApplication,
    QLineEdit,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
)

from .segments_model import WORD_BG

MARGIN = 3  # px around the text in its cell


def normalized_offset(text: str, offset: int) -> int:
    """``offset`` in ``text`` once runs of spaces are one space and the ends trimmed (what the
    model keeps of typed text)."""
    before = text[:offset]
    out = len(" ".join(before.split()))
    if before.strip() and before[-1].isspace() and text[offset:].strip():
        out += 1  # the space the cursor is after is kept
    return out


def _top(doc: QTextDocument, rect: QRect) -> int:
    """Where the text starts in its cell: centred, as the time and the speaker are."""
    return max(0, (rect.height() - int(doc.size().height())) // 2)


class LineEditor(QLineEdit):
    """The editor of one line's text (it knows its row)."""

    menu_opening = Signal(object, object)  # (this editor, the QMenu about to be shown)

    def __init__(self, row: int, parent=None) -> None:
        super().__init__(parent)
        self.row = row
        self.setToolTip(
            "Enter: done · Ctrl+Enter: split the line here · Alt+1…9: the selected words "
            "were said by that speaker · Esc: cancel"
        )

    def selection(self) -> tuple[int, int] | None:
        """The selected characters (start, end) of the text as the model keeps it."""
        if not self.hasSelectedText():
            return None
        a = self.selectionStart()
        b = a + len(self.selectedText())
        text = self.text()
        return normalized_offset(text, a), normalized_offset(text, b)

    def cursor(self) -> int:
        return normalized_offset(self.text(), self.cursorPosition())

    def contextMenuEvent(self, event) -> None:
        menu = self.createStandardContextMenu()
        self.menu_opening.emit(self, menu)
        menu.exec(event.globalPos())
        menu.deleteLater()


class TextDelegate(QStyledItemDelegate):
    split_requested = Signal(int, int)  # (row, character of the text) from Ctrl+Enter
    speaker_key = Signal(object, int)  # (editor, 1..9) from Alt+digit in the editor
    editor_menu = Signal(object, object)  # (editor, menu): add the view's actions

    def __init__(self, model, parent=None) -> None:
        super().__init__(parent)
        self.model = model

    # --- drawing ---------------------------------------------------------------------------

    def document(self, index, width: int, font) -> QTextDocument:
        doc = QTextDocument()
        doc.setDocumentMargin(MARGIN)
        doc.setDefaultFont(font)
        option = QTextOption()
        option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        doc.setDefaultTextOption(option)
        doc.setPlainText(str(index.data() or ""))
        doc.setTextWidth(max(20, width))
        row, word = self.model.playing, self.model.playing_word
        if index.row() == row and word is not None:
            spans = self.model.word_spans(row)
            if 0 <= word < len(spans):
                a, b = spans[word]
                cursor = QTextCursor(doc)
                cursor.setPosition(max(0, a))
                cursor.setPosition(min(b, len(doc.toPlainText())), QTextCursor.MoveMode.KeepAnchor)
                mark = QTextCharFormat()
                mark.setBackground(WORD_BG)
                cursor.mergeCharFormat(mark)
        return doc

    def paint(self, painter, option, index) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        opt.text = ""
        widget = opt.widget
        style = widget.style() if widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)
        doc = self.document(index, opt.rect.width(), opt.font)
        context = QAbstractTextDocumentLayout.PaintContext()
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        role = QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text
        context.palette.setColor(QPalette.ColorRole.Text, opt.palette.color(role))
        painter.save()
        painter.translate(opt.rect.topLeft() + QPoint(0, _top(doc, opt.rect)))
        painter.setClipRect(QRect(0, 0, opt.rect.width(), opt.rect.height()))
        doc.documentLayout().draw(painter, context)
        painter.restore()

    def sizeHint(self, option, index) -> QSize:
        view = self.parent()
        width = view.columnWidth(index.column()) if view is not None else option.rect.width()
        doc = self.document(index, width, option.font)
        return QSize(int(doc.idealWidth()), int(doc.size().height()) + 1)

    def offset_at(self, index, rect: QRect, point: QPoint, font) -> int | None:
        """The character of ``index``'s text under ``point`` (viewport coordinates), or None
        when the point is not on the text."""
        doc = self.document(index, rect.width(), font)
        local = QPointF(point - rect.topLeft() - QPoint(0, _top(doc, rect)))
        if local.y() > doc.size().height() - MARGIN:
            return None
        at = doc.documentLayout().hitTest(local, Qt.HitTestAccuracy.FuzzyHit)
        return None if at < 0 else at

    # --- editing ---------------------------------------------------------------------------

    def createEditor(self, parent, option, index) -> LineEditor:
        editor = LineEditor(index.row(), parent)
        editor.setFrame(False)
        editor.menu_opening.connect(self.editor_menu)
        return editor

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if isinstance(obj, LineEditor) and isinstance(event, QKeyEvent):
            mods = event.modifiers()
            ctrl = mods & Qt.KeyboardModifier.ControlModifier
            alt = mods & Qt.KeyboardModifier.AltModifier
            split = ctrl and event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
            digit = alt and Qt.Key.Key_1 <= event.key() <= Qt.Key.Key_9
            if (split or digit) and event.type() == QEvent.Type.ShortcutOverride:
                event.accept()  # the editor's, not the view's shortcut
                return True
            if split and event.type() == QEvent.Type.KeyPress:
                row, at = obj.row, obj.cursor()
                self.finish(obj)
                self.split_requested.emit(row, at)
                return True
            if digit and event.type() == QEvent.Type.KeyPress:
                self.speaker_key.emit(obj, event.key() - Qt.Key.Key_0)
                return True
        return super().eventFilter(obj, event)

    def finish(self, editor: LineEditor) -> None:
        """Keep what was typed and close the editor."""
        self.commitData.emit(editor)
        self.closeEditor.emit(editor, QStyledItemDelegate.EndEditHint.NoHint)
