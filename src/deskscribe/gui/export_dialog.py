"""Exporting a transcript: where, in which format and, for subtitles (SRT, VTT), by which rules.

``ask_export(parent, start)`` opens `ExportDialog` and returns the user's `ExportChoice` (or
None when cancelled); the caller writes the file. `SubtitleRulesBox` is the compact group of
subtitle rules that this dialog and the Settings dialog share; its limits are
``transcript.subtitles.LIMITS``, the ones the CLI and the settings check.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from .. import settings
from ..transcript.export import FORMATS, SUBTITLE_FORMATS
from ..transcript.subtitles import LIMITS, SubtitleRules
from .file_options import FORMAT_LABELS


class SubtitleRulesBox(QGroupBox):
    """The subtitle rules as two rows of small fields: characters per line, lines, speaker
    names; seconds on screen, the gap between subtitles."""

    def __init__(self, rules: SubtitleRules | None = None, parent: QWidget | None = None) -> None:
        super().__init__("Subtitles (SRT, VTT)", parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(8, 4, 8, 4)
        grid.setVerticalSpacing(4)
        self.max_line_chars = self._spin("max_line_chars", "Characters a subtitle line holds")
        self.max_lines = self._spin("max_lines", "Lines a subtitle shows at once")
        self.max_cue_seconds = self._seconds("max_cue_seconds", 1, 0.5,
                                             "The longest a subtitle stays on screen")  # fmt: skip
        self.min_cue_gap = self._seconds("min_cue_gap", 2, 0.01,
                                         "Time between two subtitles, so that players show them "
                                         "apart (0: none)")  # fmt: skip
        self.speaker_names = QCheckBox("Speaker names")
        self.speaker_names.setToolTip(
            "The speaker's name before the text where the speaker changes (when the transcript "
            "has speakers)"
        )
        cells = [
            (0, 0, "Max characters per line", self.max_line_chars),
            (0, 2, "Max lines", self.max_lines),
            (1, 0, "Max seconds on screen", self.max_cue_seconds),
            (1, 2, "Min gap", self.min_cue_gap),
        ]
        for row, column, text, field in cells:
            label = QLabel(text)
            label.setBuddy(field)
            grid.addWidget(label, row, column)
            grid.addWidget(field, row, column + 1)
        grid.addWidget(self.speaker_names, 0, 4)
        grid.setColumnStretch(5, 1)
        self.set_rules(rules or SubtitleRules())

    def _spin(self, rule: str, tip: str) -> QSpinBox:
        _whole, low, high = LIMITS[rule]
        spin = QSpinBox()
        spin.setRange(int(low), int(high))
        spin.setToolTip(tip)
        return spin

    def _seconds(self, rule: str, decimals: int, step: float, tip: str) -> QDoubleSpinBox:
        _whole, low, high = LIMITS[rule]
        spin = QDoubleSpinBox()
        spin.setDecimals(decimals)
        spin.setRange(low, high)
        spin.setSingleStep(step)
        spin.setSuffix(" s")
        spin.setToolTip(tip)
        return spin

    def set_rules(self, rules: SubtitleRules) -> None:
        """Show ``rules``; a rule that is off shows the default (these fields always set one)."""
        default = SubtitleRules()
        self.max_line_chars.setValue(rules.max_line_chars or default.max_line_chars)
        self.max_lines.setValue(rules.max_lines or default.max_lines)
        self.max_cue_seconds.setValue(rules.max_cue_seconds or default.max_cue_seconds)
        self.min_cue_gap.setValue(rules.min_cue_gap or 0.0)
        self.speaker_names.setChecked(rules.speaker_names)

    def rules(self) -> SubtitleRules:
        return SubtitleRules(
            max_line_chars=self.max_line_chars.value(),
            max_lines=self.max_lines.value(),
            max_cue_seconds=self.max_cue_seconds.value(),
            min_cue_gap=self.min_cue_gap.value(),
            speaker_names=self.speaker_names.isChecked(),
        )


@dataclass(frozen=True)
class ExportChoice:
    path: Path
    fmt: str  # one of FORMATS
    rules: SubtitleRules | None  # SRT/VTT's rules; None for the other formats


def _format_of(path: Path) -> str | None:
    suffix = path.suffix.lstrip(".").lower()
    return suffix if suffix in FORMATS else None


class ExportDialog(QDialog):
    """Format, file and (for SRT and VTT) the subtitle rules, filled from the settings."""

    def __init__(
        self, parent: QWidget | None, start: Path, rules: SubtitleRules | None = None
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Export transcript")
        self._confirmed: Path | None = None  # a path the save dialog already asked to replace
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.format = QComboBox()
        for fmt in FORMATS:
            self.format.addItem(f"{FORMAT_LABELS.get(fmt, fmt.upper())} (.{fmt})", fmt)
        self.format.setCurrentIndex(self.format.findData(_format_of(start) or "txt"))
        form.addRow("Format", self.format)
        row = QHBoxLayout()
        self.path = QLineEdit(str(start))
        self.path.setMinimumWidth(360)
        browse = QPushButton("Browse…")
        browse.clicked.connect(self.browse)
        row.addWidget(self.path, 1)
        row.addWidget(browse)
        form.addRow("Save as", row)
        lay.addLayout(form)
        self.rules_box = SubtitleRulesBox(rules or settings.subtitle_rules())
        lay.addWidget(self.rules_box)
        buttons = QDialogButtonBox(
            QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel
        )
        self.export_button = buttons.button(QDialogButtonBox.StandardButton.Save)
        self.export_button.setText("Export")
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.format.currentIndexChanged.connect(self._format_changed)
        self.path.textChanged.connect(
            lambda text: self.export_button.setEnabled(bool(text.strip()))
        )
        self._format_changed()

    def fmt(self) -> str:
        return self.format.currentData()

    def _format_changed(self) -> None:
        fmt = self.fmt()
        self.rules_box.setVisible(fmt in SUBTITLE_FORMATS)
        text = self.path.text().strip()
        if text:
            path = Path(text)
            if _format_of(path) or not path.suffix:  # the name follows the format
                self.path.setText(str(path.with_suffix(f".{fmt}")))
        self.adjustSize()

    def browse(self) -> None:
        fmt = self.fmt()
        label = FORMAT_LABELS.get(fmt, fmt.upper())
        path, _chosen = QFileDialog.getSaveFileName(
            self, "Export transcript", self.path.text(), f"{label} (*.{fmt})"
        )
        if not path:
            return
        chosen = Path(path)
        if not chosen.suffix:
            chosen = chosen.with_suffix(f".{fmt}")
        self._confirmed = chosen  # the save dialog asked before a file is replaced
        self.path.setText(str(chosen))
        if (other := _format_of(chosen)) and other != fmt:
            self.format.setCurrentIndex(self.format.findData(other))

    def choice(self) -> ExportChoice:
        fmt = self.fmt()
        path = Path(self.path.text().strip()).expanduser()
        if not path.suffix:
            path = path.with_suffix(f".{fmt}")
        rules = self.rules_box.rules() if fmt in SUBTITLE_FORMATS else None
        return ExportChoice(path, fmt, rules)

    def accept(self) -> None:
        if not self.path.text().strip():
            return
        path = self.choice().path
        if path.is_dir():
            QMessageBox.warning(self, "Export transcript", f"{path} is a folder; give a file name.")
            return
        if path.exists() and path != self._confirmed:
            answer = QMessageBox.question(
                self, "Export transcript", f"{path.name} already exists. Replace it?"
            )
            if answer != QMessageBox.StandardButton.Yes:
                return
        super().accept()


def ask_export(parent: QWidget | None, start: Path) -> ExportChoice | None:
    """Ask where and how to export (``start``: the suggested file, its suffix the format);
    None when the user cancels. The subtitle rules start from the settings'."""
    dialog = ExportDialog(parent, start)
    try:
        return dialog.choice() if dialog.exec() == QDialog.DialogCode.Accepted else None
    finally:
        dialog.deleteLater()
