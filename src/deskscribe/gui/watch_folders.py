"""Settings → Watch folders: any number of folders whose new audio and video files are
transcribed by themselves, each with its own options (``service.watch.WatchFolder``; the
watching itself is ``service.watch.WatchRunner``, run by the main window)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..service.watch import WatchFolder, folders_from_settings
from ..transcript.export import FORMATS
from .file_options import FORMAT_LABELS
from .speakers_choice import SpeakersChoice
from .widgets import LanguageCombo, muted


def describe(folder: WatchFolder) -> str:
    where = "next to each file" if not folder.output_dir else f"in {folder.output_dir}"
    parts = [str(folder.path), ", ".join(folder.formats).upper() + " " + where]
    if folder.recursive:
        parts.append("with subfolders")
    if folder.speakers != "off":
        parts.append(f"speakers: {folder.speakers}")
    return " — ".join(parts)


class WatchFoldersBox(QWidget):
    """The list of watched folders with Add / Edit / Remove."""

    def __init__(self, ctx, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.folders = folders_from_settings(ctx.get("watch_folders"))
        self.list = QListWidget()
        self.list.itemDoubleClicked.connect(lambda _i: self.edit())
        add, self.edit_btn, self.remove_btn = (QPushButton("Add folder…"), QPushButton("Edit…"),
                                               QPushButton("Remove"))  # fmt: skip
        add.clicked.connect(self.add)
        self.edit_btn.clicked.connect(self.edit)
        self.remove_btn.clicked.connect(self.remove)
        self.list.currentRowChanged.connect(lambda _r: self._buttons())
        buttons = QHBoxLayout()
        for b in (add, self.edit_btn, self.remove_btn):
            buttons.addWidget(b)
        buttons.addStretch(1)
        lay = QVBoxLayout(self)
        lay.addWidget(muted(
            "New audio and video files in these folders are transcribed by themselves, once "
            "each, as soon as they are fully copied; the transcripts go to the library and "
            "are exported as each folder says."
        ))  # fmt: skip
        lay.addWidget(self.list, 1)
        lay.addLayout(buttons)
        self._show()

    def _show(self) -> None:
        self.list.clear()
        for folder in self.folders:
            QListWidgetItem(describe(folder), self.list)
        self._buttons()

    def _buttons(self) -> None:
        picked = self.list.currentRow() >= 0
        self.edit_btn.setEnabled(picked)
        self.remove_btn.setEnabled(picked)

    def add(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Watch this folder")
        if path:
            self._open(WatchFolder(Path(path), speakers=str(self.ctx.get("speakers") or "off")),
                       None)  # fmt: skip

    def edit(self) -> None:
        row = self.list.currentRow()
        if row >= 0:
            self._open(self.folders[row], row)

    def _open(self, folder: WatchFolder, row: int | None) -> None:
        dialog = WatchFolderDialog(folder, self)
        dialog.accepted.connect(lambda: self._done(dialog.folder(), row))
        self.dialog = dialog
        dialog.open()

    def _done(self, folder: WatchFolder, row: int | None) -> None:
        if row is None:
            self.folders.append(folder)
        else:
            self.folders[row] = folder
        self._show()

    def remove(self) -> None:
        row = self.list.currentRow()
        if row >= 0:
            del self.folders[row]
            self._show()

    def value(self) -> list[dict] | None:
        return [f.to_dict() for f in self.folders] or None


class WatchFolderDialog(QDialog):
    """One watched folder's options."""

    def __init__(self, folder: WatchFolder, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Watch folder")
        self._path = folder.path
        form = QFormLayout()
        self.path = QLineEdit(str(folder.path))
        self.path.setReadOnly(True)
        choose = QPushButton("Choose…")
        choose.clicked.connect(self._choose_path)
        row = QHBoxLayout()
        row.addWidget(self.path, 1)
        row.addWidget(choose)
        form.addRow("Folder", row)
        self.recursive = QCheckBox("Include subfolders")
        self.recursive.setChecked(folder.recursive)
        form.addRow("", self.recursive)
        self.model = QLineEdit(folder.model or "")
        self.model.setPlaceholderText("The default model")
        form.addRow("Model", self.model)
        self.language = LanguageCombo()
        self.language.set_code(folder.language)
        form.addRow("Language", self.language)
        self.speakers = SpeakersChoice(folder.speakers)
        form.addRow("Speakers", self.speakers)
        grid = QGridLayout()
        self.formats: dict[str, QCheckBox] = {}
        for i, fmt in enumerate(FORMATS):
            box = self.formats[fmt] = QCheckBox(FORMAT_LABELS.get(fmt, fmt))
            box.setChecked(fmt in folder.formats)
            grid.addWidget(box, i // 4, i % 4)
        form.addRow("Export as", grid)
        self.output = QLineEdit(folder.output_dir or "")
        self.output.setPlaceholderText("Next to each file")
        browse = QPushButton("Choose…")
        browse.clicked.connect(self._choose_output)
        out = QHBoxLayout()
        out.addWidget(self.output, 1)
        out.addWidget(browse)
        form.addRow("Save exports in", out)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                   | QDialogButtonBox.StandardButton.Cancel)  # fmt: skip
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        lay = QVBoxLayout(self)
        lay.addLayout(form)
        lay.addWidget(buttons)

    def _choose_path(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Watch this folder", str(self._path))
        if path:
            self._path = Path(path)
            self.path.setText(path)

    def _choose_output(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Save exports in", self.output.text())
        if path:
            self.output.setText(path)

    def folder(self) -> WatchFolder:
        formats = tuple(f for f, box in self.formats.items() if box.isChecked()) or ("txt",)
        return WatchFolder(
            self._path, recursive=self.recursive.isChecked(),
            model=self.model.text().strip() or None, language=self.language.code(),
            speakers=self.speakers.value(), languages=self.language.codes(),
            formats=formats, output_dir=self.output.text().strip() or None,
        )  # fmt: skip
