"""Live audio that arrives from the test instead of a device: pushed blocks as capture tracks.

``PushedCapture`` is an ``audio.devices.LiveAudio`` (the reading side of ``capture.Capture``:
``start``, ``read``, ``levels``, ``overflows``, ``errors``, ``stop``), so a live session runs
on it unchanged: a recording replayed into a session by the tests, or by the long-session
bench (``bench/live_memory.py``), which feeds hours of real speech faster than real time.

Blocks are 16 kHz mono float32 per track. What is pushed waits until the session reads it;
past ``max_seconds`` waiting per track the oldest audio goes and counts as overflow (the same
figure a device's full ring reports), so a pusher faster than the session cannot grow it.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from deskscribe.audio.capture import level_db
from deskscribe.audio.devices import CaptureDeviceError, InputDevice
from deskscribe.audio_format import SAMPLE_RATE


class PushedCapture:
    def __init__(self, tracks: tuple[str, ...] | list[str], max_seconds: float = 60.0) -> None:
        self.tracks = tuple(tracks)
        self._max = int(max_seconds * SAMPLE_RATE)
        self._waiting: dict[str, collections.deque[np.ndarray]] = {
            t: collections.deque() for t in self.tracks
        }
        self._queued = dict.fromkeys(self.tracks, 0)
        self._overflows = dict.fromkeys(self.tracks, 0)
        self._levels = dict.fromkeys(self.tracks, -100.0)
        self._errors: dict[str, str] = {}
        self._lock = threading.Lock()
        self.pushed = dict.fromkeys(self.tracks, 0)  # samples per track taken in so far
        self.position = 0  # samples per track handed out by ``read``

    def push(self, blocks: dict[str, np.ndarray] | np.ndarray) -> None:
        """Add audio: {track: samples}, or samples for a session of one track."""
        if not isinstance(blocks, dict):
            if len(self.tracks) != 1:
                raise ValueError(f"push one block per track: {', '.join(self.tracks)}")
            blocks = {self.tracks[0]: blocks}
        with self._lock:
            for track, block in blocks.items():
                if track not in self._waiting:
                    raise ValueError(f"unknown track {track!r}; tracks: {', '.join(self.tracks)}")
                audio = np.asarray(block, dtype=np.float32).reshape(-1)
                self._waiting[track].append(audio)
                self._queued[track] += audio.shape[0]
                self.pushed[track] += audio.shape[0]
                while self._queued[track] > self._max:  # the session fell behind: oldest goes
                    dropped = self._waiting[track].popleft()
                    self._queued[track] -= dropped.shape[0]
                    self._overflows[track] += dropped.shape[0]

    def waiting_seconds(self) -> float:
        """Audio pushed but not read yet (the most of any track)."""
        with self._lock:
            return max(self._queued.values(), default=0) / SAMPLE_RATE

    def fail(self, track: str, message: str) -> None:
        """The sender went away or sent something unusable: shown as a device problem."""
        with self._lock:
            self._errors[track] = message

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def read(self) -> dict[str, np.ndarray]:
        """Every track up to the shortest one waiting (tracks stay aligned)."""
        with self._lock:
            n = min(self._queued.values(), default=0)
            out = {t: self._take(t, n) for t in self.tracks}
            self.position += n
        for track, audio in out.items():
            if audio.shape[0]:
                self._levels[track] = level_db(audio)
        return out

    def _take(self, track: str, n: int) -> np.ndarray:
        parts, need, waiting = [], n, self._waiting[track]
        while need > 0:
            block = waiting.popleft()
            if block.shape[0] > need:
                waiting.appendleft(block[need:])
                block = block[:need]
            parts.append(block)
            need -= block.shape[0]
        self._queued[track] -= n
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)

    def levels(self) -> dict[str, float]:
        return dict(self._levels)

    def overflows(self) -> dict[str, int]:
        with self._lock:
            return dict(self._overflows)

    def errors(self) -> dict[str, str]:
        with self._lock:
            return dict(self._errors)

    def switch_device(self, track: str, device: InputDevice) -> None:
        raise CaptureDeviceError("this session's audio is sent by a program, not a device")
