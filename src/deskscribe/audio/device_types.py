"""The device record and error of audio input, apart from how devices are found (no imports).

`devices` lists and chooses devices; `loopback` opens system audio natively on Windows and
macOS; both use these, and `devices` re-exports them (import them from there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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
