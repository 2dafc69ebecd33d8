"""Exporting a transcript: where, in which format and, for subtitles (SRT, VTT), by which rules.

``ask_export(parent, start, transcript)`` opens `ExportDialog` and returns the user's
`ExportChoice` (or None when cancelled); the caller writes the file. `SubtitleRulesBox` is the
compact group of subtitle rules that this dialog and the Settings dialog share; its limits are
``transcript.subtitles.LIMITS``, the ones the CLI and the settings check.

Given the transcript, the dialog also asks in which language: the original, one of the
translations it has, or "Translate to…" a language the user types (a code or a name, checked
by ``service.translate.target``). The choice says which (``language``: the key, None for the
original) and whether a translation must be made first (``translate``); the caller then runs
`TranslateRunner`, which translates on a worker thread with the language model the settings
choose, shows its progress with a Cancel button, and hands back the translated copy; the
caller keeps its translation track (`copy_translation`) and exports
``transcript.translated(language)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
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
    QProgressDialog,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from .. import settings
from ..transcript import Transcript
from ..transcript.export import FORMATS, SUBTITLE_FORMATS
from ..transcript.subtitles import LIMITS, SubtitleRules
from .file_options import FORMAT_LABELS
from .workers import run_in_worker

TRANSLATE = "\0translate"  # the language list's "Translate to…" entry


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
    language: str | None = None  # the translation's key ("fr"); None: the original
    translate: bool = False  # translate into ``language`` first (`TranslateRunner`)


def _format_of(path: Path) -> str | None:
    suffix = path.suffix.lstrip(".").lower()
    return suffix if suffix in FORMATS else None


class ExportDialog(QDialog):
    """Format, file and (for SRT and VTT) the subtitle rules, filled from the settings."""

    def __init__(
        self,
        parent: QWidget | None,
        start: Path,
        rules: SubtitleRules | None = None,
        transcript: Transcript | None = None,
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
        self._language_row(form, transcript)
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

    def _language_row(self, form: QFormLayout, transcript: Transcript | None) -> None:
        """The language to export in: the original, a translation the transcript has, or
        "Translate to…" a language typed beside it (hidden without a transcript)."""
        self.language = QComboBox()
        self.language.addItem("Original", None)
        for key in transcript.translation_languages() if transcript is not None else []:
            name = _language_name(key)
            self.language.addItem(f"{name} ({key})" if name != key else key, key)
        self.language.addItem("Translate to…", TRANSLATE)
        self.language.setToolTip(
            "The language of the text exported; times and speakers stay. JSON keeps the "
            "original and every translation whichever you pick."
        )
        self.translate_to = QLineEdit()
        self.translate_to.setPlaceholderText("a language: fr, German, pt-BR…")
        self.translate_to.setToolTip(
            "A code or a name. The language model the settings choose translates the "
            "transcript before the export; the translation is kept with it."
        )
        self.translate_to.textChanged.connect(lambda _t: self.language_error.hide())
        self.language_error = QLabel()
        self.language_error.setWordWrap(True)
        self.language_error.setStyleSheet("color: #b3261e;")
        self.language_error.hide()
        row = QHBoxLayout()
        row.addWidget(self.language)
        row.addWidget(self.translate_to, 1)
        box = QVBoxLayout()
        box.setSpacing(2)
        box.addLayout(row)
        box.addWidget(self.language_error)
        form.addRow("Language", box)
        self.language.currentIndexChanged.connect(self._language_changed)
        self._language_changed()
        if transcript is None:
            self.language.hide()
            form.labelForField(box).hide()

    def _language_changed(self) -> None:
        asks = self.language.currentData() == TRANSLATE
        self.translate_to.setVisible(asks)
        self.language_error.hide()
        if asks:
            self.translate_to.setFocus()

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
        language, translate = self.language.currentData(), False
        if language == TRANSLATE:
            from ..service.translate import target

            language, translate = target(self.translate_to.text())[0], True
        return ExportChoice(path, fmt, rules, language, translate)

    def accept(self) -> None:
        if not self.path.text().strip():
            return
        if self.language.currentData() == TRANSLATE:
            from ..llm.translate import LanguageError
            from ..service.translate import target

            try:
                target(self.translate_to.text())
            except LanguageError as e:
                self.language_error.setText(str(e))
                self.language_error.show()
                self.translate_to.setFocus()
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


def ask_export(
    parent: QWidget | None, start: Path, transcript: Transcript | None = None
) -> ExportChoice | None:
    """Ask where and how to export (``start``: the suggested file, its suffix the format)
    and, given ``transcript``, in which language; None when the user cancels. The subtitle
    rules start from the settings'."""
    dialog = ExportDialog(parent, start, transcript=transcript)
    try:
        return dialog.choice() if dialog.exec() == QDialog.DialogCode.Accepted else None
    finally:
        dialog.deleteLater()


def _language_name(key: str) -> str:
    """ "French" for "fr"; a key that names no language of Whisper's as it is."""
    from ..whisper.languages import LANGUAGES

    return LANGUAGES.get(key, key)


