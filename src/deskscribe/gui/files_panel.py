"""The Files page: drop files or folders, a queue that transcribes them one at a time.

Each file becomes a library item (`service.queue.queue_files`) and runs through
`service.queue.run_queued_item` on a worker thread, its job in the engine process, or on a
DeskScribe server when Settings say so (`service.remote.remote_runner`: the same progress,
cancel and per-file errors); this panel only keeps the table, the buttons and the library in
step. A file that fails shows its reason in its row and the queue goes on; files that failed on
the server are offered to be transcribed on this computer instead.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterable
from pathlib import Path

from PySide6.QtCore import QCoreApplication, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ..audio import decode  # noqa: F401 - loads FFmpeg at start, not on a worker thread
from ..library import Item
from ..service.engine import EngineProcess
from ..service.models import queued_model_name, runtime_device
from ..service.queue import (
    ExportOptions,
    JobOutcome,
    Runner,
    job_options,
    queue_files,
    run_queued_item,
)
from ..service.remote import remote_runner
from .file_options import FileOptions
from .queue_model import (
    DURATION,
    FILE,
    FINISHED,
    PROGRESS,
    STATUS,
    ProgressDelegate,
    QueueModel,
    QueueRow,
)
from .widgets import Banner, heading, muted
from .workers import WorkerHandle, run_in_worker

ENGINE_IDLE_MS = 5 * 60 * 1000
DROP_HINT = "Drop audio or video files or folders anywhere on this window, or click Add files…"


def _prepare(
    ctx, paths: list[Path], choice, language, speakers, redo: bool, languages=()
) -> list[QueueRow]:
    """Worker thread: find the files, skip done ones, add the rest to the library, probe them."""
    model = queued_model_name(choice, ctx.get("default_model"))
    options = job_options(model, language, speakers, languages)
    queued = queue_files(ctx.library, paths, options, redo)
    return [QueueRow(q.item_id, q.path, q.status, q.duration, error=q.error,
                     progress=1.0 if q.status == "skipped" else 0.0) for q in queued]  # fmt: skip


def _run_job(
    run: Runner, library, item_id: int, device_choice: str,
    export_options: ExportOptions, progress=None, cancel=None,
) -> JobOutcome:  # fmt: skip
    """Worker thread: one job with ``run``: the engine process's (see `service.engine` for why
    a process) or a server's; its result is stored in the library here, in the app's process."""
    return run_queued_item(
        library, item_id, run, device=runtime_device(device_choice),
        export_options=export_options, progress=progress, cancel=cancel,
    )  # fmt: skip


class FilesPanel(QWidget):
    queue_finished = Signal()  # every row is done, failed, cancelled or skipped
    job_finished = Signal(int)  # a library item id whose job just ended

    def __init__(self, ctx, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.queue = QueueModel(self)
        self.engine = EngineProcess()
        self._idle = QTimer(self)  # the engine (and its model's memory) goes when idle
        self._idle.setSingleShot(True)
        self._idle.setInterval(ENGINE_IDLE_MS)
        self._idle.timeout.connect(self._stop_engine)
        QCoreApplication.instance().aboutToQuit.connect(self.shutdown)
        self._job: WorkerHandle | None = None
        self._shut_down = False
        self._job_id: int | None = None
        self._remove_after: set[int] = set()
        self._job_on_server = False
        self._server_failed: set[int] = set()  # item ids that failed on the server
        self._run_here: set[int] = set()  # item ids to transcribe on this computer next time
        self._adding = 0
        self.setAcceptDrops(True)

        self.options = FileOptions(ctx)
        self.table = QTableView()
        self.table.setModel(self.queue)
        self.table.setItemDelegateForColumn(PROGRESS, ProgressDelegate(self.table))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(FILE, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(DURATION, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(STATUS, QHeaderView.ResizeMode.Stretch)
        header.resizeSection(PROGRESS, 200)
        self.table.doubleClicked.connect(lambda _i: self.open_selected())
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self.queue.dataChanged.connect(lambda *_: self._selection_changed())

        self.add_files_button = QPushButton("Add files…")
        self.add_folder_button = QPushButton("Add folder…")
        self.cancel_button = QPushButton("Cancel")
        self.retry_button = QPushButton("Retry")
        self.remove_button = QPushButton("Remove")
        self.open_button = QPushButton("Open transcript")
        self.clear_button = QPushButton("Clear finished")
        self.add_files_button.clicked.connect(self.choose_files)
        self.add_folder_button.clicked.connect(self.choose_folder)
        self.cancel_button.clicked.connect(self.cancel_selected)
        self.retry_button.clicked.connect(self.retry_selected)
        self.remove_button.clicked.connect(self.remove_selected)
        self.open_button.clicked.connect(self.open_selected)
        self.clear_button.clicked.connect(self.clear_finished)
        QShortcut(QKeySequence.StandardKey.Delete, self.table, self.remove_selected)

        buttons = QHBoxLayout()
        for b in (self.add_files_button, self.add_folder_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        for b in (self.open_button, self.cancel_button, self.retry_button, self.remove_button,
                  self.clear_button):  # fmt: skip
            buttons.addWidget(b)

        # Where files go: said on the page, so nobody uploads a file without knowing it.
        self.where = muted()
        self.where.hide()
        ctx.settings_changed.connect(self._settings_changed)
        self.server_banner = Banner()  # files that failed on the server: run them here instead
        self.summary = QLabel(DROP_HINT)
        self.summary.setWordWrap(True)
        self.details = QLabel()  # the whole reason of the selected failed file
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setStyleSheet("color: #c0392b")
        self.details.hide()
        layout = QVBoxLayout(self)
        layout.addWidget(heading("Files"))
        layout.addWidget(muted(DROP_HINT))
        layout.addWidget(self.options)
        layout.addWidget(self.where)
        layout.addLayout(buttons)
        layout.addWidget(self.server_banner)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.details)
        layout.addWidget(self.summary)
        self._update_buttons()
        self._show_where()

    # --- adding ----------------------------------------------------------------------------

    def add_paths(self, paths: Iterable[str | Path]) -> None:
        """Queue files (and the media files inside folders); returns at once."""
        paths = [Path(p) for p in paths]
        if not paths:
            return
        o = self.options
        self._adding += 1
        self.summary.setText(f"Adding {len(paths)} item(s)…")
        run_in_worker(
            functools.partial(_prepare, self.ctx, paths),
            o.model_choice(), o.language_code(), o.speakers_choice(), o.redo.isChecked(),
            o.languages_choice(), on_done=self._added, on_error=self._add_failed, name="add-files",
        )  # fmt: skip

    def resume_jobs(self, items: Iterable[Item]) -> None:
        """Queue library items again (unfinished jobs found after a crash)."""
        for item in items:
            if self.queue.row(item.id) is None:
                self.ctx.library.update(item.id, status="queued", progress=0.0, error=None)
                self.queue.add(QueueRow(item.id, Path(item.source), duration=item.duration))
        self._kick()

    def choose_files(self) -> None:
        files, _ = QFileDialog.getOpenFileNames(
            self, "Add files to transcribe", "",
            "Audio and video (*.wav *.mp3 *.m4a *.flac *.ogg *.opus *.aac *.wma *.mp4 *.mov "
            "*.mkv *.webm *.avi);;All files (*)",
        )  # fmt: skip
        self.add_paths(files)

    def choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of recordings")
        if folder:
            self.add_paths([folder])

    def _added(self, rows: list[QueueRow]) -> None:
        self._adding -= 1
        skipped = 0
        for row in rows:
            if self.queue.row(row.item_id) is not None:
                continue  # already in the queue (the same done file dropped twice)
            self.queue.add(row)
            skipped += row.status == "skipped"
        if skipped:
            self.ctx.status_message.emit(
                f"{skipped} file(s) were transcribed before and were not run again "
                "(tick “Transcribe again” to redo them)."
            )
        if any(r.status == "failed" for r in rows):
            self.ctx.library_changed.emit()
        if not rows:
            self.summary.setText("No audio or video files were found there.")
        self._kick()

    def _add_failed(self, exc: BaseException) -> None:
        self._adding -= 1
        self.summary.setText(f"Could not add the files: {exc}")
        self._kick()

    # --- running ---------------------------------------------------------------------------

    def _kick(self) -> None:
        if self._job is not None or self._shut_down:
            return
        row = self.queue.next_queued()
        if row is None:
            self._show_summary()
            if self._adding == 0 and self.queue.rows:
                self._idle.start()
                self.queue_finished.emit()
            return
        self.queue.change(row.item_id, status="running", progress=0.0, eta=None, error=None)
        self._job_id = row.item_id
        self._idle.stop()
        run, self._job_on_server = self._runner(row.item_id)
        job = functools.partial(
            _run_job, run, self.ctx.library, row.item_id,
            self.ctx.get("device", "auto"), self.options.export_options(),
        )  # fmt: skip
        self._job = run_in_worker(
            job, on_done=self._job_done, on_error=self._job_crashed,
            on_progress=functools.partial(self._job_progress, row.item_id), name="file-job",
        )  # fmt: skip
        self._show_summary()
        self._update_buttons()

    def server(self) -> tuple[str, str | None] | None:
        """(address, key) of the DeskScribe server files go to, or None: this computer."""
        if not self.ctx.get_bool("use_server"):
            return None
        return str(self.ctx.get("server_url") or ""), self.ctx.get("server_key") or None

    def _runner(self, item_id: int) -> tuple[Runner, bool]:
        """What runs this item, and whether that is the server. Read at each job, so a change
        in Settings applies from the next file on."""
        server = None if item_id in self._run_here else self.server()
        if server is None:
            return self.engine.run, False
        # Quitting stops the job as the engine's are stopped: unfinished, offered at next start.
        return remote_runner(*server, quitting=lambda: self._shut_down), True

    def _job_progress(self, item_id: int, fraction: float, eta: float | None) -> None:
        self.queue.change(item_id, progress=fraction, eta=eta)

    def _job_done(self, outcome: JobOutcome) -> None:
        if outcome.status == "running":  # stopped with the app; it stays unfinished
            self._job, self._job_id = None, None
            return
        self._finish_job(outcome.item_id, outcome.status, outcome.error)
        if outcome.exported:
            names = ", ".join(p.name for p in outcome.exported)
            self.ctx.status_message.emit(f"Exported {names} to {outcome.exported[0].parent}")

    def _job_crashed(self, exc: BaseException) -> None:
        item_id = self._job_id
        message = f"Unexpected error ({type(exc).__name__}: {exc})"
        with contextlib.suppress(Exception):  # the library itself failed; the row says why
            self.ctx.library.update(item_id, status="failed", error=message)
        self._finish_job(item_id, "failed", message)

    def _finish_job(self, item_id: int, status: str, error: str | None) -> None:
        self._job, self._job_id = None, None
        self._run_here.discard(item_id)  # "here" was for that run; Retry asks Settings again
        if self._job_on_server and status == "failed":
            self._server_failed.add(item_id)
        self._job_on_server = False
        self.queue.change(item_id, status=status, error=error, eta=None,
                          progress=1.0 if status == "done" else 0.0)  # fmt: skip
        if item_id in self._remove_after:
            self._remove_after.discard(item_id)
            self._forget(item_id)
        self.ctx.library_changed.emit()
        self.job_finished.emit(item_id)
        self._update_buttons()
        self._show_server_banner()
        self._kick()

    # --- the server --------------------------------------------------------------------------

    def _failed_on_server(self) -> list[QueueRow]:
        return [r for r in self.queue.rows
                if r.item_id in self._server_failed and r.status == "failed"]  # fmt: skip

    def _show_server_banner(self) -> None:
        rows = self._failed_on_server()
        if not rows:
            self.server_banner.hide()
            return
        what = f"“{rows[0].path.name}”" if len(rows) == 1 else f"{len(rows)} files"
        self.server_banner.show_message(
            f"{what} could not be transcribed on the DeskScribe server (the reason is in "
            "its row). Transcribe on this computer instead?",
            "warning", "Transcribe on this computer", self.transcribe_here,
        )  # fmt: skip

    def transcribe_here(self) -> None:
        """Queue the files that failed on the server again, to run on this computer (the
        selected ones among them, else all)."""
        failed = self._failed_on_server()
        picked = {r.item_id for r in self.selected_rows()}
        rows = [r for r in failed if r.item_id in picked] or failed
        for row in rows:
            self._server_failed.discard(row.item_id)
            self._run_here.add(row.item_id)
            self.ctx.library.update(row.item_id, status="queued", progress=0.0, error=None)
            self.queue.change(row.item_id, status="queued", progress=0.0, error=None)
        self._show_server_banner()
        self._kick()

    def _settings_changed(self, key: str) -> None:
        if key in ("use_server", "server_url"):
            self._show_where()

    def _show_where(self) -> None:
        server = self.server()
        if server is not None:
            self.where.setText(f"Files are transcribed on the DeskScribe server at "
                               f"{server[0] or '(no address yet)'} (see Settings).")  # fmt: skip
        self.where.setVisible(server is not None)

    def _show_summary(self) -> None:
        counts = self.queue.counts()
        done = counts.get("done", 0) + counts.get("skipped", 0)
        parts = [f"{done} done"]
        for status, word in (("failed", "failed"), ("cancelled", "cancelled")):
            if counts.get(status):
                parts.append(f"{counts[status]} {word}")
        waiting = counts.get("queued", 0)
        if self._job is not None:
            self.summary.setText(f"Transcribing… {', '.join(parts)}, {waiting} waiting.")
        elif self.queue.rows:
            self.summary.setText(f"Queue finished: {', '.join(parts)}.")

    # --- row actions -------------------------------------------------------------------------

    def selected_rows(self) -> list[QueueRow]:
        picked = {i.row() for i in self.table.selectionModel().selectedRows()}
        return [self.queue.rows[i] for i in sorted(picked)]

    def select(self, item_id: int) -> None:
        i = self.queue.index_of(item_id)
        if i is not None:
            self.table.selectRow(i)

    def cancel_selected(self) -> None:
        for row in self.selected_rows():
            if row.status == "running" and self._job is not None:
                self._job.cancel()
            elif row.status == "queued":
                self.ctx.library.update(row.item_id, status="cancelled")
                self.queue.change(row.item_id, status="cancelled")
        self._show_summary()
        self._update_buttons()

    def retry_selected(self) -> None:
        for row in self.selected_rows():
            if row.status in ("failed", "cancelled"):
                self._server_failed.discard(row.item_id)
                self.ctx.library.update(row.item_id, status="queued", progress=0.0, error=None)
                self.queue.change(row.item_id, status="queued", progress=0.0, error=None)
        self._show_server_banner()
        self._kick()

    def remove_selected(self) -> None:
        """Take rows off the queue; unfinished jobs leave the library too, transcripts stay."""
        for row in self.selected_rows():
            if row.status == "running":
                self._remove_after.add(row.item_id)
                if self._job is not None:
                    self._job.cancel()
            else:
                self._forget(row.item_id)
        self._show_summary()
        self._update_buttons()

    def _forget(self, item_id: int) -> None:
        row = self.queue.row(item_id)
        if row is not None and row.status not in ("done", "skipped"):
            self.ctx.library.delete(item_id)
            self.ctx.library_changed.emit()
        self.queue.remove(item_id)
        self._server_failed.discard(item_id)
        self._show_server_banner()

    def open_selected(self) -> None:
        for row in self.selected_rows():
            if row.status in ("done", "skipped"):
                self.ctx.open_transcript.emit(row.item_id)
                return

    def clear_finished(self) -> None:
        for row in [r for r in self.queue.rows if r.status in ("done", "skipped")]:
            self.queue.remove(row.item_id)
        self._show_summary()
        self._update_buttons()

    def cancel_all(self) -> None:
        """The app is quitting: stop the engine. The running job and the waiting ones stay
        unfinished in the library, so the next start offers to run them."""
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the engine process (the app is quitting); waits a moment for it."""
        self._shut_down = True
        self._idle.stop()
        self.engine.close()

    def _stop_engine(self) -> None:
        if self._job is None:
            run_in_worker(self.engine.close, name="engine-close")

    def _selection_changed(self) -> None:
        rows = self.selected_rows()
        failed = [r for r in rows if r.status == "failed" and r.error]
        self.details.setText(f"{failed[0].path.name}: {failed[0].error}" if failed else "")
        self.details.setVisible(bool(failed))
        self._update_buttons()

    def _update_buttons(self) -> None:
        rows = self.selected_rows()
        status = {r.status for r in rows}
        self.cancel_button.setEnabled(bool(status & {"running", "queued"}))
        self.retry_button.setEnabled(bool(status & {"failed", "cancelled"}))
        self.remove_button.setEnabled(bool(rows))
        self.open_button.setEnabled(bool(status & {"done", "skipped"}))
        self.clear_button.setEnabled(any(r.status in ("done", "skipped") for r in self.queue.rows))

    @property
    def finished(self) -> bool:
        return self._adding == 0 and all(r.status in FINISHED for r in self.queue.rows)

    # --- drops onto this page (the main window forwards drops anywhere on it) ---------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.add_paths(paths)
