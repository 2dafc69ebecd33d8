"""The rolling live transcript: a list model of committed segments plus the tentative words,
a delegate that draws them (speaker colours, tentative words grey and italic) and edits finished
segments in place, and a view that follows the live end until the user scrolls up."""

from __future__ import annotations

import html

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QRect,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import QAbstractTextDocumentLayout, QKeyEvent, QPalette, QTextDocument
from PySide6.QtWidgets import (
    QAbstractItemView,
    QListView,
    QPlainTextEdit,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QWidget,
)

from ..transcript import Segment, Word
from ..transcript.model import default_speaker_name
from .widgets import clock, speaker_color

SegmentRole = Qt.ItemDataRole.UserRole + 1
TentativeRole = Qt.ItemDataRole.UserRole + 2
OpenRole = Qt.ItemDataRole.UserRole + 3
GUTTER = 56  # px for the time stamp on the left


class LiveTranscriptModel(QAbstractListModel):
    """Rows are committed segments by id; the growing segment shows the tentative words after
    its text, and when no segment is growing they get a row of their own at the end."""

    edited = Signal(int, str)  # segment id, new text (the user corrected a finished segment)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.segments: list[Segment] = []
        self._rows: dict[int, int] = {}
        self.open_id: int | None = None
        self.tentative = ""
        self.speakers: list[str] = []  # in order of appearance, for colours
        self.editable = True
        self.edited_ids: set[int] = set()  # corrected by the user: later updates keep the text

    def clear(self) -> None:
        self.beginResetModel()
        self.segments, self._rows, self.speakers, self.edited_ids = [], {}, [], set()
        self.open_id, self.tentative = None, ""
        self.endResetModel()

    def text(self) -> str:
        return " ".join(s.text.strip() for s in self.segments if s.text.strip())

    def _has_tentative_row(self) -> bool:
        return bool(self.tentative) and self.open_id not in self._rows

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.segments) + self._has_tentative_row()

    def data(
        self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole
    ):
        row = index.row()
        if row >= len(self.segments):  # the tentative-only row
            if role == TentativeRole:
                return self.tentative
            if role == Qt.ItemDataRole.DisplayRole:
                return self.tentative
            if role == OpenRole:
                return True
            return None
        seg = self.segments[row]
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            return seg.text.strip()
        if role == SegmentRole:
            return seg
        if role == OpenRole:
            return seg.id == self.open_id
        if role == TentativeRole:
            return self.tentative if seg.id == self.open_id else ""
        if role == Qt.ItemDataRole.ToolTipRole and seg.id != self.open_id and self.editable:
            return "Double-click to correct this line"
        return None

    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        base = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        row = index.row()
        if self.editable and row < len(self.segments) and self.segments[row].id != self.open_id:
            return base | Qt.ItemFlag.ItemIsEditable
        return base

    def setData(self, index, value, role: int = Qt.ItemDataRole.EditRole) -> bool:
        if role != Qt.ItemDataRole.EditRole or not (self.flags(index) & Qt.ItemFlag.ItemIsEditable):
            return False
        seg = self.segments[index.row()]
        text = str(value).strip()
        if text == seg.text.strip():
            return False
        seg.text = " " + text if seg.text.startswith(" ") else text
        self.edited_ids.add(seg.id)
        self.dataChanged.emit(index, index)
        self.edited.emit(seg.id, seg.text)
        return True

    def apply(self, segments: list[Segment], tentative: list[Word], open_id: int | None) -> None:
        """Upsert segments by id and set the tentative words (a live `TextUpdate`)."""
        had_tentative_row = self._has_tentative_row()
        old_open = self.open_id
        self.open_id = open_id
        self.tentative = "".join(w.text for w in tentative).strip()
        for seg in segments:
            self._note_speaker(seg)
            row = self._rows.get(seg.id)
            if row is None:
                row = len(self.segments)
                if had_tentative_row:  # the pending row turns into this segment
                    self.segments.append(seg)
                    self._rows[seg.id] = row
                    had_tentative_row = False
                    self._changed(row)
                    continue
                self.beginInsertRows(QModelIndex(), row, row)
                self.segments.append(seg)
                self._rows[seg.id] = row
                self.endInsertRows()
            elif seg.id not in self.edited_ids:
                self.segments[row] = seg
                self._changed(row)
        for sid in {old_open, open_id} - {None}:
            if sid in self._rows:
                self._changed(self._rows[sid])
        wants_row = self._has_tentative_row()
        end = len(self.segments)
        if wants_row and not had_tentative_row:
            self.beginInsertRows(QModelIndex(), end, end)
            self.endInsertRows()
        elif had_tentative_row and not wants_row:
            self.beginRemoveRows(QModelIndex(), end, end)
            self.endRemoveRows()
        elif wants_row:
            self._changed(end)

    def revise(self, segments: list[Segment]) -> None:
        """New speaker labels for segments already shown (a live `Relabelled`); rows the user
        corrected keep their text (the session left them alone too)."""
        for seg in segments:
            row = self._rows.get(seg.id)
            if row is None or seg.id in self.edited_ids:
                continue
            self._note_speaker(seg)
            self.segments[row] = seg
            self._changed(row)

    def _note_speaker(self, seg: Segment) -> None:
        if seg.speaker and seg.speaker not in self.speakers:
            self.speakers.append(seg.speaker)

    def _changed(self, row: int) -> None:
        idx = self.index(row)
        self.dataChanged.emit(idx, idx)


class _LineEditor(QPlainTextEdit):
    """Multi-line editor for one segment: Enter saves, Shift+Enter is a new line, Esc cancels."""

    commit = Signal()

    def keyPressEvent(self, event: QKeyEvent) -> None:
        enter = event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter)
        if enter and not event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.commit.emit()
            return
        super().keyPressEvent(event)


