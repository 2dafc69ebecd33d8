"""How speakers are labelled, as the file queue, the watch folders and the live window ask it:
off, by voice or by channel, and "How many people spoke?" (empty: detected; a number such as
3, or a range such as 2-4). One value string carries both, the one ``--speakers`` takes:
``off``, ``auto``, ``3``, ``2-4`` or ``channels``."""

from __future__ import annotations

from PySide6.QtCore import QRegularExpression, Signal
from PySide6.QtGui import QRegularExpressionValidator
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QLineEdit, QWidget

PARTICIPANTS_TIP = (
    "How many people spoke, when you know it: a number (3) or a range (2-4). Leave it empty "
    "and the number of voices is detected. Counting everyone who spoke, you included."
)
_PATTERN = r"\s*([1-9][0-9]?(\s*-\s*[1-9][0-9]?)?)?\s*"


def normalize_participants(text: str) -> str:
    """``" 2 - 4 "`` -> ``"2-4"``, ``"3"`` -> ``"3"``, ``""`` -> ``""``; a range given high to
    low is turned round, one of equal ends is a count; ValueError for anything else."""
    parts = [p.strip() for p in (text or "").strip().split("-")]
    if parts == [""]:
        return ""
    if len(parts) > 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ValueError(f"{text!r}: type a number of people such as 3 or a range such as 2-4")
    numbers = sorted(int(p) for p in parts)
    lo, hi = numbers[0], numbers[-1]
    return str(lo) if lo == hi else f"{lo}-{hi}"


class ParticipantsEdit(QLineEdit):
    """ "How many people spoke?": a count, a range or nothing (detected)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setPlaceholderText("Don't know")
        self.setToolTip(PARTICIPANTS_TIP)
        self.setValidator(QRegularExpressionValidator(QRegularExpression(_PATTERN), self))
        self.setMaximumWidth(110)
        self.editingFinished.connect(self._tidy)

    def value(self) -> str:
        """The count or range typed, normalized; "" when empty or not (yet) valid."""
        try:
            return normalize_participants(self.text())
        except ValueError:
            return ""

    def _tidy(self) -> None:
        tidy = self.value()
        if tidy != self.text():
            self.setText(tidy)


class SpeakersChoice(QWidget):
    """Off / by voice / by channel, and the people field (used by voice only)."""

    changed = Signal()

    def __init__(self, value: str = "off", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.mode = QComboBox()
        self.mode.addItem("Don't label speakers", "off")
        self.mode.addItem("By voice", "auto")
        self.mode.addItem("By channel", "channels")
        self.people = ParticipantsEdit()
        self.people_label = QLabel("How many people spoke?")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.mode, 1)
        row.addSpacing(8)
        row.addWidget(self.people_label)
        row.addWidget(self.people)
        self.set_value(value)
        self.mode.currentIndexChanged.connect(self._mode_changed)
        self.people.textChanged.connect(self.changed)

    def value(self) -> str:
        mode = self.mode.currentData()
        if mode != "auto":
            return mode
        return self.people.value() or "auto"

    def set_value(self, value: str | None) -> None:
        """``off``, ``auto``, ``channels``, a count or a range (older settings kept a count as
        the choice itself: ``"3"``)."""
        value = str(value or "off")
        try:
            people = "" if value in ("off", "auto", "channels") else normalize_participants(value)
        except ValueError:
            value, people = "off", ""
        mode = "auto" if people else value
        self.mode.setCurrentIndex(max(0, self.mode.findData(mode)))
        self.people.setText(people)
        self._mode_changed()

    def by_voice(self) -> bool:
        return self.mode.currentData() == "auto"

    def set_voices_available(self, available: bool) -> None:
        """By voice needs a speaker model; by channel does not."""
        self.mode.model().item(self.mode.findData("auto")).setEnabled(available)
        self._mode_changed()

    def _mode_changed(self) -> None:
        voice = self.by_voice() and self.mode.model().item(self.mode.findData("auto")).isEnabled()
        self.people.setEnabled(voice)
        self.people_label.setEnabled(voice)
        self.changed.emit()
