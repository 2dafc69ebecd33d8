"""System audio without extra software: native loopback backends behind one small interface.

- Windows (`wasapi`): WASAPI loopback of any output through PyAudioWPatch (a PortAudio with
  loopback; the microphone stays on sounddevice): the default output first (and an entry that
  follows it when Windows' default changes), the communications device of calls, native
  channel count downmixed, gaps while nothing plays filled by time.
- macOS (`macos`, `processtap`, `screencapturekit`): a Core Audio process tap on 14.4 and
  later and an audio-only ScreenCaptureKit stream on 13 and later (pyobjc); which route each
  version has and what permission it needs; BlackHole stays the fallback.
- Both: `silence.SilenceWatch` turns "only digital zeros while something plays" into a
  message with the steps to fix it (`silence.permission_help`).

A backend is a `LoopbackStream` subclass: it opens the OS stream in `_open`, hands raw blocks
to `_push` from the OS thread, closes in `_close`, and may say whether the OS plays anything
(`_playing`). `LoopbackStream` has InputCapture's interface (start, stop, read -> 16 kHz mono
float32, level, overflows, frames, error, fail), so `capture.Capture` runs it in InputCapture's
place (`InputDevice.opens_with`). The parts that touch the OS never ran on Windows or macOS
(README, status line); the rest is tested on Linux with recorded listings and real audio.
"""

from __future__ import annotations

import collections
import contextlib
import time

import numpy as np
import soxr

from ...audio_format import SILENCE_DB, level_db
from ..device_types import CaptureDeviceError, InputDevice
from .formats import GapFiller, downmix, to_float
from .silence import SilenceWatch, permission_help

SAMPLE_RATE = 16000
PLAYING_CHECK_S = 0.5  # how often to ask the OS whether anything plays


def native_device(
    name: str, rate: float, backend: str, opens_with, channels: int = 2, index: int | None = None
):
    """The system-audio entry of a native backend, opened by its class (``index``: the
    backend's own device index, when it has one)."""
    return InputDevice(
        name=name,
        kind="system",
        index=index,
        pulse_source=None,
        channels=channels,
        samplerate=float(rate),
        backend=backend,
        opens_with=opens_with,
    )


def importable(frameworks) -> bool:
    """Whether a backend's ``frameworks()`` finds its libraries (it raises otherwise)."""
    try:
        frameworks()
    except CaptureDeviceError:
        return False
    return True


