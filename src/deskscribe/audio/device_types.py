"""The device record and error of audio input, and the two interfaces capture is built on,
apart from how devices are found (no imports).

`devices` lists and chooses devices; `loopback` opens system audio natively on Windows and
macOS; both use these, and `devices` re-exports them (import them from there).
`TrackStream` is one track's stream (a PortAudio input or a native loopback); `LiveAudio` is
what a live session records from (`capture.Capture`, or audio a program pushes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

from ..errors import DeskScribeError


@dataclass(frozen=True)
class InputDevice:
    name: str  # what the user sees
    kind: str  # "mic" | "system"
    index: int | None  # sounddevice device index to open; None = PortAudio's default input
    pulse_source: str | None  # Linux: PulseAudio source to set as PULSE_SOURCE while opening
    channels: int
    samplerate: float  # the device's native rate; the capture resamples to 16 kHz
    # A native system-audio backend ("wasapi", ...; None: a sounddevice input) and the class
    # that opens it, called as `opens_with(device, ring_seconds)` in place of InputCapture
    # (same interface: start, stop, read, level, overflows, frames, error, fail).
    backend: str | None = None
    opens_with: Callable[..., Any] | None = field(default=None, compare=False, repr=False)


class CaptureDeviceError(DeskScribeError):
    """An input device cannot be listed, found or opened; `str(err)` says what to do."""


class TrackStream(Protocol):
    """One capture track's stream: `capture.InputCapture` (a PortAudio input) or a native
    system-audio stream of `audio.loopback` (WASAPI, a Core Audio process tap,
    ScreenCaptureKit), opened by `InputDevice.opens_with`. `capture.Capture` reads tracks
    through this interface only."""

    device: InputDevice
    error: str | None  # why the device stopped delivering, for the user; None while it works
    frames: int  # device frames received so far
    delivered: int  # 16 kHz samples handed out so far
    dropped: int  # device frames a full buffer refused

    @property
    def level(self) -> float: ...  # dBFS of the last audio read

    @property
    def overflows(self) -> int: ...

    @property
    def flushed(self) -> bool: ...  # stopped, and its last samples handed out

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def read(self) -> np.ndarray: ...  # what arrived since the last read, 16 kHz mono

    def fail(self, message: str) -> None: ...


class LiveAudio(Protocol):
    """What a live session records from: `capture.Capture` (devices), or any source with the
    same reading side (the tests and benches push recordings through one)."""

    tracks: tuple[str, ...]

    def start(self) -> None: ...

    def read(self) -> dict[str, np.ndarray]: ...  # per track, equal lengths

    def levels(self) -> dict[str, float]: ...

    def overflows(self) -> dict[str, int]: ...

    def errors(self) -> dict[str, str]: ...

    def switch_device(self, track: str, device: InputDevice) -> None: ...

    def stop(self) -> None: ...