def copy_translation(into: Transcript, translated: Transcript, key: str) -> int:
    """Give ``into``'s lines the ``key`` translations of ``translated`` (a translated copy of
    an earlier state of it), matched by segment id where the line's text is still the one
    that was translated: a line edited meanwhile keeps what it has. A matched line the model
    left untranslated loses an older ``key`` translation, as ``translate`` does. Each
    changed line gets a new ``translations`` dict (never changed in place: the view's
    snapshots share them). The number of lines that have a ``key`` translation from it."""
    tracks = {(s.id, s.text): s.translations.get(key) for s in translated.segments}
    given = 0
    for seg in into.segments:
        if (seg.id, seg.text) not in tracks:
            continue
        text = tracks[(seg.id, seg.text)]
        new = {k: v for k, v in seg.translations.items() if k != key}
        if text:
            new[key] = text
            given += 1
        if new != seg.translations:
            seg.translations = new
    return given


class TranslateRunner(QObject):
    """Translates ``transcript`` into ``language`` (a code or name, as the user typed it)
    with the language model the settings choose (``service.language_model.chosen``) on a
    worker thread, showing a progress dialog with Cancel over ``parent`` (``dialog=False``:
    none). ``start()`` begins; the transcript is never changed. When it ends: ``done(copy,
    untranslated)`` (the translated copy, the lines with text the model left without a
    translation), or ``cancelled()``, or ``failed(message)``; then ``ended("done" |
    "cancelled" | "failed")``. The key the translation is stored under: ``key``."""

    done = Signal(object, int)
    cancelled = Signal()
    failed = Signal(str)
    ended = Signal(str)

    def __init__(
        self,
        transcript: Transcript,
        language: str,
        parent: QWidget | None = None,
        *,
        dialog: bool = True,
    ) -> None:
        from ..service.translate import target

        super().__init__(parent)
        self.key, self.name = target(language)  # LanguageError for what is no language
        self.transcript = transcript
        self.language = language
        self.lines = sum(1 for s in transcript.segments if s.text.strip())
        self.result: tuple[Transcript, int] | None = None
        self.label = ""  # the model, as the user knows it
        self.streamed = 0  # characters of reply seen so far
        self.progress: QProgressDialog | None = None
        self._window = parent
        self._dialog = dialog
        self._job = None

    @property
    def running(self) -> bool:
        return self._job is not None

    def start(self) -> None:
        if self.running:
            return
        if self._dialog:
            box = QProgressDialog(f"Starting the language model to translate into "
                                  f"{self.name}…", "Cancel", 0, max(1, self.lines),
                                  self._window)  # fmt: skip
            box.setWindowTitle("Translate")
            box.setWindowModality(Qt.WindowModality.WindowModal)
            box.setMinimumDuration(0)
            box.setAutoClose(False)
            box.setAutoReset(False)
            box.setValue(0)
            box.canceled.connect(self.cancel)
            box.show()
            self.progress = box
        self._job = run_in_worker(
            _translate, self.transcript, self.language, self.key,
            on_done=self._done, on_error=self._failed, on_progress=self._progressed,
            name="translate",
        )  # fmt: skip

    def cancel(self) -> None:
        if self._job is not None:
            self._job.cancel()
            if self.progress is not None:
                self.progress.setLabelText("Cancelling…")

    def _progressed(self, label: str, done: int, total: int, streamed: int) -> None:
        self.label, self.streamed = label, streamed
        if self.progress is not None and not self._job.cancelled:
            self.progress.setMaximum(max(1, total or self.lines))
            self.progress.setValue(done)
            self.progress.setLabelText(f"Translating into {self.name} with {label}: "
                                       f"{done} of {total or self.lines} lines")  # fmt: skip

    def _close(self) -> None:
        self._job = None
        if self.progress is not None:
            self.progress.canceled.disconnect(self.cancel)
            self.progress.close()
            self.progress.deleteLater()
            self.progress = None

    def _done(self, result) -> None:
        translated, missing, self.label = result
        self._close()
        self.result = (translated, missing)
        self.done.emit(translated, missing)
        self.ended.emit("done")

    def _failed(self, exc: BaseException) -> None:
        from ..errors import Cancelled

        self._close()
        if isinstance(exc, Cancelled):
            self.cancelled.emit()
            self.ended.emit("cancelled")
        else:
            self.failed.emit(str(exc))
            self.ended.emit("failed")


def _translate(transcript: Transcript, language: str, key: str, progress, cancel):
    """On the worker: (the translated copy, the lines left untranslated, the model's name)."""
    from ..service.language_model import LLMOptions, chosen
    from ..service.translate import translate, untranslated

    choice = chosen()
    state = [0, 0, 0]  # lines done, lines in all, characters streamed

    def lines(done: int, total: int) -> None:
        state[:2] = [done, total]
        progress(choice.label, *state)

    def streamed(piece: str) -> None:
        state[2] += len(piece)
        progress(choice.label, *state)

    progress(choice.label, *state)
    out = translate(transcript, language, llm=LLMOptions(choice.endpoint, choice.gguf),
                    progress=lines, cancel=cancel, on_text=streamed)  # fmt: skip
    return out, len(untranslated(out, key)), choice.label
