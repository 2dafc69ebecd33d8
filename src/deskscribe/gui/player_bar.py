"""The transcript view's player: play/pause, back and forward 5 s, a position slider with the
time heard and the length, speed (0.5-2x, the pitch kept) and volume. It shows and asks the
service's `Playback`; while playing it reads the position 30 times a second and says it
(``position``), for the view to mark the line and the word being heard."""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QPushButton, QSlider, QWidget

from ..service.playback import SKIP_SECONDS, Playback, PlaybackState
from .widgets import clock

SPEEDS = (0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)
TRACK_NAMES = {"mic": "Microphone", "system": "System audio"}
TICK_MS = 33


class _Relay(QObject):
    changed = Signal(object)  # PlaybackState, from the player's thread onto the UI thread


class PlayerBar(QWidget):
    position = Signal(float)  # seconds into the recording, while it plays or when it jumps
    failed = Signal(str)  # the player cannot play (no device): show it once
    state_changed = Signal(object)  # PlaybackState, on the UI thread

    def __init__(self, playback: Playback, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.playback = playback
        self._relay = _Relay()
        self._relay.changed.connect(self._state_changed)
        playback.subscribe(self._relay.changed.emit)
        self.play_button = QPushButton("Play")
        self.play_button.setToolTip("Play / pause (Space)")
        self.play_button.clicked.connect(self.toggle)
        self.back = QPushButton("−5 s")
        self.back.setToolTip("Back 5 seconds (Ctrl+Left)")
        self.back.clicked.connect(lambda: self.skip(-SKIP_SECONDS))
        self.forward = QPushButton("+5 s")
        self.forward.setToolTip("Forward 5 seconds (Ctrl+Right)")
        self.forward.clicked.connect(lambda: self.skip(SKIP_SECONDS))
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setRange(0, 0)
        self.slider.setToolTip("Where in the recording: drag or click to go there")
        self.slider.sliderMoved.connect(lambda v: self.time.setText(self._time(v / 1000)))
        self.slider.sliderReleased.connect(lambda: self.seek(self.slider.value() / 1000))
        self.slider.actionTriggered.connect(self._slider_action)
        self.time = QLabel(self._time(0.0))
        self.speed = QComboBox()
        for s in SPEEDS:
            self.speed.addItem(f"{s:g}×", s)
        self.speed.setCurrentIndex(SPEEDS.index(1.0))
        self.speed.setToolTip("Speed (the voice keeps its pitch)")
        self.speed.currentIndexChanged.connect(
            lambda _i: playback.set_speed(self.speed.currentData())
        )
        self.volume = QSlider(Qt.Orientation.Horizontal)
        self.volume.setRange(0, 100)
        self.volume.setValue(100)
        self.volume.setFixedWidth(80)
        self.volume.setToolTip("Volume")
        self.volume.valueChanged.connect(lambda v: playback.set_volume(v / 100))
        self.track = QComboBox()
        self.track.setToolTip("Which part of the recording to hear")
        self.track.currentIndexChanged.connect(
            lambda _i: playback.set_track(self.track.currentData()))  # fmt: skip
        self.track.hide()
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        for w in (self.play_button, self.back, self.forward):
            lay.addWidget(w)
        lay.addWidget(self.slider, 1)
        lay.addWidget(self.time)
        lay.addWidget(self.track)
        lay.addWidget(self.speed)
        lay.addWidget(QLabel("Vol"))
        lay.addWidget(self.volume)
        self._tick = QTimer(self)
        self._tick.setInterval(TICK_MS)
        self._tick.timeout.connect(self._follow)

    # --- asking the player ----------------------------------------------------------------

    def toggle(self) -> None:
        self.playback.toggle()

    def play_at(self, seconds: float) -> None:
        """Play from ``seconds`` (a line or a word clicked)."""
        self.playback.play(seconds)
        self._show_position(seconds)

    def seek(self, seconds: float) -> None:
        self.playback.seek(seconds)
        self._show_position(seconds)

    def skip(self, seconds: float) -> None:
        self.playback.skip(seconds)
        self._show_position(self.playback.position())

    def set_length(self, seconds: float) -> None:
        """The recording's length, known before the audio loads (from the transcript)."""
        self.slider.setRange(0, max(0, int(seconds * 1000)))
        self._show_position(self.playback.position())

    def set_tracks(self, tracks: list[str]) -> None:
        """A meeting's tracks: hear them mixed or one alone (hidden for one track)."""
        self.track.blockSignals(True)
        self.track.clear()
        self.track.addItem("All tracks", None)
        for t in tracks:
            self.track.addItem(TRACK_NAMES.get(t, t), t)
        self.track.blockSignals(False)
        self.track.setVisible(len(tracks) > 1)

    def _slider_action(self, action: int) -> None:
        if action in (
            QSlider.SliderAction.SliderPageStepAdd,
            QSlider.SliderAction.SliderPageStepSub,
        ):
            QTimer.singleShot(0, lambda: self.seek(self.slider.sliderPosition() / 1000))

    # --- following it ------------------------------------------------------------------------

    def _state_changed(self, state: PlaybackState) -> None:
        playing = state is PlaybackState.PLAYING
        self.play_button.setText("Pause" if playing else "Play")
        if playing:
            self._tick.start()
        else:
            self._tick.stop()
            self._follow()
        self.state_changed.emit(state)
        if state is PlaybackState.FAILED and self.playback.error:
            self.failed.emit(self.playback.error)

    def _follow(self) -> None:
        seconds = self.playback.position()
        if self.playback.duration and self.slider.maximum() < self.playback.duration * 1000:
            self.slider.setRange(0, int(self.playback.duration * 1000))
        self._show_position(seconds)

    def _show_position(self, seconds: float) -> None:
        if not self.slider.isSliderDown():
            self.slider.setValue(int(seconds * 1000))
            self.time.setText(self._time(seconds))
        self.position.emit(seconds)

    def _time(self, seconds: float) -> str:
        return f"{clock(seconds)} / {clock(self.slider.maximum() / 1000)}"
