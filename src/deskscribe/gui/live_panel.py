"""The live window: pick a source, watch levels, start / pause / stop, read and correct the text.

All the work happens in `deskscribe.service.live.LiveSession` (capture, recording, transcription on its
own threads); this panel only turns its events (delivered on the UI thread through a queued
signal) into widgets. The model loads on a worker thread; device lists are read on one too.
"""

from __future__ import annotations

import functools
from datetime import datetime

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..audio.devices import InputDevice
from ..service.live import (
    Adapted,
    HealthReport,
    Levels,
    LiveOptions,
    LiveSession,
    Problem,
    Relabelled,
    Started,
    Stopped,
    TextUpdate,
)
from ..transcript import Transcript
from .context import AppContext
from .live_health import WARN_STYLE, HealthDetails
from .live_transcript import LiveTranscriptModel, LiveTranscriptView
from .source_picker import SourcePicker
from .widgets import Banner, clock, heading, muted
from .workers import WorkerHandle, run_in_worker

BEHIND_WARN_S = 4.0


class _Bridge(QObject):
    """Carries session events from its worker threads to the UI thread (queued)."""

    event = Signal(object, object)  # session, event


class LivePanel(QWidget):
    state_changed = Signal(str)  # idle, loading, recording, paused, stopping, stopped
    saved = Signal(int)  # library id of a finished session
    wants_models = Signal()  # the user asked to get a model
    devices_ready = Signal()  # the device lists have been read
    session_closed = Signal()  # a stopped session is saved in the library (or could not be)

    def __init__(self, ctx: AppContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.session: LiveSession | None = None
        self.state = "idle"
        self.item_id: int | None = None
        self.final: Transcript | None = None
        self._loading: WorkerHandle | None = None
        self._speaker_problem: str | None = None  # why live labels are off, when they are
        self._dirty_after_stop = False
        self._bridge = _Bridge(self)
        self._bridge.event.connect(self._on_event)
        self._build()
        self.model.edited.connect(self._edited)
        self._set_state("idle")
        self.picker.refresh_devices()

    # ------------------------------------------------------------------ layout

    def _build(self) -> None:
        root = QVBoxLayout(self)
        root.setContentsMargins(18, 14, 18, 14)
        root.setSpacing(10)
        top = QHBoxLayout()
        top.addWidget(heading("Live transcription"))
        top.addStretch(1)
        self.elapsed = QLabel("0:00")
        font = self.elapsed.font()
        font.setPointSizeF(font.pointSizeF() * 1.6)
        self.elapsed.setFont(font)
        self.elapsed.setToolTip("Time recorded (pauses not counted)")
        top.addWidget(self.elapsed)
        root.addLayout(top)

        self.picker = SourcePicker(self.ctx)
        self.picker.devices_ready.connect(self.devices_ready)
        self.picker.device_changed.connect(self._device_picked)
        self.picker.problem.connect(self._device_problem)
        self.picker.failed.connect(lambda m: self.banner.show_message(m, "error"))
        root.addWidget(self.picker)

        controls = QHBoxLayout()
        self.start_btn = QPushButton("Start")
        self.start_btn.setDefault(True)
        self.start_btn.setMinimumWidth(110)
        self.start_btn.setToolTip("Start or stop recording (Ctrl+R)")
        self.start_btn.clicked.connect(self.toggle)
        self.pause_btn = QPushButton("Pause")
        self.pause_btn.setToolTip("Pause or resume (Ctrl+P); nothing is recorded while paused")
        self.pause_btn.clicked.connect(self.toggle_pause)
        self.open_btn = QPushButton("Open transcript")
        self.open_btn.setToolTip("Edit, rename speakers and export in the transcript view")
        self.open_btn.clicked.connect(self._open_item)
        controls.addWidget(self.start_btn)
        controls.addWidget(self.pause_btn)
        controls.addWidget(self.open_btn)
        controls.addStretch(1)
        self.engine = muted("", wrap=False)
        controls.addWidget(self.engine)
        self.health = HealthDetails()
        controls.addWidget(self.health.button)
        root.addLayout(controls)
        root.addWidget(self.health)

        self.banner = Banner()
        root.addWidget(self.banner)
        self.model = LiveTranscriptModel(self)
        self.view = LiveTranscriptView(self.model)
        self.placeholder = muted(
            "Press Start and speak. Words appear grey and slanted while the engine is still "
            "deciding, then turn into regular text; double-click a finished line to correct it."
        )
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        root.addWidget(self.placeholder)
        root.addWidget(self.view, 1)

    # ------------------------------------------------------------------ devices

    @property
    def devices_known(self) -> bool:
        return self.picker.devices_known

    def refresh_devices(self) -> None:
        self.picker.refresh_devices()

    def set_source(self, key: str) -> None:
        self.picker.set_source(key)

    def select_device(self, kind: str, text: str) -> bool:
        return self.picker.select_device(kind, text)

    def _device_problem(self, message: str) -> None:
        if self.state not in ("idle", "stopped"):
            return
        if self.banner.isVisibleTo(self) and self.banner.kind == "error":
            return  # a more important message stays until dismissed
        if message:
            self.banner.show_message(message, "warning")
        elif self.banner.kind == "warning":
            self.banner.hide()

    def _device_picked(self, track: str, device: InputDevice) -> None:
        session = self.session
        if session is None or self.state not in ("recording", "paused"):
            return
        if track not in session.tracks:
            return
        run_in_worker(
            session.switch_device,
            track,
            device,
            on_done=lambda _r: self.ctx.status_message.emit(f"Now recording from {device.name}"),
            on_error=lambda e: self.banner.show_message(f"Could not switch: {e}", "error"),
        )

    # ------------------------------------------------------------------ control

    @property
    def busy(self) -> bool:
        return self.state in ("loading", "recording", "paused", "stopping")

    def toggle(self) -> None:
        if self.state in ("idle", "stopped"):
            self.start()
        elif self.state == "loading":
            self.cancel_start()
        elif self.state in ("recording", "paused"):
            self.stop()

    def toggle_pause(self) -> None:
        if self.session is None:
            return
        if self.state == "recording":
            self.session.pause()
            self._set_state("paused")
        elif self.state == "paused":
            self.session.resume()
            self._set_state("recording")

    def options(self) -> LiveOptions:
        from ..whisper.streaming import StreamingOptions

        p = self.picker
        return LiveOptions(
            source=p.source_key(),
            mic=p.device("mic"),
            system=p.device("system"),
            streaming=StreamingOptions(
                language=p.language.code(),
                languages=p.language.codes(),  # "Detect among several…"
                vocabulary=self.ctx.get("vocabulary") or None,
            ),
            participants=p.participants.value(),
        )

    def start(self) -> None:
        options = self.options()
        self.model.clear()
        self.model.editable = True
        self.item_id, self.final, self._dirty_after_stop = None, None, False
        self.banner.hide()
        self.health.clear()
        self.elapsed.setText("0:00")
        self._set_state("loading")
        self.engine.setText("Loading the model…")

        def load(cancel) -> LiveSession | None:
            from ..service.live.opening import open_live_session

            opened = open_live_session(self.ctx.models, options,
                                       device=self.ctx.get("device", "auto"))  # fmt: skip
            # A speaker model that is installed but broken does not stop the session: it
            # runs unlabelled, and the window says why (see _loaded).
            self._speaker_problem = opened.speaker_problem
            return None if cancel.is_set() else opened.session

        self._loading = run_in_worker(load, on_done=self._loaded, on_error=self._load_failed)
        self._remember_devices(options)

    def _remember_devices(self, options: LiveOptions) -> None:
        values = {"live_source": options.source}
        for kind in ("mic", "system"):
            device = getattr(options, kind)
            if device is not None and options.source in (kind, "both"):
                values[f"live_{kind}_device"] = device.name

        def save() -> None:
            for key, value in values.items():
                self.ctx.set(key, value)

        run_in_worker(save, on_error=lambda e: None)

    def cancel_start(self) -> None:
        if self._loading is not None:
            self._loading.cancel()
        self._loading = None
        self._set_state("idle")
        self.engine.setText("")

    def _loaded(self, session: LiveSession | None) -> None:
        if session is None or self.state != "loading":
            return  # cancelled while the model loaded
        self._loading = None
        self.session = session
        session.on_event = lambda event, s=session: self._bridge.event.emit(s, event)
        session.start()
        self.engine.setText(f"Starting {session.model.name}…")
        if self._speaker_problem:
            self.banner.show_message(
                f"Recording without speaker labels: {self._speaker_problem}",
                "warning",
                "Models…",
                self.wants_models.emit,
            )

    def _load_failed(self, exc: BaseException) -> None:
        from ..models.store import ModelNotInstalledError
        from ..whisper.decoding import DecodingError

        self._loading = None
        self._set_state("idle")
        self.engine.setText("")
        if isinstance(exc, ModelNotInstalledError):
            self.banner.show_message(
                "No transcription model is installed yet. Get one (a download, or the offline "
                "starter model) and press Start again.",
                "error",
                "Get a model…",
                self.wants_models.emit,
            )
        elif isinstance(exc, DecodingError):  # the languages chosen and the model disagree
            self.banner.show_message(f"Cannot start: {exc}.", "error")
        else:
            self.banner.show_message(f"The model could not be loaded: {exc}", "error")

    def stop(self) -> None:
        if self.session is not None and self.state in ("recording", "paused"):
            self.session.stop()
            self._set_state("stopping")
            self.engine.setText("Finishing the last words…")

    # ------------------------------------------------------------------ events

    def _on_event(self, session: LiveSession, event: object) -> None:
        if session is not self.session:
            return  # a late event of an earlier session
        if isinstance(event, Levels):
            self._levels(event)
        elif isinstance(event, TextUpdate):
            self.placeholder.hide()
            self.model.apply(event.segments, event.tentative, event.open_id)
        elif isinstance(event, Relabelled):
            self.model.revise(event.segments)
        elif isinstance(event, Started):
            self._set_state("recording")
            self._engine_label(event.model, event.device, 0.0)
            self._started, self._started_at = event, datetime.now()
        elif isinstance(event, HealthReport):
            self.health.show_health(event.health)
        elif isinstance(event, Adapted):
            self.health.add_switch(event)
            if event.down:
                self.banner.show_message(
                    f"The engine is {event.reason}, so it now does less live work "
                    f"({event.level}). Nothing is lost: the text catches up, and full live "
                    "work comes back once it has.",
                    "info",
                )
        elif isinstance(event, Problem):
            self.banner.show_message(event.message, "error" if event.fatal else "warning")
        elif isinstance(event, Stopped):
            self._stopped(event)

    def _engine_label(self, model: str, device: str, behind: float) -> None:
        lag = "keeping up" if behind < 1.0 else f"{behind:.0f} s behind"
        health = self.health.health
        if health is not None:
            model = health.model or model  # a faster model while behind
        mode = f" · {health.level}" if health is not None and health.level != "full" else ""
        self.engine.setText(f"{model} on {device} · {lag}{mode}")
        warnings = list(health.warnings) if health is not None else []
        warn = behind >= BEHIND_WARN_S or bool(warnings)
        self.engine.setStyleSheet(WARN_STYLE if warn else "")
        self.engine.setToolTip(
            "Over budget: " + "; ".join(warnings or [f"{behind:.0f} s behind"]) + ". Close busy "
            "programs, or choose a smaller model or the GPU in Settings." if warn else "Model "
            "and device in use, and how far the text lags behind the speech (Details: more)"
        )  # fmt: skip

    def _levels(self, event: Levels) -> None:
        self.elapsed.setText(clock(event.elapsed))
        self.picker.set_levels(event.levels)
        started = getattr(self, "_started", None)
        if started is not None and self.state in ("recording", "paused"):
            self._engine_label(started.model, started.device, event.behind)

    def _stopped(self, event: Stopped) -> None:
        self.final = event.transcript
        self.session = None
        self.picker.reset_levels()
        self._set_state("stopped")
        self.model.open_id, self.model.tentative = None, ""
        self.model.apply(event.transcript.segments, [], None)
        if event.reason:
            self.banner.show_message(
                f"Recording stopped: {event.reason} Everything recorded until then is saved.",
                "error",
            )
        if event.folder is None:
            self.engine.setText("")
            self.session_closed.emit()
            return
        self.engine.setText("Saving to the library…")
        library, transcript, folder = self.ctx.library, event.transcript, event.folder
        title = f"Live session {getattr(self, '_started_at', datetime.now()):%Y-%m-%d %H:%M}"

        from ..service.live.opening import archive_session

        save = functools.partial(archive_session, library, folder, transcript, title=title)
        run_in_worker(save, on_done=self._saved, on_error=self._save_failed, name="save-session")

    def _saved(self, item_id: int) -> None:
        self.item_id = item_id
        self.engine.setText("Saved in the library")
        self.open_btn.setEnabled(True)
        self.ctx.library_changed.emit()
        self.ctx.status_message.emit("Live session saved in the library")
        self.saved.emit(item_id)
        if self._dirty_after_stop:
            self._save_edits()
        self.session_closed.emit()

    def _save_failed(self, exc: BaseException) -> None:
        self.engine.setText("")
        self.banner.show_message(
            f"The session could not be added to the library ({exc}). Its audio and text are "
            "kept in the session folder; restart DeskScribe to be offered to restore it.",
            "error",
        )
        self.session_closed.emit()

    # ------------------------------------------------------------------ edits

    def _edited(self, segment_id: int, text: str) -> None:
        if self.session is not None and self.state in ("recording", "paused", "stopping"):
            try:
                self.session.edit_segment(segment_id, text)
            except ValueError as err:
                self.banner.show_message(str(err), "warning")
            return
        if self.final is not None:
            for seg in self.final.segments:
                if seg.id == segment_id:
                    seg.text = text
            if self.item_id is None:
                self._dirty_after_stop = True
            else:
                self._save_edits()

    def _save_edits(self) -> None:
        self._dirty_after_stop = False
        library, item_id, transcript = self.ctx.library, self.item_id, self.final
        run_in_worker(
            library.save_transcript,
            item_id,
            transcript,
            on_done=lambda _p: self.ctx.status_message.emit("Correction saved"),
            on_error=lambda e: self.banner.show_message(
                f"Could not save the correction: {e}", "error"
            ),
        )

    def _open_item(self) -> None:
        if self.item_id is not None:
            self.ctx.open_transcript.emit(self.item_id)

    # ------------------------------------------------------------------ state

    def _set_state(self, state: str) -> None:
        self.state = state
        labels = {
            "loading": "Cancel",
            "recording": "Stop",
            "paused": "Stop",
            "stopping": "Stopping…",
        }
        self.start_btn.setText(labels.get(state, "Start"))
        self.start_btn.setEnabled(state != "stopping")
        self.pause_btn.setEnabled(state in ("recording", "paused"))
        self.pause_btn.setText("Resume" if state == "paused" else "Pause")
        self.open_btn.setEnabled(state == "stopped" and self.item_id is not None)
        idle = state in ("idle", "stopped")
        self.picker.set_idle(idle)
        self.start_btn.setStyleSheet(
            ""
            if idle or state == "loading"
            else "QPushButton { color: #c01c28; font-weight: bold; }"
        )
        self.state_changed.emit(state)
