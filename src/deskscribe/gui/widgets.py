"""Small reusable widgets: level meter, message banner, language picker (one language, or
several to detect among), speaker colours."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar

from PySide6.QtCore import QItemSelection, QItemSelectionModel, QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from ..whisper.languages import LANGUAGES

FLOOR_DB = -60.0
# Distinct, readable on light and dark backgrounds; "You" and "Others" get the first two.
SPEAKER_COLORS = ("#2f7ed8", "#d9534f", "#2e9d5b", "#9b59b6", "#e08e0b", "#16a2b8", "#c0398a")
FIXED_SPEAKERS = {"You": 0, "Others": 1}


def speaker_color(speaker: str | None, order: list[str] | None = None) -> QColor:
    """A stable colour per speaker: by position in ``order`` when given, else by name."""
    if not speaker:
        return QColor("#888888")
    if speaker in FIXED_SPEAKERS:
        index = FIXED_SPEAKERS[speaker]
    elif order is not None and speaker in order:
        index = order.index(speaker)
    else:
        index = sum(map(ord, speaker))
    return QColor(SPEAKER_COLORS[index % len(SPEAKER_COLORS)])


def select_rows(table, rows: Iterable[int]) -> None:
    """Make ``rows`` of a row-selecting view the selection (the first one current), whatever
    keys are held: ``selectRow`` reads the keyboard's modifiers, so with Ctrl down it toggles
    (a second call deselects) and without it keeps only the last row."""
    model, picks = table.model(), QItemSelection()
    rows = sorted(set(rows))
    last = model.columnCount() - 1
    for r in rows:
        picks.select(model.index(r, 0), model.index(r, last))
    flags = QItemSelectionModel.SelectionFlag
    selection = table.selectionModel()
    selection.select(picks, flags.ClearAndSelect | flags.Rows)
    if rows:
        selection.setCurrentIndex(model.index(rows[0], 0), flags.NoUpdate)
        table.scrollTo(model.index(rows[0], 0))


def clock(seconds: float) -> str:
    """12:04 or 1:02:03."""
    s = max(0, int(seconds))
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class LevelMeter(QWidget):
    """A horizontal input level meter (dBFS, -60 … 0) with a falling peak marker.

    Green up to -18 dB, amber to -6 dB, red above; grey while inactive. Says "no signal" in
    words when the input has been silent for a few seconds, because a flat meter is easy to miss.
    """

    def __init__(self, label: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = label
        self.level = FLOOR_DB
        self.peak = FLOOR_DB
        self.active = False
        self._silent_for = 0
        self.setMinimumSize(160, 22)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self._decay = QTimer(self)
        self._decay.setInterval(100)
        self._decay.timeout.connect(self._fall)
        self.setAccessibleName(f"{label} level")

    def sizeHint(self) -> QSize:
        return QSize(240, 22)

    def set_level(self, db: float) -> None:
        self.active = True
        self.level = max(FLOOR_DB, min(0.0, db))
        self.peak = max(self.peak, self.level)
        self._silent_for = self._silent_for + 1 if self.level <= -55 else 0
        if not self._decay.isActive():
            self._decay.start()
        self.update()

    @property
    def silent(self) -> bool:
        return self.active and self._silent_for >= 30  # ~3 s of updates at 10 per second

    def reset(self) -> None:
        self.active, self.level, self.peak, self._silent_for = False, FLOOR_DB, FLOOR_DB, 0
        self._decay.stop()
        self.update()

    def _fall(self) -> None:
        self.peak = max(self.level, self.peak - 1.5)
        self.update()

    def _x(self, db: float, width: float) -> float:
        return width * (db - FLOOR_DB) / -FLOOR_DB

    ZONES = ((-18.0, "#3cb371"), (-6.0, "#e5a50a"), (0.0, "#e01b24"))

    def paintEvent(self, event) -> None:
        """The name and state in words on the left; on the right a slim bar over a track
        tinted with its green, amber and red zones (so it reads as a meter even when idle),
        the level filled in and the peak marked."""
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        text = self.label if not self.silent else f"{self.label}: no signal"
        if not self.active:
            text = f"{self.label}: idle"
        r = QRectF(self.rect())
        label_w = min(p.fontMetrics().horizontalAdvance(text) + 10, r.width() * 0.62)
        p.setPen(
            pal.color(
                QPalette.ColorRole.Text if self.active else QPalette.ColorRole.PlaceholderText
            )
        )
        p.drawText(QRectF(r.left(), r.top(), label_w, r.height()),
                   Qt.AlignmentFlag.AlignVCenter, p.fontMetrics().elidedText(
                       text, Qt.TextElideMode.ElideRight, int(label_w - 6)))  # fmt: skip
        bar = QRectF(r.left() + label_w, r.center().y() - 4, r.width() - label_w - 1, 8)
        w = bar.width()
        start = FLOOR_DB
        for top, color in self.ZONES:  # the track: each zone, faint
            tint = QColor(color)
            tint.setAlpha(45)
            x0, x1 = self._x(start, w), self._x(top, w)
            p.fillRect(QRectF(bar.left() + x0, bar.top(), x1 - x0, bar.height()), tint)
            start = top
        if self.active:
            start = FLOOR_DB
            for top, color in self.ZONES:
                end = min(self.level, top)
                if end > start:
                    x0, x1 = self._x(start, w), self._x(end, w)
                    p.fillRect(QRectF(bar.left() + x0, bar.top(), x1 - x0, bar.height()),
                               QColor(color))  # fmt: skip
                start = top
            px = bar.left() + self._x(self.peak, w)
            p.fillRect(QRectF(px - 1, bar.top() - 2, 2, bar.height() + 4),
                       pal.color(QPalette.ColorRole.Text))  # fmt: skip
        p.setPen(pal.color(QPalette.ColorRole.Mid))
        p.setBrush(Qt.BrushStyle.NoBrush)
        p.drawRoundedRect(bar.adjusted(-0.5, -0.5, 0.5, 0.5), 2, 2)
        p.end()


class Banner(QFrame):
    """An inline message (info, warning or error) with an optional action button and a close ×.

    Messages stay until dismissed or replaced, so nothing important flashes by unread.
    """

    action_clicked = Signal()
    STYLES: ClassVar[dict[str, tuple[str, str, str]]] = {
        "info": ("#e8f1fb", "#1c4f8a", "#9fc2ea"),
        "warning": ("#fff4d6", "#6b4c00", "#e8c766"),
        "error": ("#fde7e7", "#8a1c1c", "#e8a0a0"),
    }

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(10, 6, 6, 6)
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self.action = QPushButton()
        self.action.clicked.connect(self.action_clicked)
        close = QPushButton("×")
        close.setFlat(True)
        close.setFixedWidth(28)
        close.setToolTip("Dismiss")
        close.clicked.connect(self.hide)
        lay.addWidget(self.text, 1)
        lay.addWidget(self.action)
        lay.addWidget(close)
        self.kind = "info"
        self._callback: Callable[[], None] | None = None
        self.action_clicked.connect(self._run_action)
        self.hide()

    def show_message(
        self,
        message: str,
        kind: str = "info",
        action: str | None = None,
        callback: Callable[[], None] | None = None,
    ) -> None:
        self.kind = kind
        bg, fg, border = self.STYLES[kind]
        self.setStyleSheet(
            f"QFrame#banner {{ background: {bg}; border: 1px solid {border}; border-radius: 6px; }}"
            f"QFrame#banner QLabel {{ color: {fg}; }}"
        )
        self.text.setText(message)
        self.action.setVisible(bool(action))
        self.action.setText(action or "")
        self._callback = callback
        self.show()

    def _run_action(self) -> None:
        if self._callback is not None:
            self._callback()


SEVERAL = "__several__"  # the item that opens the list of languages to detect among
CHOSEN_SET = "__set__"  # the item that stands for the set chosen there


def languages_label(codes: Iterable[str], limit: int = 3) -> str:
    """ "English, German"; past ``limit`` names, "English, German, French +2"."""
    names = [LANGUAGES.get(c, c) for c in codes]
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f" +{more}" if more > 0 else "")


class LanguagesDialog(QDialog):
    """A checkable list of Whisper's languages: those a recording may switch between."""

    def __init__(self, chosen: Iterable[str] = (), parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Detect among several languages")
        self._order = [c for c in dict.fromkeys(chosen) if c in LANGUAGES]  # in checking order
        lay = QVBoxLayout(self)
        lay.addWidget(
            muted(
                "Each part of a recording is written in the language spoken in it, chosen "
                "among the ones ticked here. Nothing is translated."
            )
        )
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Find a language")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._filter)
        lay.addWidget(self.filter)
        self.list = QListWidget()
        self.list.setAccessibleName("Languages")
        for code, name in sorted(LANGUAGES.items(), key=lambda kv: kv[1]):
            item = QListWidgetItem(f"{name} ({code})")
            item.setData(Qt.ItemDataRole.UserRole, code)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            checked = code in self._order
            item.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
            self.list.addItem(item)
        self.list.itemChanged.connect(self._toggled)
        lay.addWidget(self.list, 1)
        self.summary = muted()
        lay.addWidget(self.summary)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        )
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.ok_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        lay.addWidget(buttons)
        self.resize(360, 460)
        self._update()

    def codes(self) -> tuple[str, ...]:
        return tuple(self._order)

    def item(self, code: str) -> QListWidgetItem:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == code:
                return self.list.item(i)
        raise KeyError(code)

    def _toggled(self, item: QListWidgetItem) -> None:
        code = item.data(Qt.ItemDataRole.UserRole)
        if item.checkState() == Qt.CheckState.Checked:
            if code not in self._order:
                self._order.append(code)
        elif code in self._order:
            self._order.remove(code)
        self._update()

    def _filter(self, text: str) -> None:
        text = text.strip().lower()
        for i in range(self.list.count()):
            item = self.list.item(i)
            item.setHidden(bool(text) and text not in item.text().lower())

    def _update(self) -> None:
        n = len(self._order)
        self.ok_button.setEnabled(n > 0)
        if n == 0:
            self.summary.setText("Tick the languages spoken in your recordings.")
        elif n == 1:
            self.summary.setText(
                f"Only {languages_label(self._order)}: that language is used "
                "for everything, nothing is detected."
            )
        else:
            self.summary.setText(f"Detect among: {languages_label(self._order, limit=8)}")


