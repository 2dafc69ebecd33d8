"""What a live session tells its caller: its state, and events delivered to one sink.

The caller chooses the sink: a callback (``on_event``, called on a session thread; the window
relays it to its UI thread) or, when it gives none, the session's ``EventQueue``, which is
bounded: past ``maxlen`` unread events the oldest level reading goes first (meters come ten a
second and only matter until the next), then the oldest event, so a caller that never reads
cannot make it grow.
"""

from __future__ import annotations

import collections
import queue
import threading
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ...transcript import Segment, Transcript, Word
from .health import Health


class LiveState(str, Enum):
    """Where a session is. Compares equal to its value ("recording"), as before."""

    IDLE = "idle"
    STARTING = "starting"
    RECORDING = "recording"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"

    def __str__(self) -> str:
        return self.value


@dataclass
class Started:
    folder: Path
    tracks: list[str]
    model: str
    device: str  # where inference runs, e.g. "CPU" or "CUDA"


@dataclass
class Levels:
    levels: dict[str, float]  # dBFS per track
    overflows: dict[str, int]
    elapsed: float  # seconds recorded (pauses excluded)
    behind: float  # seconds of speech waiting to be decoded


@dataclass
class TextUpdate:
    segments: list[Segment]  # committed segments, new or grown; replace by id
    tentative: list[Word]  # the newest guess after the committed text (may change)
    open_id: int | None  # the segment that may still grow


@dataclass
class Relabelled:
    """The speaker labels of committed segments were revised (``relabel``): replace those
    segments by id; their text did not change."""

    segments: list[Segment]


@dataclass
class Problem:
    message: str
    track: str | None = None
    fatal: bool = False  # the session stopped because of it


@dataclass
class HealthReport:
    """Once a second: the measured figures (``health.Health``)."""

    health: Health


@dataclass
class Adapted:
    """The session changed how much work it does to keep up (``degrade``), or went back."""

    level: str  # the new mode, e.g. "full", "fewer interim passes"
    reason: str  # why, for the user
    at: float  # seconds into the recording
    down: bool  # True: less work (it was behind); False: back towards full


@dataclass
class Stopped:
    transcript: Transcript
    folder: Path | None
    reason: str | None = None  # why it stopped, when it was not the user


Event = Started | Levels | TextUpdate | Relabelled | Problem | HealthReport | Adapted | Stopped


class EventQueue:
    """A bounded queue of events with ``queue.Queue``'s reading side (``get``, ``get_nowait``,
    ``queue.Empty``). ``dropped`` counts the events that went unread."""

    def __init__(self, maxlen: int = 10_000) -> None:
        self._items: collections.deque[Event] = collections.deque()
        self._maxlen = maxlen
        self._ready = threading.Condition()
        self.dropped = 0

    def put(self, event: Event) -> None:
        with self._ready:
            self._items.append(event)
            if len(self._items) > self._maxlen:
                self._drop_one()
            self._ready.notify()

    def _drop_one(self) -> None:
        for i, item in enumerate(self._items):
            if isinstance(item, Levels):
                del self._items[i]
                break
        else:
            self._items.popleft()
        self.dropped += 1

    def get(self, block: bool = True, timeout: float | None = None) -> Event:
        with self._ready:
            if block and not self._ready.wait_for(lambda: self._items, timeout):
                raise queue.Empty
            if not self._items:
                raise queue.Empty
            return self._items.popleft()

    def get_nowait(self) -> Event:
        return self.get(block=False)

    def qsize(self) -> int:
        with self._ready:
            return len(self._items)

    def empty(self) -> bool:
        return self.qsize() == 0
