"""Small reusable widgets: level meter, message banner, language picker, speaker colours."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from PySide6.QtCore import QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import (
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
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

    def paintEvent(self, event) -> None:
        p = QPainter(self)
        p.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        r = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        p.setPen(pal.color(QPalette.ColorRole.Mid))
        p.setBrush(pal.color(QPalette.ColorRole.Base))
        p.drawRoundedRect(r, 4, 4)
        inner = r.adjusted(2, 2, -2, -2)
        w = inner.width()
        if self.active:
            zones = ((-18.0, "#3cb371"), (-6.0, "#e5a50a"), (0.0, "#e01b24"))
            start = FLOOR_DB
            for top, color in zones:
                end = min(self.level, top)
                if end > start:
                    x0, x1 = self._x(start, w), self._x(end, w)
                    p.fillRect(QRectF(inner.left() + x0, inner.top(), x1 - x0, inner.height()),
                               QColor(color))  # fmt: skip
                start = top
            px = inner.left() + self._x(self.peak, w)
            p.fillRect(
                QRectF(px - 1, inner.top(), 2, inner.height()), pal.color(QPalette.ColorRole.Text)
            )
        text = self.label if not self.silent else f"{self.label}: no signal"
        if not self.active:
            text = f"{self.label}: idle"
        p.setPen(pal.color(QPalette.ColorRole.Text))
        p.drawText(inner.adjusted(6, 0, -6, 0), Qt.AlignmentFlag.AlignVCenter, text)
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


class LanguageCombo(QComboBox):
    """'Detect automatically' plus Whisper's languages; `code()` is None for detection."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.addItem("Detect automatically", None)
        for code, name in sorted(LANGUAGES.items(), key=lambda kv: kv[1]):
            self.addItem(f"{name} ({code})", code)
        self.setToolTip("The language spoken. Detection listens to the first sentence.")
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(14)

    def code(self) -> str | None:
        return self.currentData()

    def set_code(self, code: str | None) -> None:
        i = self.findData(code)
        self.setCurrentIndex(i if i >= 0 else 0)


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
