"""The options of the file queue: model, language, speakers, export formats and folder.

Choices are remembered in the user settings. Lists that need the disk or a model (installed
models, whether a speaker model exists) are filled from worker threads.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPushButton,
    QWidget,
)

from ..service.queue import ExportOptions
from ..transcript.export import FORMATS
from .speakers_choice import SpeakersChoice
from .widgets import LanguageCombo
from .workers import run_in_worker

FORMAT_LABELS = {"txt": "Text", "srt": "SRT", "vtt": "WebVTT", "json": "JSON", "md": "Markdown",
                 "csv": "CSV", "docx": "Word", "rttm": "RTTM"}  # fmt: skip
NO_SPEAKER_MODEL = (
    "Telling voices apart needs a speaker model, and none is installed. Install one on the "
    "Models page. By channel needs none."
)
SPEAKERS_TIP = (
    "Label who spoke when: by voice (speaker diarization), or by channel (each channel of a "
    "call recording transcribed on its own: Left, Right, …)."
)


def _installed_models() -> list[str]:
    from ..models.store import list_models

    return [m.name for m in list_models()]


def _has_speaker_model() -> bool:
    from ..models.store import list_speaker_models

    return bool(list_speaker_models())


class FileOptions(QGroupBox):
    def __init__(self, ctx, parent: QWidget | None = None) -> None:
        super().__init__("Options", parent)
        self.ctx = ctx
        form = QFormLayout(self)

        self.model = QComboBox()
        self.model.setToolTip("The Whisper model that transcribes the files.")
        self.model.addItem("Default model", None)
        form.addRow("Model", self.model)

        self.language = LanguageCombo()
        self.language.restore(ctx)
        form.addRow("Language", self.language)

        self.speakers = SpeakersChoice(ctx.get("speakers", "off"))
        self._voices_available = False
        self.speakers.setEnabled(False)
        self.speakers.setToolTip("Checking for a speaker model…")
        form.addRow("Speakers", self.speakers)

        row = QHBoxLayout()
        chosen = set(_split(ctx.get("output_formats", "txt")))
        self.formats: dict[str, QCheckBox] = {}
        for fmt in FORMATS:
            box = QCheckBox(FORMAT_LABELS.get(fmt, fmt.upper()))
            box.setChecked(fmt in chosen)
            box.toggled.connect(self._save)
            self.formats[fmt] = box
            row.addWidget(box)
        row.addStretch(1)
        form.addRow("Export as", row)

        folder_row = QHBoxLayout()
        self.folder = QLineEdit(ctx.get("output_dir") or "")
        self.folder.setPlaceholderText("Next to each file")
        self.folder.setReadOnly(True)
        choose = QPushButton("Choose…")
        choose.clicked.connect(self._choose_folder)
        beside = QPushButton("Next to each file")
        beside.clicked.connect(lambda: self._set_folder(""))
        folder_row.addWidget(self.folder, 1)
        folder_row.addWidget(choose)
        folder_row.addWidget(beside)
        form.addRow("Save exports in", folder_row)

        self.automatic = QCheckBox("Export automatically when a file is done")
        self.automatic.setChecked(ctx.get_bool("export_automatically", False))
        self.redo = QCheckBox("Transcribe again files that were done before")
        self.redo.setToolTip(
            "Off: a file already transcribed with the same model, language and speakers is "
            "not transcribed again; its transcript opens from the library."
        )
        form.addRow("", self.automatic)
        form.addRow("", self.redo)

        self.language.changed.connect(self._save)
        self.speakers.changed.connect(self._save)
        self.automatic.toggled.connect(self._save)
        ctx.models_changed.connect(self.refresh)
        self.refresh()

    # --- what the queue asks -------------------------------------------------------------

    def model_choice(self) -> str | None:
        return self.model.currentData()

    def language_code(self) -> str | None:
        return self.language.code()

    def languages_choice(self) -> tuple[str, ...]:
        """The languages detection is limited to ("Detect among several…"); empty: any."""
        return self.language.codes()

    def speakers_choice(self) -> str:
        """``off``, ``auto``, a count (``3``), a range (``2-4``) or ``channels``."""
        choice = self.speakers.value() if self.speakers.isEnabled() else "off"
        return "off" if choice != "channels" and not self._voices_available else choice

    def export_options(self) -> ExportOptions:
        return ExportOptions(
            formats=[f for f, box in self.formats.items() if box.isChecked()],
            output_dir=self.folder.text() or None,
            automatic=self.automatic.isChecked(),
        )

    def set_export_folder(self, folder: str | Path) -> None:
        self._set_folder(str(folder))

    # --- filling and saving ---------------------------------------------------------------

    def refresh(self) -> None:
        run_in_worker(_installed_models, on_done=self._fill_models, on_error=lambda e: None)
        run_in_worker(
            _has_speaker_model,
            on_done=self._speaker_model_checked,
            on_error=lambda e: self._speaker_model_checked(False),
        )

    def _fill_models(self, names: list[str]) -> None:
        current = self.model.currentData()
        self.model.blockSignals(True)
        self.model.clear()
        default = self.ctx.get("default_model")
        self.model.addItem(f"Default ({default})" if default else "Default model", None)
        for name in names:
            self.model.addItem(name, name)
        self.model.setCurrentIndex(max(0, self.model.findData(current)))
        self.model.blockSignals(False)

    def _speaker_model_checked(self, available: bool) -> None:
        # By channel works without a speaker model; the by-voice choices do not.
        self._voices_available = available
        self.speakers.set_voices_available(available)
        self.speakers.setEnabled(True)
        self.speakers.setToolTip(SPEAKERS_TIP if available else NO_SPEAKER_MODEL)

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Save exported transcripts in")
        if folder:
            self._set_folder(folder)

    def _set_folder(self, folder: str) -> None:
        self.folder.setText(folder)
        self._save()

    def _save(self) -> None:
        formats = ",".join(f for f, box in self.formats.items() if box.isChecked())
        values = {
            **self.language.settings_values(),  # language, languages
            "speakers": self.speakers.value(),
            "output_formats": formats or None,
            "output_dir": self.folder.text() or None,
            "export_automatically": self.automatic.isChecked(),
        }
        for key, value in values.items():
            if self.ctx.get(key) != value:
                self.ctx.set(key, value)


def _split(value) -> list[str]:
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return [v.strip() for v in str(value or "").split(",") if v.strip()]
