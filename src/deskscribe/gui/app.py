"""The desktop app: `main()` opens the main window (``deskscribe`` with no arguments).

`MainWindow` holds the pages (Live, Files, Library, Models, Transcript) behind a navigation list,
accepts dropped files anywhere, remembers its size and layout, and on start offers to restore
what a crash interrupted, then — with no model installed — the first-run welcome.
"""

from __future__ import annotations

import contextlib
import sys
from importlib import resources
from pathlib import Path

from PySide6.QtCore import QByteArray, QEvent, QObject, QSettings, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from .. import __version__, settings
from ..service.watch import WatchRunner
from .context import AppContext
from .files_panel import FilesPanel
from .library_panel import LibraryPanel
from .live_panel import LivePanel
from .models_panel import ModelsPanel
from .theme import apply_theme
from .transcript_view import TranscriptView
from .workers import cancel_all, run_in_worker

PAGES = ("Live", "Files", "Library", "Models", "Transcript")


# The first size (then the user's, remembered): it fits a 1366×768 laptop screen with its
# panels, and every page is laid out to work at it (the screenshots in docs/ are taken at it).
DEFAULT_SIZE = (905, 600)


def icon() -> QIcon:
    path = resources.files("deskscribe") / "assets" / "icon.png"
    return QIcon(str(path)) if path.is_file() else QIcon()


def window_settings() -> QSettings:
    """Window geometry and layout, in an INI file next to settings.json."""
    path = settings.settings_path().with_name("window.ini")
    return QSettings(str(path), QSettings.Format.IniFormat)


