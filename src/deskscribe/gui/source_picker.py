"""What the live window listens to: source (microphone / system audio / both), the device of
each, a level meter per source and the language. Device lists are read on a worker thread
(the sound server may take a moment to answer)."""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolButton,
    QWidget,
)

from ..audio.devices import InputDevice
from .context import AppContext
from .speakers_choice import ParticipantsEdit
from .widgets import LanguageCombo, LevelMeter
from .workers import run_in_worker

SOURCES = (("mic", "Microphone"), ("system", "System audio"), ("both", "Meeting (mic + system)"))


@dataclass
class DeviceLists:
    mic: list[InputDevice] = field(default_factory=list)
    system: list[InputDevice] = field(default_factory=list)
    default_mic: InputDevice | None = None
    default_system: InputDevice | None = None
    problems: dict[str, str] = field(default_factory=dict)  # kind -> what to do


def read_devices() -> DeviceLists:
    """Both device lists and their defaults (worker thread: asks the sound server)."""
    from ..audio.devices import CaptureDeviceError, default_device, list_devices

    found = DeviceLists()
    for kind in ("mic", "system"):
        try:
            setattr(found, kind, list_devices(kind))
            setattr(found, f"default_{kind}", default_device(kind))
        except CaptureDeviceError as err:
            found.problems[kind] = str(err)
    return found


def _combo(min_chars: int) -> QComboBox:
    combo = QComboBox()
    combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    combo.setMinimumContentsLength(min_chars)
    combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
    return combo


class SourcePicker(QWidget):
    devices_ready = Signal()  # the lists have been read (again)
    device_changed = Signal(str, object)  # track ("mic"/"system"), the InputDevice picked
    problem = Signal(str)  # no device of a needed kind: what to do ("" when resolved)
    failed = Signal(str)  # the lists could not be read at all

    def __init__(self, ctx: AppContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ctx = ctx
        self.devices = DeviceLists()
        self.devices_known = False
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self.source = _combo(14)
        for key, label in SOURCES:
            self.source.addItem(label, key)
        self.source.setToolTip(
            "Microphone: you. System audio: what this computer plays (a call, a video). "
            "Meeting: both, kept as separate tracks; words are labelled You / Others."
        )
        self.language = LanguageCombo()
        self.language.restore(ctx)
        self.refresh = QToolButton()
        self.refresh.setText("↻")
        self.refresh.setToolTip("Look for devices again (plugged in or removed)")
        self.refresh.clicked.connect(self.refresh_devices)
        top = QHBoxLayout()
        top.addWidget(self.source, 3)
        top.addWidget(self.refresh)
        top.addSpacing(12)
        top.addWidget(QLabel("Language"))
        top.addWidget(self.language, 2)
        top.addSpacing(12)
        top.addWidget(QLabel("People"))
        self.participants = ParticipantsEdit()
        top.addWidget(self.participants)
        form.addRow("Listen to", top)
        self.mic_combo, self.mic_meter = _combo(16), LevelMeter("Microphone")
        self.sys_combo, self.sys_meter = _combo(16), LevelMeter("System audio")
        self._rows: dict[str, QHBoxLayout] = {}
        for kind, label, combo, meter in (
            ("mic", "Microphone", self.mic_combo, self.mic_meter),
            ("system", "System audio", self.sys_combo, self.sys_meter),
        ):
            combo.currentIndexChanged.connect(lambda _i, k=kind, c=combo: self._picked(k, c))
            row = QHBoxLayout()
            row.addWidget(combo, 3)
            row.addWidget(meter, 2)
            form.addRow(label, row)
            self._rows[kind] = row
        self.form = form
        self.source.currentIndexChanged.connect(self._source_changed)
        self.set_source(ctx.get("live_source") or "mic")

    # ------------------------------------------------------------------ choices

    def source_key(self) -> str:
        return self.source.currentData()

    def device(self, kind: str) -> InputDevice | None:
        return (self.mic_combo if kind == "mic" else self.sys_combo).currentData()

    def set_source(self, key: str) -> None:
        self.source.setCurrentIndex(max(0, self.source.findData(key)))
        self._source_changed()

    def select_device(self, kind: str, text: str) -> bool:
        """Pick the first device of ``kind`` whose name or sound-server source contains ``text``."""
        combo = self.mic_combo if kind == "mic" else self.sys_combo
        for i in range(combo.count()):
            d: InputDevice | None = combo.itemData(i)
            if d and (text.lower() in d.name.lower() or text in (d.pulse_source or "")):
                combo.setCurrentIndex(i)
                return True
        return False

    def set_idle(self, idle: bool) -> None:
        """While recording, the source and language are fixed; devices can still be switched."""
        self.source.setEnabled(idle)
        self.language.setEnabled(idle)
        self.participants.setEnabled(idle)

    def set_levels(self, levels: dict[str, float]) -> None:
        for track, meter in (("mic", self.mic_meter), ("system", self.sys_meter)):
            if track in levels:
                meter.set_level(levels[track])

    def reset_levels(self) -> None:
        self.mic_meter.reset()
        self.sys_meter.reset()

    # ------------------------------------------------------------------ device lists

    def refresh_devices(self) -> None:
        self.refresh.setEnabled(False)
        run_in_worker(read_devices, on_done=self._read, on_error=self._read_failed)

    def _read_failed(self, exc: BaseException) -> None:
        self.refresh.setEnabled(True)
        self.failed.emit(f"Could not list audio devices: {exc}")

    def _read(self, found: DeviceLists) -> None:
        self.refresh.setEnabled(True)
        self.devices = found
        for kind, combo, default in (
            ("mic", self.mic_combo, found.default_mic),
            ("system", self.sys_combo, found.default_system),
        ):
            keep: InputDevice | None = combo.currentData()
            wanted = self.ctx.get(f"live_{kind}_device")
            combo.blockSignals(True)
            combo.clear()
            for d in getattr(found, kind):
                combo.addItem(d.name + ("  (default)" if d == default else ""), d)
            if not combo.count():
                combo.addItem("None found", None)
            names = [d.name if d else "" for d in map(combo.itemData, range(combo.count()))]
            pick = keep.name if keep else wanted or (default.name if default else None)
            combo.setCurrentIndex(names.index(pick) if pick in names else 0)
            combo.blockSignals(False)
            combo.setToolTip(found.problems.get(kind, ""))
        self._source_changed()
        self.devices_known = True
        self.devices_ready.emit()

    def _source_changed(self) -> None:
        key = self.source_key()
        for kind, row in self._rows.items():
            self.form.setRowVisible(row, key in (kind, "both"))
        problems = self.devices.problems
        missing = [problems[k] for k in ("mic", "system") if k in problems and key in (k, "both")]
        self.problem.emit(" ".join(missing))

    def _picked(self, kind: str, combo: QComboBox) -> None:
        if combo.currentData() is not None:
            self.device_changed.emit(kind, combo.currentData())
