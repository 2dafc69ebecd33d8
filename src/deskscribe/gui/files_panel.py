"""The Files page: drop files or folders, a queue that transcribes them one at a time.

The queue itself is the service's (`service.file_queue.FileQueue`: order, scheduling,
cancel / retry / remove, this computer or a DeskScribe server, files waiting for a model,
the engine process); this page shows its entries in a table, refreshed from its one change
notification, and asks it for changes. A file that fails shows its reason and the queue goes
on; files that failed on the server are offered to be transcribed on this computer instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, Qt, Signal
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
from ..service.file_queue import FileQueue, QueueChanged
from ..service.models import queued_model_name, runtime_device
from ..service.queue import job_options
from .file_options import FileOptions
from .queue_model import DURATION, FILE, PROGRESS, STATUS, ProgressDelegate, QueueModel, QueueRow
from .widgets import Banner, heading, muted, select_rows
from .workers import run_in_worker

DROP_HINT = "Drop audio or video files or folders anywhere on this window, or click Add files…"


class _Relay(QObject):
    """The queue's notifications (from its thread) onto the UI thread, queued."""

    changed = Signal(object)


class FilesPanel(QWidget):
    queue_finished = Signal()  # every row is done, failed, cancelled or skipped
    job_finished = Signal(int)  # a library item id whose job just ended

    def __init__(self, ctx, parent: QWidget | None = None, file_queue: FileQueue | None = None,
                 ) -> None:  # fmt: skip
        super().__init__(parent)
        self.ctx = ctx
        self.queue = QueueModel(self)
        self.file_queue = file_queue or FileQueue(
            ctx.library, server=self.server,
            device=lambda: runtime_device(self.ctx.get("device", "auto")),
            exports=lambda: self.options.export_options(),
        )  # fmt: skip
        self._relay = _Relay()
        self._relay.changed.connect(self._queue_changed)
        self._unsubscribe = self.file_queue.subscribe(self._relay.changed.emit)
        ctx.models_changed.connect(self.file_queue.models_changed)
        QCoreApplication.instance().aboutToQuit.connect(self.shutdown)
        self._shut_down = False
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
        self.summary = QLabel()  # the queue in words (the drop hint is said once, at the top)
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
        self.file_queue.start()

    @property
    def engine(self):
        """The engine process the queue runs jobs in on this computer."""
        return self.file_queue._engine

    # --- adding ----------------------------------------------------------------------------

    def add_paths(self, paths: Iterable[str | Path]) -> None:
        """Queue files (and the media files inside folders); returns at once."""
        paths = [Path(p) for p in paths]
        if not paths:
            return
        o = self.options
        model = queued_model_name(o.model_choice(), self.ctx.get("default_model"))
        options = job_options(model, o.language_code(), o.speakers_choice(), o.languages_choice())
        self._adding += 1
        self.summary.setText(f"Adding {len(paths)} item(s)…")
        run_in_worker(self.file_queue.add, paths, options, o.redo.isChecked(),
                      on_done=self._added, on_error=self._add_failed, name="add-files")  # fmt: skip

    def resume_jobs(self, items: Iterable[Item]) -> None:
        """Queue library items again (unfinished jobs found after a crash)."""
        self.file_queue.resume(list(items))

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

    def _added(self, queued) -> None:
        self._adding -= 1
        skipped = sum(q.status == "skipped" for q in queued)
        if skipped:
            self.ctx.status_message.emit(
                f"{skipped} file(s) were transcribed before and were not run again "
                "(tick “Transcribe again” to redo them)."
            )
        if any(q.status == "failed" for q in queued):
            self.ctx.library_changed.emit()
        if not queued:
            self.summary.setText("No audio or video files were found there.")
        self._refresh(None)

    def _add_failed(self, exc: BaseException) -> None:
        self._adding -= 1
        self.summary.setText(f"Could not add the files: {exc}")
        self._refresh(None)

    # --- the queue's notifications -------------------------------------------------------------

    def _queue_changed(self, event: QueueChanged) -> None:
        self._refresh(event)

    def _refresh(self, event: QueueChanged | None) -> None:
        """Show the queue as it is now: the one place the page follows it."""
        if self._shut_down:
            return
        self.queue.sync(self.file_queue.entries())
        if event is not None and event.progress:
            return
        outcome = event.outcome if event is not None else None
        if outcome is not None:
            self.ctx.library_changed.emit()
            self.job_finished.emit(outcome.item_id)
            if outcome.exported:
                names = ", ".join(p.name for p in outcome.exported)
                self.ctx.status_message.emit(f"Exported {names} to {outcome.exported[0].parent}")
        self._selection_changed()
        self._show_server_banner()
        self._show_summary()
        if event is not None and event.finished and self.queue.rows:
            self.queue_finished.emit()

    def server(self) -> tuple[str, str | None] | None:
        """(address, key) of the DeskScribe server files go to, or None: this computer. Read
        by the queue at each job, so a change in Settings applies from the next file on."""
        if not self.ctx.get_bool("use_server"):
            return None
        return str(self.ctx.get("server_url") or ""), self.ctx.get("server_key") or None

    # --- the server --------------------------------------------------------------------------

    def _failed_on_server(self) -> list[QueueRow]:
        return [r for r in self.queue.rows if r.server_failed and r.status == "failed"]

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
        self.file_queue.run_here([r.item_id for r in self.selected_rows()])

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
        if counts.get("running"):
            self.summary.setText(f"Transcribing… {', '.join(parts)}, {waiting} waiting.")
        elif counts.get("waiting"):
            self.summary.setText(f"{counts['waiting']} file(s) wait for a model: install one on "
                                 "the Models page and they start by themselves.")  # fmt: skip
        elif self._adding:
            return
        elif self.queue.rows:
            self.summary.setText(f"Queue finished: {', '.join(parts)}.")

    # --- row actions -------------------------------------------------------------------------

    def selected_rows(self) -> list[QueueRow]:
        picked = {i.row() for i in self.table.selectionModel().selectedRows()}
        return [self.queue.rows[i] for i in sorted(picked) if i < len(self.queue.rows)]

    def select(self, item_id: int) -> None:
        i = self.queue.index_of(item_id)
        if i is not None:
            select_rows(self.table, [i])

    def _selected_ids(self) -> list[int]:
        return [r.item_id for r in self.selected_rows()]

    def cancel_selected(self) -> None:
        self.file_queue.cancel(self._selected_ids())

    def retry_selected(self) -> None:
        self.file_queue.retry(self._selected_ids())

    def remove_selected(self) -> None:
        """Take rows off the queue; unfinished jobs leave the library too, transcripts stay."""
        ids = self._selected_ids()
        if any(self.queue.row(i).status not in ("done", "skipped") for i in ids):
            self.ctx.library_changed.emit()
        self.file_queue.remove(ids)

    def open_selected(self) -> None:
        for row in self.selected_rows():
            if row.status in ("done", "skipped"):
                self.ctx.open_transcript.emit(row.item_id)
                return

    def clear_finished(self) -> None:
        self.file_queue.clear_finished()

    def cancel_all(self) -> None:
        """The app is quitting: stop the engine. The running job and the waiting ones stay
        unfinished in the library, so the next start offers to run them."""
        self.shutdown()

    def shutdown(self) -> None:
        """Stop the queue and its engine process (the app is quitting); waits a moment."""
        if self._shut_down:
            return
        self._shut_down = True
        self._unsubscribe()
        self.file_queue.shutdown()

    def _selection_changed(self) -> None:
        self._show_failures()
        self._update_buttons()

    def _show_failures(self) -> None:
        """Why files failed, in full (the table's cell is too narrow): the selected ones', or,
        with no failed file selected, the last three failures'."""
        failed = [r for r in self.selected_rows() if r.status == "failed" and r.error]
        if not failed:
            failed = [r for r in self.queue.rows if r.status == "failed" and r.error][-3:]
        self.details.setText("\n".join(f"{r.path.name}: {r.error}" for r in failed))
        self.details.setVisible(bool(failed))

    def _update_buttons(self) -> None:
        rows = self.selected_rows()
        status = {r.status for r in rows}
        self.cancel_button.setEnabled(bool(status & {"running", "queued", "waiting"}))
        self.retry_button.setEnabled(bool(status & {"failed", "cancelled"}))
        self.remove_button.setEnabled(bool(rows))
        self.open_button.setEnabled(bool(status & {"done", "skipped"}))
        self.clear_button.setEnabled(any(r.status in ("done", "skipped") for r in self.queue.rows))

    @property
    def finished(self) -> bool:
        return self._adding == 0 and self.file_queue.finished

    # --- drops onto this page (the main window forwards drops anywhere on it) ---------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.add_paths(paths)