class LoopbackStream:
    """One native system-audio stream on `device`, read as 16 kHz mono float32."""

    backend = "loopback"
    sample_format = "float32"

    def __init__(self, device: InputDevice, ring_seconds: float = 20.0) -> None:
        self.device = device
        self._ring_seconds = ring_seconds
        self._rate = float(device.samplerate)
        self._channels = max(1, int(device.channels))
        self._blocks: collections.deque[tuple[np.ndarray, float]] = collections.deque()
        self._pushed = 0  # frames; written by the OS thread only
        self._taken = 0  # frames; written by the reader only
        self._dropped = 0  # frames the full queue refused (OS thread)
        self._dropped_seen = 0
        self._os_overflows = 0
        self._resampler = soxr.ResampleStream(self._rate, SAMPLE_RATE, 1, dtype="float32")
        self._gaps: GapFiller | None = None
        self._watch = SilenceWatch(SAMPLE_RATE)
        self._playing_at = 0.0
        self._playing_now: bool | None = None
        self._blind_error: str | None = None
        self._carry = np.zeros(0, np.float32)  # 16 kHz audio flushed at a device switch
        self._stopping = False
        self._stopped = False
        self._flushed = False
        self._level = SILENCE_DB
        self.frames = 0
        self.delivered = 0  # 16 kHz samples handed out so far
        self.error: str | None = None

    # ------------------------------------------------------------ a TrackStream (device_types)

    @property
    def level(self) -> float:
        return SILENCE_DB if self.error else self._level

    @property
    def overflows(self) -> int:
        return self._os_overflows + self._dropped

    @property
    def dropped(self) -> int:
        """Frames the full queue refused (`Capture.dropped_share` counts them as lost)."""
        return self._dropped

    @property
    def flushed(self) -> bool:
        """Stopped, and its last samples handed out (meeting mode's drift correction reads
        this of the system-audio track: it was missing, so a native loopback there failed)."""
        return self._flushed

    def start(self) -> None:
        try:
            self._open()
        except CaptureDeviceError:
            raise
        except Exception as e:  # the OS library's own error types
            raise CaptureDeviceError(
                f"Cannot record system audio from '{self.device.name}' ({e}). Choose another "
                "system-audio device."
            ) from None
        self._gaps = GapFiller(self._rate, time.monotonic())

    def stop(self) -> None:
        self._stopping = True
        with contextlib.suppress(Exception):
            self._close()
        self._stopped = True

    def fail(self, message: str) -> None:
        self.error = message
        self.stop()

    def read(self) -> np.ndarray:
        """Everything captured since the last read, at 16 kHz mono (after `stop()`, the tail)."""
        now = time.monotonic()
        if not self._stopped:
            self._follow(now)
        parts = []
        while self._blocks:
            frames, at = self._blocks.popleft()
            self._taken += len(frames)
            parts.append(downmix(frames))
            if self._gaps is not None:
                self._gaps.arrived(at)
        dropped = self._dropped - self._dropped_seen
        if dropped:
            self._dropped_seen += dropped
            parts.append(np.zeros(dropped, np.float32))
        if self._gaps is not None and not self._stopped and not self.error:
            missing = self._gaps.missing(now)
            if missing:
                parts.append(np.zeros(missing, np.float32))
        mono = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        self.frames += len(mono)
        last = self._stopped and not self._flushed
        if not len(mono) and not last:
            return np.zeros(0, np.float32)
        out = self._resampler.resample_chunk(mono, last=last)
        self._flushed = self._flushed or last
        if len(self._carry):
            out, self._carry = np.concatenate([self._carry, out]), np.zeros(0, np.float32)
        if len(mono):
            self._level = level_db(out)
        self._check_blind(now, out)
        self.delivered += len(out)
        return out

    # ------------------------------------------------------------ for backends

    def _open(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def _playing(self) -> bool | None:
        """Whether the OS plays anything now (None: cannot tell)."""
        return None

    def _follow(self, now: float) -> None:
        """Reopen on another device when the one followed changed (default: never)."""

    def _push(self, data: bytes | np.ndarray, overflowed: bool = False) -> None:
        """From the OS thread: one block of interleaved samples in `sample_format`."""
        if overflowed:
            self._os_overflows += 1
        frames = to_float(data, self.sample_format, self._channels)
        if self._pushed - self._taken + len(frames) > self._ring_seconds * self._rate:
            self._dropped += len(frames)
            return
        self._blocks.append((frames, time.monotonic()))
        self._pushed += len(frames)

    def _push_frames(self, frames: np.ndarray) -> None:
        """From the OS thread: (frames, channels) float32 samples; another channel count than
        the stream's (mono though stereo was asked) is downmixed and spread over its channels."""
        if frames.shape[1] != self._channels:
            frames = np.repeat(downmix(frames)[:, None], self._channels, axis=1)
        self._push(frames.reshape(-1))

    def _lost_block(self, message: str | None = None) -> None:
        """From the OS thread: a block that could not be read counts as lost audio; the first
        reason given is the stream's error."""
        self._os_overflows += 1
        if message is not None:
            self.error = self.error or message

    def _switched(self, rate: float, channels: int) -> None:
        """Called by a backend between closing one OS stream and opening the next (another
        device: its own rate and channel count). What the old one delivered is resampled
        and flushed now and handed out by the next `read`, so nothing is lost."""
        parts = []
        while self._blocks:
            frames, _ = self._blocks.popleft()
            self._taken += len(frames)
            parts.append(downmix(frames))
        mono = np.concatenate(parts) if parts else np.zeros(0, np.float32)
        self.frames += len(mono)
        tail = self._resampler.resample_chunk(mono, last=True)
        self._carry = np.concatenate([self._carry, tail])
        self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32")
        self._rate, self._channels = float(rate), max(1, int(channels))
        self._gaps = GapFiller(self._rate, time.monotonic())

    def _check_blind(self, now: float, out: np.ndarray) -> None:
        if now - self._playing_at >= PLAYING_CHECK_S:
            self._playing_at = now
            with contextlib.suppress(Exception):
                self._playing_now = self._playing()
        blind = self._watch.feed(out, self._playing_now)
        if blind and self.error is None:
            self._blind_error = self.error = permission_help(self.backend, self.device.name)
        elif not blind and self._blind_error is not None and self.error == self._blind_error:
            self.error = self._blind_error = None  # sound again: it was fixed meanwhile


__all__ = ["LoopbackStream", "SilenceWatch", "permission_help"]
