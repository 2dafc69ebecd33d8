"""After a crash: offer the interrupted live sessions (audio + text) and the unfinished queue.

`look_for_interrupted` and `restore_session` are plain functions (no Qt) run on worker threads;
`RecoveryDialog` lists what was found and restores the checked entries with progress.
Declining changes nothing on disk: the same offer comes at the next start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
from ..library import Item, Library
from ..transcript import Segment, Transcript
from .context import AppContext
from .widgets import Banner, clock, heading, muted
from .workers import WorkerHandle, run_in_worker


@dataclass
class Interrupted:
    sessions: list[SessionInfo] = field(default_factory=list)
    jobs: list[Item] = field(default_factory=list)


def look_for_interrupted(library: Library) -> Interrupted:
    """Live sessions no process holds that never finished or that no library item holds (a
    save that failed at Stop, a restore cut short, a session of ``deskscribe live``), and file
    jobs left queued/running."""
    from ..audio.sessions import unlisted_sessions

    return Interrupted(unlisted_sessions(library.live_folders()), library.unfinished_jobs())


def recovered_transcript(data: dict | None, duration: float, source: str) -> Transcript:
    """The autosaved transcript, plus the words that were still tentative as a last line."""
    transcript = Transcript(segments=[])
    if data and data.get("segments") is not None:
        try:
            transcript = Transcript.from_dict(data)
        except ValueError:
            transcript = Transcript(segments=[])
    tentative = str((data or {}).get("tentative") or "").strip()
    if tentative:
        last = transcript.segments[-1] if transcript.segments else None
        start = last.end if last else 0.0
        next_id = max((s.id for s in transcript.segments), default=-1) + 1
        transcript.segments.append(
            Segment(start=start, end=max(start, duration), text=" " + tentative, id=next_id)
        )
    transcript.duration = duration
    transcript.source = source
    return transcript


def restore_session(library: Library, info: SessionInfo) -> int:
    """Tidy the session's files (`audio.sessions.recover`) and put it in the library."""
    from ..audio.sessions import recover

    found = recover(info.folder)
    transcript = recovered_transcript(found.transcript, found.duration_s, str(found.folder))
    title = info.title or f"Recovered session {info.created:%Y-%m-%d %H:%M}"
    item_id = library.add_live_session(found.folder, title, info.created, found.duration_s)
    library.save_transcript(item_id, transcript)
    return item_id


def restore_all(library: Library, sessions: list[SessionInfo], progress, cancel) -> list:
    done, problems = [], []
    for i, info in enumerate(sessions):
        if cancel.is_set():
            break
        progress(i, len(sessions))
        try:
            done.append(restore_session(library, info))
        except Exception as exc:  # one damaged session must not stop the others
            problems.append(f"{info.folder.name}: {exc}")
    progress(len(sessions), len(sessions))
    return [done, problems]


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