class MainWindow(QMainWindow):
    # start_up() is through: recovery offered (or nothing to recover), first run offered
    start_up_done = Signal()

    def __init__(self, ctx: AppContext) -> None:
        super().__init__()
        self.ctx = ctx
        self.setWindowTitle("DeskScribe")
        self.setWindowIcon(icon())
        self.setAcceptDrops(True)
        self._quitting = False
        self.live_panel = LivePanel(ctx)
        self.files_panel = FilesPanel(ctx)
        self.library_panel = LibraryPanel(ctx)
        self.models_panel = ModelsPanel(ctx)
        self.transcript_view = TranscriptView(ctx)
        self.stack = QStackedWidget()
        pages = (self.live_panel, self.files_panel, self.library_panel, self.models_panel,
                 self.transcript_view)  # fmt: skip
        for page in pages:
            if page.layout() is not None:  # the same breathing room on every page
                page.layout().setContentsMargins(18, 14, 18, 14)
            self.stack.addWidget(page)
        self.nav = QListWidget()
        self.nav.setObjectName("nav")
        for name in PAGES:
            QListWidgetItem(name, self.nav).setSizeHint(QSize(0, 38))
        self.nav.item(PAGES.index("Transcript")).setHidden(True)  # shown once one is open
        self.nav.currentRowChanged.connect(self.stack.setCurrentIndex)
        self.nav.setFixedWidth(170)
        settings_btn = QPushButton("Settings…")
        settings_btn.setToolTip("Default model, device, language, output folder (Ctrl+,)")
        settings_btn.clicked.connect(self.open_settings)
        side = QWidget()
        side.setObjectName("sidebar")
        sl = QVBoxLayout(side)
        sl.setContentsMargins(8, 10, 8, 10)
        sl.addWidget(self.nav, 1)
        sl.addWidget(settings_btn)
        central = QWidget()
        cl = QHBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(0)
        cl.addWidget(side)
        cl.addWidget(self.stack, 1)
        self.setCentralWidget(central)
        self.statusBar().showMessage(f"DeskScribe {__version__}", 4000)

        ctx.status_message.connect(lambda m: self.statusBar().showMessage(m, 8000))
        ctx.open_transcript.connect(self.show_transcript)
        self.library_panel.open_at.connect(self.open_at)
        self.live_panel.wants_models.connect(lambda: self.go("Models"))
        self.live_panel.state_changed.connect(self._live_state)
        self._preload = QTimer(self, singleShot=True, interval=500)
        self._preload.timeout.connect(self._preload_model)
        ctx.models_changed.connect(self._preload.start)  # a new default: load it before use
        self.watch = WatchRunner(self._watched_file, ctx.data_dir / "watch-state.json")
        ctx.settings_changed.connect(self._setting_changed)
        self._watch_folders()
        self._actions()
        self.nav.setCurrentRow(0)
        self._restore_state()

    # ------------------------------------------------------------------ navigation

    def go(self, page: str) -> None:
        self.nav.setCurrentRow(PAGES.index(page))

    def show_transcript(self, item_id: int) -> None:
        self.transcript_view.open_item(item_id)
        self.nav.item(PAGES.index("Transcript")).setHidden(False)
        self.go("Transcript")

    def open_at(self, item_id: int, seconds: float) -> None:
        """Show recording ``item_id`` at the line at ``seconds`` (a line an answer cites)."""
        view = self.transcript_view
        if view.item_id == item_id:  # open already: no reload (edits may be unsaved)
            self.nav.item(PAGES.index("Transcript")).setHidden(False)
            self.go("Transcript")
            view.go_to(seconds)
            return

        def there(loaded: int) -> None:
            view.loaded.disconnect(there)
            if loaded == item_id:
                view.go_to(seconds)

        view.loaded.connect(there)
        self.show_transcript(item_id)

    def _watched_file(self, path: Path, folder) -> None:
        """A watched folder's new file (the watcher's thread): into the queue, its options."""
        self.files_panel.file_queue.add([path], folder.options())

    def _setting_changed(self, key: str) -> None:
        if key == "watch_folders":
            self._watch_folders()

    def _watch_folders(self) -> None:
        from ..service.watch import folders_from_settings

        self.watch.set_folders(folders_from_settings(self.ctx.get("watch_folders")))

    def bring_to_front(self) -> None:
        self.showNormal() if self.isMinimized() else self.show()
        self.raise_()
        self.activateWindow()

    def _preload_model(self) -> None:
        if not self.live_panel.busy:
            self.ctx.preload()

    def _live_state(self, state: str) -> None:
        mark = {"recording": "  ● REC", "paused": "  ❚❚", "loading": "  …", "stopping": "  …"}
        self.nav.item(0).setText("Live" + mark.get(state, ""))

    def _actions(self) -> None:
        def action(text: str, keys: str | QKeySequence, slot) -> QAction:
            a = QAction(text, self)
            a.setShortcut(QKeySequence(keys))
            a.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
            a.triggered.connect(slot)
            self.addAction(a)
            return a

        action("Start / stop live", "Ctrl+R", self._toggle_live)
        action("Pause live", "Ctrl+P", self.live_panel.toggle_pause)
        action("Export", "Ctrl+E", self.export_current)
        action("Add files", "Ctrl+O", self.add_files)
        action("Settings", "Ctrl+,", self.open_settings)
        for i, name in enumerate(PAGES[:4]):
            action(f"Go to {name}", f"Ctrl+{i + 1}", lambda _=False, n=name: self.go(n))

    def _toggle_live(self) -> None:
        self.go("Live")
        self.live_panel.toggle()

    def add_files(self) -> None:
        self.go("Files")
        self.files_panel.choose_files()

    def export_current(self) -> None:
        """Ctrl+E: export the transcript on screen (a finished live session opens first)."""
        view = self.transcript_view
        if self.stack.currentWidget() is self.live_panel and self.live_panel.item_id is not None:
            view.loaded.connect(
                lambda _id: view.export_dialog(), Qt.ConnectionType.SingleShotConnection
            )
            self.ctx.open_transcript.emit(self.live_panel.item_id)
        elif self.stack.currentWidget() is view and view.item_id is not None:
            view.export_dialog()
        else:
            self.ctx.status_message.emit("Open a transcript (Library) to export it")

    def open_settings(self) -> None:
        from .settings_dialog import SettingsDialog

        dialog = SettingsDialog(self.ctx, self)
        dialog.open()

    # ------------------------------------------------------------------ drops

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = [Path(u.toLocalFile()) for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.open_paths(paths)

    def open_paths(self, paths: list[Path]) -> None:
        """Files dropped on the window or opened with the app ("Open with"): queue them."""
        self.go("Files")
        self.files_panel.add_paths(paths)

    # ------------------------------------------------------------------ state

    def _restore_state(self) -> None:
        s = window_settings()
        geometry = s.value("geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(*DEFAULT_SIZE)
        state = s.value("state")
        if isinstance(state, QByteArray):
            self.restoreState(state)
        page = s.value("page", "Live")
        if page in PAGES[:4]:
            self.go(page)

    def save_state(self) -> None:
        s = window_settings()
        s.setValue("geometry", self.saveGeometry())
        s.setValue("state", self.saveState())
        page = PAGES[max(0, self.stack.currentIndex())]
        s.setValue("page", page if page != "Transcript" else "Library")
        s.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.live_panel.busy and not self._quitting:
            answer = QMessageBox.question(
                self,
                "Recording in progress",
                "A live session is still recording. Stop it, save it and quit?\n\n"
                "(Everything recorded so far is already on disk.)",
                QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
            )
            if answer != QMessageBox.StandardButton.Yes:
                event.ignore()
                return
            self._quitting = True
            event.ignore()
            if self.live_panel.state == "loading":
                self.live_panel.cancel_start()
                QTimer.singleShot(0, self.close)
            else:  # close once the last words are committed and the session is in the library
                self.live_panel.session_closed.connect(self.close)
                self.live_panel.stop()
            return
        self.transcript_view.flush()
        self.save_state()
        self.watch.stop()
        self.files_panel.cancel_all()
        cancel_all(timeout=3.0)
        event.accept()

    # ------------------------------------------------------------------ start-up

    def start_up(self, open_files: list[Path] | None = None) -> None:
        """Look for interrupted work (worker thread), then offer recovery and the first run.
        ``open_files`` (given on the command line) are queued once that look is done, so
        they are never mistaken for a crash's unfinished jobs."""
        from ..service.recovery import look_for_interrupted

        self._opening = list(open_files or [])
        run_in_worker(
            look_for_interrupted,
            self.ctx.library,
            on_done=self._found_interrupted,
            on_error=lambda e: self._found_interrupted(None),
        )

    def _found_interrupted(self, found) -> None:
        from .recovery import RecoveryDialog

        if self._opening:
            self.open_paths(self._opening)
            self._opening = []
        if found is None or (not found.sessions and not found.jobs):
            self._after_recovery()
            return
        dialog = RecoveryDialog(self.ctx, found, self)
        dialog.restored.connect(self._restored)
        dialog.finished.connect(lambda _r: self._after_recovery())
        self.recovery_dialog = dialog
        dialog.open()

    def _restored(self, item_ids: list, jobs: list) -> None:
        if jobs:
            self.files_panel.resume_jobs(jobs)
        if item_ids:
            self.ctx.library_changed.emit()
            self.ctx.open_transcript.emit(item_ids[0])
        elif jobs:
            self.go("Files")

    def _after_recovery(self) -> None:
        from ..models.store import list_models

        run_in_worker(
            list_models, on_done=self._models_listed, on_error=lambda e: self.start_up_done.emit()
        )

    def _models_listed(self, models: list) -> None:
        if models:
            self.ctx.preload()
        else:
            from .first_run import FirstRunDialog

            self.first_run = FirstRunDialog(self.ctx, self)
            self.first_run.open()
        self.start_up_done.emit()


class FileOpenHandler(QObject):
    """Files the system asks the app to open (macOS Finder's "Open With" sends a FileOpen
    event to the running app instead of arguments): into the file queue."""

    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window

    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.FileOpen:
            path = event.file()  # type: ignore[attr-defined]
            if path:
                self.window.open_paths([Path(path)])
                return True
        return False


def create_application(argv: list[str] | None = None) -> QApplication:
    """The app's QApplication (or the one already running): names, icon and theme set."""
    app = QApplication.instance() or QApplication([sys.argv[0], *(argv or [])])
    app.setApplicationName("DeskScribe")
    app.setOrganizationName("DeskScribe")
    app.setApplicationVersion(__version__)
    app.setWindowIcon(icon())
    apply_theme(app)
    return app


def open_main_window(app: QApplication, open_files: list[str] | None = None) -> MainWindow:
    """The main window, shown, with its start-up (recovery, first run) and ``open_files``
    queued for when the event loop runs; later ``deskscribe FILE…`` starts hand their files
    to it (`single`)."""
    from .single import InstanceServer

    window = MainWindow(AppContext())
    window.show()
    window.instance_server = InstanceServer(window)
    opening = [Path(p) for p in open_files or []]

    def opened(paths: list[str]) -> None:
        window.bring_to_front()
        if paths:
            window.open_paths([Path(p) for p in paths])

    window.instance_server.opened.connect(opened)
    QTimer.singleShot(0, lambda: window.start_up(opening))
    window.file_opener = FileOpenHandler(window)  # macOS hands opened files over as events
    app.installEventFilter(window.file_opener)
    return window


def main(argv: list[str] | None = None, open_files: list[str] | None = None) -> int:
    """The desktop app; ``open_files`` (the file manager's "Open with") go to the file queue,
    of the window already open if there is one (this start then ends at once)."""
    app = create_application(argv)
    from .single import hand_over

    if hand_over(open_files or []):
        return 0
    window = open_main_window(app, open_files)
    code = app.exec()
    with contextlib.suppress(Exception):
        window.ctx.library.close()
    return code
