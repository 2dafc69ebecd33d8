"""The transcript view's speakers: the list (in each speaker's colour), Rename, Merge into and
Remember voice. Renames and merges are edits of the view's model, so Undo takes them back."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..transcript.edits import MergeSpeakers, RenameSpeaker
from .widgets import speaker_color
from .workers import run_in_worker


class SpeakersPanel(QWidget):
    voice_saved = Signal(str)  # a voice profile's name, once "Remember voice" saved it

    def __init__(self, view, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.list = QListWidget()
        self.list.setToolTip("Speakers in this transcript")
        self.rename_button = QPushButton("Rename…")
        self.rename_button.clicked.connect(self.rename_dialog)
        self.merge_button = QPushButton("Merge into…")
        self.merge_button.setToolTip("The selected speaker is the same person as another one")
        self.merge_button.clicked.connect(self.merge_dialog)
        self.remember_button = QPushButton("Remember voice…")
        self.remember_button.setToolTip(
            "Save the selected speaker's voice under a name: new transcripts with speaker "
            "labels name that voice (only a voice fingerprint is kept, never audio)"
        )
        self.remember_button.clicked.connect(self.remember_dialog)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Speakers"))
        layout.addWidget(self.list, 1)
        for b in (self.rename_button, self.merge_button, self.remember_button):
            layout.addWidget(b)

    @property
    def transcript(self):
        return self.view.transcript

    def show_speakers(self) -> None:
        row = max(0, self.list.currentRow())
        self.list.clear()
        ids = self.transcript.speaker_ids()
        for sid in ids:
            entry = QListWidgetItem(self.transcript.speaker_name(sid))
            entry.setData(Qt.ItemDataRole.UserRole, sid)
            entry.setForeground(speaker_color(sid, ids))
            self.list.addItem(entry)
        if ids:
            self.list.setCurrentRow(min(row, len(ids) - 1))
        self.setVisible(bool(ids))
        self.merge_button.setEnabled(len(ids) > 1)

    def selected(self) -> str | None:
        entry = self.list.currentItem()
        return entry.data(Qt.ItemDataRole.UserRole) if entry is not None else None

    # --- rename and merge ------------------------------------------------------------------

    def rename(self, speaker_id: str, name: str) -> None:
        self.view.model.do(RenameSpeaker(speaker_id, name))

    def merge(self, from_id: str, into_id: str) -> None:
        self.view.model.do(MergeSpeakers(from_id, into_id))

    def rename_dialog(self) -> None:
        sid = self.selected()
        if sid is None:
            return
        name, ok = QInputDialog.getText(
            self, "Rename speaker", f"Name for {self.transcript.speaker_name(sid)}:",
            text=self.transcript.speaker_name(sid),
        )  # fmt: skip
        if ok:
            self.rename(sid, name)

    def merge_dialog(self) -> None:
        sid = self.selected()
        others = [s for s in self.transcript.speaker_ids() if s != sid]
        if sid is None or not others:
            return
        names = [self.transcript.speaker_name(s) for s in others]
        name, ok = QInputDialog.getItem(
            self, "Merge speakers",
            f"{self.transcript.speaker_name(sid)} is the same person as:", names, 0, False,
        )  # fmt: skip
        if ok:
            self.merge(sid, others[names.index(name)])

    # --- remember a voice ------------------------------------------------------------------

    def remember_dialog(self) -> None:
        sid = self.selected()
        if sid is None:
            return
        name, ok = QInputDialog.getText(
            self, "Remember voice",
            f"Name new transcripts give the voice of {self.transcript.speaker_name(sid)}:",
            text=self.transcript.speaker_name(sid),
        )  # fmt: skip
        if ok and name.strip():
            self.remember_voice(sid, name.strip())

    def remember_voice(self, speaker_id: str, name: str) -> None:
        """Learn ``speaker_id``'s voice from this item's recording (on a worker) and save it
        as the voice profile ``name``."""
        view = self.view
        if view.item is None:
            return
        t = view.snapshot()
        t.source = view.item.source
        self.remember_button.setEnabled(False)
        view.banner.show_message(f"Learning the voice of {name}…")

        def done(profile) -> None:
            self.remember_button.setEnabled(True)
            view.banner.show_message(
                f"Saved the voice of {profile.name}. New transcripts with speaker labels will "
                "name this voice (Models page: Voice profiles)."
            )
            view.ctx.profiles_changed.emit()
            self.voice_saved.emit(profile.name)

        def failed(exc: BaseException) -> None:
            self.remember_button.setEnabled(True)
            view.banner.show_message(f"Could not remember the voice: {exc}", "error")

        run_in_worker(_remember, view.ctx, t, speaker_id, name, on_done=done, on_error=failed)


def _remember(ctx, transcript, speaker_id: str, name: str):
    from ..speakers.encoder import SpeakerModelError
    from ..speakers.profiles import ProfileError, remember_voice

    try:
        encoder = ctx.speaker_encoder()
    except SpeakerModelError as e:
        raise ProfileError(str(e)) from None
    if encoder is None:
        raise ProfileError("no speaker model is installed; install one on the Models page first")
    return remember_voice(transcript, speaker_id, encoder, name=name)
