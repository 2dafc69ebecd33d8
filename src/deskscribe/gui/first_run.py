"""The welcome shown while no model is installed: what this computer can run, the model we
recommend and why (one sentence), and one button that downloads it — or the offline starter."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..errors import Cancelled
from ..models.catalog import CATALOG
from .context import AppContext
from .model_jobs import InstallJob, starter_available
from .widgets import Banner, heading, muted
from .workers import run_in_worker

log = logging.getLogger(__name__)


def describe_hardware(hw) -> str:
    from ..whisper.runtime import COREML, CUDA, DML

    if hw.gpu_name:
        memory = f" ({hw.gpu_memory_gb:.0f} GB)" if hw.gpu_memory_gb else ""
        gpu = f"{hw.gpu_name}{memory}"
    elif CUDA in hw.providers:
        gpu = "an NVIDIA GPU"
    elif DML in hw.providers:
        gpu = "a DirectX 12 graphics card"
    elif COREML in hw.providers:
        gpu = "Apple Neural Engine / GPU"
    else:
        gpu = "no GPU DeskScribe can use"
    return f"This computer: {hw.cpu_count} CPU cores, {gpu}."


def detect_and_recommend():
    from ..models.hardware import detect, recommend

    hw = detect()
    return hw, recommend(hw)


def measured_recommendation(progress=None, cancel=None):
    """The recommendation measured on this CPU (``models/measure.py``); None when timing
    failed (the guess by core count then stays)."""
    from ..models.hardware import Recommendation
    from ..models.measure import measure_and_choose

    try:
        choice = measure_and_choose(0, progress=progress, cancel=cancel)
    except Cancelled:
        raise
    except Exception:  # the app must still start
        log.warning("timing the models on this CPU failed", exc_info=True)
        return None
    return Recommendation(choice.model, "int8", "cpu", choice.reason)


class FirstRunDialog(QDialog):
    def __init__(self, ctx: AppContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.job: InstallJob | None = None
        self.installed: Path | None = None
        self.setWindowTitle("Welcome to DeskScribe")
        self.setMinimumWidth(640)
        lay = QVBoxLayout(self)
        lay.setSpacing(10)
        lay.setContentsMargins(22, 18, 22, 18)
        lay.addWidget(heading("Welcome to DeskScribe", 1.6))
        intro = QLabel(
            "DeskScribe turns speech into text on this computer: live from your microphone or "
            "a call, or from audio and video files. Nothing is sent anywhere.\n\n"
            "First it needs a speech-recognition model. It is downloaded once and then works "
            "offline."
        )
        intro.setWordWrap(True)
        lay.addWidget(intro)

        box = QFrame()
        box.setFrameShape(QFrame.Shape.StyledPanel)
        bl = QVBoxLayout(box)
        self.hardware = muted("Looking at this computer…")
        self.recommendation = QLabel()
        self.recommendation.setWordWrap(True)
        self.reason = QLabel()
        self.reason.setWordWrap(True)
        self.model_combo = QComboBox()
        self.model_combo.setToolTip("The recommended model is selected; pick another if you like")
        row = QHBoxLayout()
        row.addWidget(QLabel("Model"))
        row.addWidget(self.model_combo, 1)
        self.measure_note = muted("")
        self.measure_note.hide()
        for w in (self.hardware, self.recommendation, self.reason, self.measure_note):
            bl.addWidget(w)
        bl.addLayout(row)
        lay.addWidget(box)

        self.status = QLabel()
        self.status.setWordWrap(True)
        self.bar = QProgressBar()
        self.bar.setTextVisible(False)
        self.bar.hide()
        self.banner = Banner()
        lay.addWidget(self.status)
        lay.addWidget(self.bar)
        lay.addWidget(self.banner)

        buttons = QHBoxLayout()
        self.skip_btn = QPushButton("Skip for now")
        self.skip_btn.setToolTip("You can get a model later on the Models page")
        self.skip_btn.clicked.connect(self.reject)
        self.starter_btn = QPushButton("Use the offline starter model")
        ok, why = starter_available()
        self.starter_btn.setEnabled(ok)
        self.starter_btn.setToolTip(
            f"Installs {why} from files already on this computer (no internet)." if ok else why
        )
        self.starter_btn.clicked.connect(self.install_starter)
        self.download_btn = QPushButton("Download and install")
        self.download_btn.setDefault(True)
        self.download_btn.setEnabled(False)
        self.download_btn.clicked.connect(self.download)
        self.cancel_btn = QPushButton("Cancel")
        self.cancel_btn.clicked.connect(self.cancel)
        self.cancel_btn.hide()
        self.done_btn = QPushButton("Start using DeskScribe")
        self.done_btn.clicked.connect(self.accept)
        self.done_btn.hide()
        buttons.addWidget(self.skip_btn)
        buttons.addStretch(1)
        for b in (self.starter_btn, self.cancel_btn, self.download_btn, self.done_btn):
            buttons.addWidget(b)
        lay.addLayout(buttons)
        self.measuring = None
        self.recommended: str | None = None
        run_in_worker(detect_and_recommend, on_done=self._recommended, on_error=self._no_hw)

    # ------------------------------------------------------------------ recommendation

    def _fill_models(self, recommended: str | None, variant: str) -> None:
        self.variant = variant
        self.model_combo.clear()
        entries = sorted(CATALOG, key=lambda e: e.id != recommended)
        for e in entries:
            mark = "  — recommended" if e.id == recommended else ""
            self.model_combo.addItem(f"{e.id} ({e.size_mb:,} MB download){mark}", e.id)
        self.download_btn.setEnabled(True)

    def _measuring(self, done: float, total: float, name: str = "") -> None:
        if name:
            self.measure_note.setText(
                f"Timing the models on this computer's CPU: Whisper {name} "
                f"({done:.0f} of {total:.0f} done)…"
            )

    def _recommended(self, result) -> None:
        """The guess from the hardware at once (Download works right away); on a CPU the
        models are then timed here, and the measured recommendation replaces the guess
        unless the user chose another model or started a download meanwhile."""
        hw, rec = result
        self.hardware.setText(describe_hardware(hw))
        self._show_recommendation(rec)
        if rec.device == "cpu":
            self.measure_note.setText("Timing the models on this computer's CPU…")
            self.measure_note.show()
            self.measuring = run_in_worker(
                measured_recommendation,
                on_done=self._measured,
                on_error=lambda exc: self.measure_note.hide(),
                on_progress=self._measuring,
            )

    def _measured(self, rec) -> None:
        self.measure_note.hide()
        chosen = self.model_combo.currentData()
        if rec is None or self.job is not None or chosen != self.recommended:
            return
        self._show_recommendation(rec)

    def _show_recommendation(self, rec) -> None:
        self.recommended = rec.model
        entry = next((e for e in CATALOG if e.id == rec.model), None)
        size = f" ({entry.size_mb:,} MB download)" if entry else ""
        self.recommendation.setText(f"<b>Recommended: Whisper {rec.model}</b>{size}")
        self.reason.setText(rec.reason)
        self._fill_models(rec.model, rec.variant)
        self.adjustSize()

    def _no_hw(self, exc: BaseException) -> None:
        self.hardware.setText(f"Could not look at the hardware ({exc}); assuming a CPU.")
        self.recommended = "base"
        self.recommendation.setText("<b>Recommended: Whisper base</b>")
        self.reason.setText("Whisper base is accurate and quick on any recent computer.")
        self._fill_models("base", "int8")
        self.adjustSize()

    def select_model(self, model_id: str) -> None:
        self.model_combo.setCurrentIndex(max(0, self.model_combo.findData(model_id)))

    # ------------------------------------------------------------------ installing

    def download(self) -> None:
        model_id = self.model_combo.currentData()
        self._start(InstallJob(self.ctx, model_id, self.variant, label=f"Whisper {model_id}"))

    def install_starter(self) -> None:
        self._start(InstallJob(self.ctx, None, "int8", kind="starter", label="the starter model"))

    def _start(self, job: InstallJob) -> None:
        self.job = job
        job.setParent(self)
        job.progress.connect(self._progress)
        job.finished.connect(self._finished)
        job.failed.connect(self._failed)
        job.cancelled.connect(self._cancelled)
        self.banner.hide()
        self.bar.show()
        self._busy(True)
        job.start()

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()
            self.cancel_btn.setEnabled(False)

    def _busy(self, busy: bool) -> None:
        for b in (self.download_btn, self.starter_btn, self.model_combo):
            b.setEnabled(not busy and (b is not self.starter_btn or starter_available()[0]))
        self.skip_btn.setEnabled(not busy)
        self.cancel_btn.setVisible(busy)
        self.cancel_btn.setEnabled(busy)

    def _progress(self, text: str, fraction: float) -> None:
        self.status.setText(text)
        if fraction < 0:
            self.bar.setRange(0, 0)
        else:
            self.bar.setRange(0, 1000)
            self.bar.setValue(int(fraction * 1000))

    def _finished(self, path: Path) -> None:
        self.installed = path
        self._busy(False)
        self.bar.setRange(0, 1)
        self.bar.setValue(1)
        self.status.setText(f"<b>Ready.</b> {path.name} is installed. Press Start on the Live page "
                            "or drop files on the window.")  # fmt: skip
        run_in_worker(self.ctx.set, "default_model", path.name, on_error=lambda e: None)
        for b in (self.download_btn, self.starter_btn, self.skip_btn):
            b.hide()
        self.done_btn.show()
        self.done_btn.setDefault(True)

    def _failed(self, message: str) -> None:
        self._busy(False)
        self.bar.hide()
        self.status.setText("")
        self.banner.show_message(message, "error", "Retry", self._retry)

    def _cancelled(self) -> None:
        self._busy(False)
        self.bar.hide()
        self.status.setText(
            "Cancelled. What was downloaded is kept; the next try goes on from there."
        )

    def _retry(self) -> None:
        if self.job is not None:
            self._start(self.job.again())

    def reject(self) -> None:
        if self.measuring is not None:
            self.measuring.cancel()
        if self.job is not None and self.job.running:
            self.cancel()
            return  # closes only once the job has stopped (nothing half-installed)
        super().reject()

    def keyPressEvent(self, event) -> None:
        if event.key() == Qt.Key.Key_Escape and self.job is not None and self.job.running:
            self.cancel()
            return
        super().keyPressEvent(event)
