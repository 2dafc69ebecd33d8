"""Voice profiles on the Models page: the voices this computer knows by name, with Delete.

A profile is saved from a transcript's speaker ("Remember voice…" in the transcript view) and
names that voice in later transcripts with speaker labels. Profiles hold voice embeddings
only, never audio; deleting one forgets the voice.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from .context import AppContext
from .widgets import Banner, heading, muted
from .workers import run_in_worker


def _load():
    from ..speakers.profiles import list_profiles

    return list_profiles()


class VoiceProfilesBox(QWidget):
    def __init__(self, ctx: AppContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(heading("Voice profiles", 1.1))
        self.about = muted(
            "Voices you named with “Remember voice…” in a transcript: new transcripts with "
            "speaker labels give them their names. Only voice fingerprints are kept, never audio."
        )
        lay.addWidget(self.about)
        self.banner = Banner()
        lay.addWidget(self.banner)
        self.list = QListWidget()
        self.list.itemSelectionChanged.connect(self._update_buttons)
        lay.addWidget(self.list)
        row = QHBoxLayout()
        self.delete_btn = QPushButton("Delete profile…")
        self.delete_btn.clicked.connect(self.delete)
        row.addWidget(self.delete_btn)
        row.addStretch(1)
        self.buttons = QWidget()
        self.buttons.setLayout(row)
        row.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.buttons)
        ctx.profiles_changed.connect(self.refresh)
        self._update_buttons()
        self.refresh()

    def refresh(self) -> None:
        run_in_worker(_load, on_done=self._show, on_error=self._failed)

    def _failed(self, exc: BaseException) -> None:
        self.banner.show_message(f"Could not read the voice profiles: {exc}", "error")

    def _show(self, profiles) -> None:
        self.banner.hide()
        self.list.clear()
        for p in profiles:
            samples = len(p.embeddings)
            entry = QListWidgetItem(
                f"{p.name}  ·  {samples} recording{'s' if samples != 1 else ''}  ·  {p.model}"
            )
            entry.setData(Qt.ItemDataRole.UserRole, p.name)
            self.list.addItem(entry)
        # None yet: one line says how to make one; the empty list and its button go away.
        self.list.setVisible(bool(profiles))
        self.buttons.setVisible(bool(profiles))
        self.about.setText(
            "None yet. Name a speaker's voice with “Remember voice…” in a transcript: new "
            "transcripts with speaker labels give it that name (only a voice fingerprint is "
            "kept, never audio)." if not profiles else
            "New transcripts with speaker labels give these voices their names. Only voice "
            "fingerprints are kept, never audio."
        )  # fmt: skip
        if profiles:
            rows = min(len(profiles), 4)
            self.list.setFixedHeight(
                rows * self.list.sizeHintForRow(0) + 2 * self.list.frameWidth() + 4
            )
        self._update_buttons()

    def names(self) -> list[str]:
        return [
            self.list.item(i).data(Qt.ItemDataRole.UserRole)
            for i in range(self.list.count())
            if self.list.item(i).data(Qt.ItemDataRole.UserRole)
        ]

    def selected(self) -> str | None:
        entry = self.list.currentItem()
        return entry.data(Qt.ItemDataRole.UserRole) if entry is not None else None

    def select(self, name: str) -> None:
        for i in range(self.list.count()):
            if self.list.item(i).data(Qt.ItemDataRole.UserRole) == name:
                self.list.setCurrentRow(i)

    def _update_buttons(self) -> None:
        self.delete_btn.setEnabled(self.selected() is not None)

    def delete(self) -> None:
        name = self.selected()
        if name is None:
            return
        answer = QMessageBox.question(
            self,
            "Delete voice profile",
            f"Forget the voice of {name}?\n\nTranscripts already made keep their names; new "
            "ones will no longer recognise this voice.",
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        from ..speakers.profiles import delete_profile

        run_in_worker(
            delete_profile, name,
            on_done=lambda _ok: (self.ctx.profiles_changed.emit(),
                                 self.ctx.status_message.emit(f"Voice profile {name} deleted")),
            on_error=lambda e: self.banner.show_message(f"Could not delete {name}: {e}", "error"),
        )  # fmt: skip
