"""After a crash: offer the interrupted live sessions (audio + text) and the unfinished queue.

What is found and how it is restored is the service's (``service.recovery``, run on worker
threads); `RecoveryDialog` lists what was found and restores the checked entries with
progress. Declining changes nothing on disk: the same offer comes at the next start.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..audio.sessions import SessionInfo
from ..library import Item
from ..service.recovery import Interrupted, restore_all
from .context import AppContext
from .widgets import Banner, clock, heading, muted
from .workers import WorkerHandle, run_in_worker


class RecoveryDialog(QDialog):
    restored = Signal(list, list)  # restored library ids, queue items to resume

    def __init__(self, ctx: AppContext, found: Interrupted, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx, self.found = ctx, found
        self.job: WorkerHandle | None = None
        self.setWindowTitle("Restore interrupted work")
        self.setMinimumWidth(560)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(22, 18, 22, 18)
        lay.addWidget(heading("DeskScribe did not close properly last time", 1.3))
        lay.addWidget(QLabel(
            "Nothing is lost: the audio was saved as it was recorded, and the text up to a few "
            "seconds before. Choose what to restore."
        ))  # fmt: skip
        self.list = QListWidget()
        for info in found.sessions:
            title = info.title or "Live session"
            text = (f"{title} — {info.created:%Y-%m-%d %H:%M}, {clock(info.duration_s)} "
                    "recorded")  # fmt: skip
            self._add(text, info)
        for job in found.jobs:
            self._add(f"Unfinished file: {job.source_name} (back into the queue)", job)
        lay.addWidget(self.list, 1)
        lay.addWidget(muted(
            "Restored sessions open in the library. If you choose Later, DeskScribe asks again "
            "next time; nothing is deleted."
        ))  # fmt: skip
        self.bar = QProgressBar()
        self.bar.hide()
        self.banner = Banner()
        lay.addWidget(self.bar)
        lay.addWidget(self.banner)
        buttons = QHBoxLayout()
        self.later_btn = QPushButton("Later")
        self.later_btn.clicked.connect(self.reject)
        self.restore_btn = QPushButton("Restore")
        self.restore_btn.setDefault(True)
        self.restore_btn.clicked.connect(self.restore)
        buttons.addStretch(1)
        buttons.addWidget(self.later_btn)
        buttons.addWidget(self.restore_btn)
        lay.addLayout(buttons)
        self.adjustSize()

    def _add(self, text: str, data: object) -> None:
        item = QListWidgetItem(text, self.list)
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Checked)
        item.setData(Qt.ItemDataRole.UserRole, data)

    def checked(self) -> list:
        items = (self.list.item(i) for i in range(self.list.count()))
        return [
            i.data(Qt.ItemDataRole.UserRole)
            for i in items
            if i.checkState() == Qt.CheckState.Checked
        ]

    def restore(self) -> None:
        chosen = self.checked()
        sessions = [c for c in chosen if isinstance(c, SessionInfo)]
        self.jobs = [c for c in chosen if isinstance(c, Item)]
        self.restore_btn.setEnabled(False)
        self.later_btn.setEnabled(False)
        self.list.setEnabled(False)
        self.bar.show()
        self.bar.setRange(0, max(1, len(sessions)))
        self.job = run_in_worker(
            restore_all, self.ctx.library, sessions,
            on_done=self._done, on_error=self._failed,
            on_progress=lambda done, total: self.bar.setValue(done),
        )  # fmt: skip

    def _done(self, result: list) -> None:
        ids, problems = result
        self.restored.emit(ids, self.jobs)
        if problems:
            self.banner.show_message(
                "Some sessions could not be restored: " + "; ".join(problems)
                + ". Their folders are untouched; try again at the next start.", "error",
            )  # fmt: skip
            self.later_btn.setText("Close")
            self.later_btn.setEnabled(True)
            return
        self.accept()

    def _failed(self, exc: BaseException) -> None:
        self.banner.show_message(f"Restoring failed: {exc}", "error")
        self.restore_btn.setEnabled(True)
        self.later_btn.setEnabled(True)
