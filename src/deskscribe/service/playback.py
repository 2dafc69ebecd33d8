"""The player a transcript is checked with: one source (a file, or a live session's recording,
mixed or one of its tracks), play / pause / seek / skip, speed 0.5-2x with the pitch kept,
volume. No Qt: the transcript view observes it (``subscribe``: state changes; ``position()``
read while it plays) and asks it; the audio itself is ``audio.playback.Player``'s.

Nothing here blocks: loading and opening the device happen on the player's own thread; a
device that cannot play ends in ``FAILED`` with the message (``error``), which the view
shows once, to be dismissed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from enum import Enum
from pathlib import Path

from ..audio.playback import SPEEDS, Player

SKIP_SECONDS = 5.0


class PlaybackState(str, Enum):
    IDLE = "idle"  # nothing opened, or stopped
    PLAYING = "playing"  # (also while the audio loads)
    PAUSED = "paused"
    ENDED = "ended"
    FAILED = "failed"


class Playback:
    def __init__(self, player: Player | None = None) -> None:
        self.player = player or Player()
        self.player.on_error = self._failed
        self.player.on_finished = self._ended
        self.source: str | Path | None = None
        self.track: str | None = None  # a session's track, or None: its tracks mixed
        self.state = PlaybackState.IDLE
        self.error: str | None = None
        self._at = 0.0  # where a stopped or ended source plays from next
        self._observers: list[Callable[[PlaybackState], None]] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ observing

    def subscribe(self, fn: Callable[[PlaybackState], None]) -> None:
        """``fn(state)`` after every change of state (on the thread that made it)."""
        self._observers.append(fn)

    def _set(self, state: PlaybackState, error: str | None = None) -> None:
        with self._lock:
            self.state, self.error = state, error
        for fn in list(self._observers):
            fn(state)

    def position(self) -> float:
        """Seconds into the source now (where it stopped, when it is not playing)."""
        if self.state in (PlaybackState.PLAYING, PlaybackState.PAUSED):
            return self.player.position()
        return self._at

    @property
    def duration(self) -> float:
        return self.player.duration

    # ------------------------------------------------------------------ asking

    def open(self, source: str | Path | None, track: str | None = None) -> None:
        """Play ``source`` from now on (stopped, at its start)."""
        self.stop()
        self.source, self.track, self._at = source, track, 0.0

    def set_track(self, track: str | None) -> None:
        """Hear only ``track`` of a session (None: its tracks mixed), from where it is."""
        if track == self.track:
            return
        at, playing = self.position(), self.state is PlaybackState.PLAYING
        self.stop()
        self.track, self._at = track, at
        if playing:
            self.play(at)

    def play(self, at: float | None = None) -> None:
        """Play from ``at`` seconds (default: where it is); resumes a paused player."""
        if self.source is None:
            return
        if self.state is PlaybackState.PAUSED and at is None:
            self.player.resume()
            self._set(PlaybackState.PLAYING)
            return
        start = self._at if at is None else max(0.0, at)
        if self.state in (PlaybackState.PLAYING, PlaybackState.PAUSED) and at is not None:
            self.player.seek(start)
            self.player.resume()
            self._set(PlaybackState.PLAYING)
        else:
            # PLAYING first: a player that fails at once (no device) says so after it.
            self._set(PlaybackState.PLAYING)
            self.player.play(self.source, start, self.track)

    def pause(self) -> None:
        if self.state is PlaybackState.PLAYING:
            self.player.pause()
            self._set(PlaybackState.PAUSED)

    def toggle(self) -> None:
        """Space: pause while playing, else play (from where it was)."""
        if self.state is PlaybackState.PLAYING:
            self.pause()
        else:
            self.play()

    def seek(self, seconds: float) -> None:
        """Go to ``seconds``: playing or paused it goes on from there; else it starts there
        next time."""
        seconds = max(0.0, seconds)
        if self.state in (PlaybackState.PLAYING, PlaybackState.PAUSED):
            self.player.seek(seconds)
        else:
            self._at = seconds

    def skip(self, seconds: float = SKIP_SECONDS) -> None:
        """Forward (or back, with a negative ``seconds``) from where it is."""
        top = self.duration or float("inf")
        self.seek(min(top, max(0.0, self.position() + seconds)))

    def set_speed(self, speed: float) -> None:
        self.player.set_speed(min(SPEEDS[1], max(SPEEDS[0], speed)))

    @property
    def speed(self) -> float:
        return self.player.speed

    def set_volume(self, volume: float) -> None:
        self.player.volume = min(1.0, max(0.0, volume))

    def stop(self) -> None:
        if self.state in (PlaybackState.PLAYING, PlaybackState.PAUSED):
            self._at = self.player.position()
        self.player.stop()
        if self.state is not PlaybackState.IDLE:
            self._set(PlaybackState.IDLE)

    # ------------------------------------------------------------------ the player's calls

    def _failed(self, message: str) -> None:
        self._set(PlaybackState.FAILED, message)

    def _ended(self) -> None:
        self._at = 0.0
        self._set(PlaybackState.ENDED)