class SegmentDelegate(QStyledItemDelegate):
    def __init__(self, model: LiveTranscriptModel, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.model = model

    def _document(self, index: QModelIndex, option: QStyleOptionViewItem) -> QTextDocument:
        pal: QPalette = option.palette
        muted = pal.color(QPalette.ColorRole.PlaceholderText).name()
        seg: Segment | None = index.data(SegmentRole)
        tentative = index.data(TentativeRole) or ""
        parts = []
        if seg is not None:
            if seg.speaker:
                color = speaker_color(seg.speaker, self.model.speakers).name()
                name = default_speaker_name(seg.speaker)
                parts.append(f"<b style='color:{color}'>{html.escape(name)}</b>&nbsp; ")
            parts.append(html.escape(seg.text.strip()))
        if tentative:
            parts.append(f" <i style='color:{muted}'>{html.escape(tentative)}</i>")
        doc = QTextDocument()
        doc.setDefaultFont(option.font)
        doc.setDocumentMargin(2)
        doc.setHtml("".join(parts))
        doc.setTextWidth(max(80, option.rect.width() - GUTTER - 8))
        return doc

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        view = self.parent()
        if isinstance(view, QAbstractItemView):
            opt.rect.setWidth(view.viewport().width())
        doc = self._document(index, opt)
        return QSize(opt.rect.width(), int(doc.size().height()) + 8)

    def paint(self, painter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        pal = opt.palette
        painter.save()
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        if selected:
            painter.fillRect(opt.rect, pal.color(QPalette.ColorRole.AlternateBase))
        seg: Segment | None = index.data(SegmentRole)
        painter.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
        if seg is not None:
            painter.drawText(
                QRect(opt.rect.left() + 6, opt.rect.top() + 6, GUTTER - 8, 20),
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop,
                clock(seg.start),
            )
        doc = self._document(index, opt)
        painter.translate(opt.rect.left() + GUTTER, opt.rect.top() + 4)
        ctx = QAbstractTextDocumentLayout.PaintContext()
        ctx.palette.setColor(QPalette.ColorRole.Text, pal.color(QPalette.ColorRole.Text))
        doc.documentLayout().draw(painter, ctx)
        painter.restore()

    def createEditor(self, parent: QWidget, option, index: QModelIndex) -> QWidget:
        editor = _LineEditor(parent)
        editor.setFrameShape(QPlainTextEdit.Shape.Box)
        editor.commit.connect(lambda: self._finish(editor))
        return editor

    def _finish(self, editor: QWidget) -> None:
        self.commitData.emit(editor)
        self.closeEditor.emit(editor, QStyledItemDelegate.EndEditHint.NoHint)

    def setEditorData(self, editor: QWidget, index: QModelIndex) -> None:
        assert isinstance(editor, QPlainTextEdit)
        editor.setPlainText(index.data(Qt.ItemDataRole.EditRole) or "")
        editor.selectAll()

    def setModelData(self, editor: QWidget, model, index: QModelIndex) -> None:
        assert isinstance(editor, QPlainTextEdit)
        model.setData(index, editor.toPlainText(), Qt.ItemDataRole.EditRole)

    def updateEditorGeometry(self, editor: QWidget, option, index: QModelIndex) -> None:
        r = option.rect.adjusted(GUTTER - 4, 0, 0, 0)
        r.setHeight(max(r.height(), 64))
        editor.setGeometry(r)


class LiveTranscriptView(QListView):
    """Follows the newest line; when the user scrolls up it stays put and offers 'Jump to live'."""

    def __init__(self, model: LiveTranscriptModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setModel(model)
        self.delegate = SegmentDelegate(model, self)
        self.setItemDelegate(self.delegate)
        self.setWordWrap(True)
        self.setUniformItemSizes(False)
        self.setResizeMode(QListView.ResizeMode.Adjust)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setEditTriggers(
            QAbstractItemView.EditTrigger.DoubleClicked
            | QAbstractItemView.EditTrigger.EditKeyPressed
        )
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.follow = True
        self.jump = QPushButton("Jump to live ↓", self.viewport())
        self.jump.setCursor(Qt.CursorShape.PointingHandCursor)
        self.jump.setToolTip("New lines keep coming; scroll back to them")
        self.jump.clicked.connect(self.jump_to_live)
        self.jump.hide()
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._range_changed)
        bar.valueChanged.connect(self._value_changed)
        model.dataChanged.connect(self._rows_changed)
        model.rowsInserted.connect(lambda *a: self._after_change())
        model.modelReset.connect(self.jump_to_live)

    def _rows_changed(self, top: QModelIndex, bottom: QModelIndex, roles=()) -> None:
        for row in range(top.row(), bottom.row() + 1):  # a line grew: its height may change
            self.delegate.sizeHintChanged.emit(self.model().index(row, 0))
        self._after_change()

    def _after_change(self) -> None:
        if self.follow:
            self.scrollToBottom()

    def _range_changed(self, lo: int, hi: int) -> None:
        if self.follow:
            self.verticalScrollBar().setValue(hi)

    def _value_changed(self, value: int) -> None:
        at_end = value >= self.verticalScrollBar().maximum() - 4
        if at_end != self.follow:
            self.follow = at_end
            self.jump.setVisible(not at_end)
            self._place_jump()

    def jump_to_live(self) -> None:
        self.follow = True
        self.jump.hide()
        self.scrollToBottom()

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._place_jump()

    def _place_jump(self) -> None:
        self.jump.adjustSize()
        vp = self.viewport()
        self.jump.move(vp.width() - self.jump.width() - 12, vp.height() - self.jump.height() - 12)