class LanguageCombo(QComboBox):
    """'Detect automatically', 'Detect among several…' (a checkable list in a dialog) and
    Whisper's languages. `code()` is the one language forced (None: detection); `codes()` the
    set detection is limited to (empty: any language). `changed` says either changed."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.addItem("Detect automatically", None)
        self.addItem("Detect among several…", SEVERAL)
        self.setItemData(
            1, "Pick the languages a recording may switch between", Qt.ItemDataRole.ToolTipRole
        )
        self.insertSeparator(2)
        for code, name in sorted(LANGUAGES.items(), key=lambda kv: kv[1]):
            self.addItem(f"{name} ({code})", code)
        self.setToolTip(
            "The language spoken. Detection listens to each part of a recording; "
            "'Detect among several…' limits it to the languages you pick."
        )
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(14)
        self._settled: str | None = None  # the data of the choice in force
        self._codes: tuple[str, ...] = ()  # the set behind the CHOSEN_SET item
        self.dialog: LanguagesDialog | None = None
        self.currentIndexChanged.connect(self._index_changed)
        self.activated.connect(self._activated)

    # --- what the caller asks ---------------------------------------------------------------

    def code(self) -> str | None:
        return None if self._settled in (None, CHOSEN_SET) else self._settled

    def codes(self) -> tuple[str, ...]:
        return self._codes if self._settled == CHOSEN_SET else ()

    def set_code(self, code: str | None) -> None:
        i = self.findData(code) if code not in (SEVERAL, CHOSEN_SET) else -1
        self._select(i if i >= 0 else 0)

    def set_codes(self, codes: Iterable[str]) -> None:
        """Detect among ``codes``; one code forces that language, none means any."""
        codes = tuple(c for c in dict.fromkeys(codes) if c in LANGUAGES)
        if len(codes) < 2:
            self.set_code(codes[0] if codes else None)
            return
        before = self._choice()
        self._codes = codes
        i = self.findData(CHOSEN_SET)
        if i < 0:
            i = 1
            self.blockSignals(True)
            self.insertItem(i, "", CHOSEN_SET)
            self.blockSignals(False)
        self.setItemText(i, languages_label(codes))
        self.setItemData(
            i,
            f"Detect among: {languages_label(codes, limit=len(codes))}",
            Qt.ItemDataRole.ToolTipRole,
        )
        self._select(i, before)

    def restore(self, ctx) -> None:
        """The choice saved in the settings: "language" (forced) or "languages" (a set)."""
        code = ctx.get("language")
        if code:
            self.set_code(code)
        else:
            self.set_codes(ctx.get_list("languages"))

    def settings_values(self) -> dict[str, object]:
        """What `restore` reads back: the forced language, or the set as a list."""
        return {"language": self.code(), "languages": list(self.codes()) or None}

    def choose_several(self) -> LanguagesDialog:
        """Open the checkable list (window-modal, returns at once); OK applies it."""
        start = self._codes if self._settled == CHOSEN_SET else ()
        if not start and self._settled not in (None, CHOSEN_SET):
            start = (self._settled,)  # a forced language is the first one ticked
        dialog = LanguagesDialog(start, self)
        dialog.accepted.connect(lambda: self.set_codes(dialog.codes()))
        dialog.rejected.connect(self._show_settled)
        dialog.finished.connect(dialog.deleteLater)
        self.dialog = dialog
        dialog.open()
        return dialog

    # --- inside -------------------------------------------------------------------------------

    def _choice(self) -> tuple[str | None, tuple[str, ...]]:
        return self.code(), self.codes()

    def _select(self, index: int, before=None) -> None:
        before = self._choice() if before is None else before
        self.blockSignals(True)
        self.setCurrentIndex(index)
        self.blockSignals(False)
        self._settle(self.itemData(index), before)

    def _settle(self, data, before) -> None:
        self._settled = data
        if self._choice() != before:
            self.changed.emit()

    def _index_changed(self, index: int) -> None:
        data = self.itemData(index)
        if data != SEVERAL:  # "Detect among several…" waits for its dialog
            self._settle(data, self._choice())

    def _activated(self, index: int) -> None:
        if self.itemData(index) == SEVERAL:
            self.choose_several()

    def _show_settled(self) -> None:
        i = self.findData(self._settled) if self._settled is not None else 0
        self.blockSignals(True)
        self.setCurrentIndex(max(0, i))
        self.blockSignals(False)


def heading(text: str, size: float = 1.35) -> QLabel:
    label = QLabel(text)
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * size)
    font.setBold(True)
    label.setFont(font)
    return label


def muted(text: str = "", wrap: bool = True) -> QLabel:
    """Secondary text (hints, explanations) in the palette's placeholder colour."""
    label = QLabel(text)
    label.setWordWrap(wrap)
    label.setForegroundRole(QPalette.ColorRole.PlaceholderText)
    return label
