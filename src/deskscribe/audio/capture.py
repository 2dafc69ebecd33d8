"""Live audio in: the microphone, system audio, or both, as aligned 16 kHz mono tracks.

- `RingBuffer`: what the PortAudio callback writes into; one writer, one reader, no locks.
- `InputCapture`: one input stream. Its callback only copies frames into the ring; the reader
  downmixes and resamples (soxr, streamed, so blocks join without clicks) to 16 kHz mono.
- `Capture`: one or two `InputCapture`s ("mic", "system") read as tracks of equal length.

Alignment (`Capture.read`): a track is anchored to the session clock when its first audio
arrives (zeros before it). The clock follows the microphone while it delivers, else any
delivering track, else elapsed time. Each read hands out every track up to the shortest; a
track silent for `max_skew` seconds (a loopback while nothing plays, a dead device) is filled
with zeros up to the clock, so the other never waits longer; after `switch_device` the track
is anchored again, so the timeline stays continuous.

Clock drift: two devices' clocks differ by tens to hundreds of ppm (0.1-0.4 s an hour). In
meeting mode the system-audio track goes through a `drift.DriftCorrector`, which estimates
its true rate against the microphone from both sample counts and resamples it with that
variable ratio, so the tracks stay aligned (within 20 ms over 20 minutes at 200 ppm, see
tests/test_drift.py). A track still more than `max_skew` ahead of the clock is trimmed and
one that far behind is padded (a device that hiccups), and the estimate starts afresh.
"""

from __future__ import annotations

import contextlib
import threading
import time

import numpy as np
import soxr

from deskscribe.audio.devices import (
    CaptureDeviceError,
    InputDevice,
    PulseSourceWatch,
    TrackStream,
    default_device,
    pulse_source_selected,
    sounddevice,
)

from ..audio_format import SAMPLE_RATE, SILENCE_DB, level_db
from .drift import DriftCorrector

TRACKS = ("mic", "system")
SOURCES = ("mic", "system", "both")
_WATCH_S = 0.2  # how often Linux tracks check that their sound-server source still exists
_MIX_KNEE = 0.8  # the mix is linear below this, then bends smoothly towards ±1


class RingBuffer:
    """Single-producer single-consumer ring of float32 frames (`channels` samples each).

    Each side moves only its own counter, and the GIL makes that update atomic, so no lock is
    needed. A full ring refuses new frames and counts them (`dropped`) instead of blocking.
    `read` returns shape (n,) for one channel, (n, channels) otherwise.
    """

    def __init__(self, capacity: int, channels: int = 1) -> None:
        if capacity < 1 or channels < 1:
            raise ValueError(f"capacity and channels must be positive ({capacity}, {channels})")
        self.capacity = capacity
        self.channels = channels
        self._buf = np.zeros((capacity, channels), dtype=np.float32)
        self._written = 0  # frames ever stored; only the producer moves it
        self._read = 0  # frames ever taken; only the consumer moves it
        self.dropped = 0  # frames refused because the ring was full; producer only

    @property
    def available(self) -> int:
        return self._written - self._read

    def write(self, block: np.ndarray) -> int:
        """Store what fits of `block` (frames, or samples for one channel); return frames dropped."""
        n = len(block)
        if block.ndim == 1:
            block = block.reshape(n, 1)
        written = self._written
        fits = min(n, self.capacity - (written - self._read))
        start = written % self.capacity
        first = min(fits, self.capacity - start)
        self._buf[start : start + first] = block[:first]
        if fits > first:
            self._buf[: fits - first] = block[first:fits]
        self._written = written + fits  # publish only after the copy
        if fits < n:
            self.dropped += n - fits
        return n - fits

    def read(self, max_samples: int | None = None) -> np.ndarray:
        taken = self._read
        n = self._written - taken
        if max_samples is not None:
            n = max(0, min(n, max_samples))
        start = taken % self.capacity
        first = min(n, self.capacity - start)
        out = np.empty((n, self.channels), dtype=np.float32)
        out[:first] = self._buf[start : start + first]
        out[first:] = self._buf[: n - first]
        self._read = taken + n  # free the space only after the copy
        return out[:, 0] if self.channels == 1 else out


class InputCapture:
    """One input stream on `device`, read as 16 kHz mono float32.

    After `stop()` (or after the device failed), what was captured stays readable.
    """

    def __init__(self, device: InputDevice, ring_seconds: float = 20.0) -> None:
        self.device = device
        rate = float(device.samplerate)
        self._ring = RingBuffer(max(1, round(ring_seconds * rate)), max(1, device.channels))
        self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32")
        self._stream = None
        self._stopping = False
        self._stopped = False
        self._flushed = False
        self._input_overflows = 0  # callbacks told that PortAudio/the driver lost input
        self._dropped_seen = 0
        self._level = SILENCE_DB
        self.frames = 0  # device frames received so far
        self.delivered = 0  # 16 kHz samples handed out so far
        self.error: str | None = None

    @property
    def level(self) -> float:
        """RMS dBFS of the audio returned by the last `read` that returned any."""
        return SILENCE_DB if self.error else self._level

    @property
    def overflows(self) -> int:
        return self._input_overflows + self._ring.dropped

    @property
    def dropped(self) -> int:
        """Device frames the full ring refused (lost input)."""
        return self._ring.dropped

    @property
    def flushed(self) -> bool:
        return self._flushed

    def start(self) -> None:
        sd = sounddevice()
        dev = self.device
        try:
            with pulse_source_selected(dev.pulse_source):
                stream = sd.InputStream(
                    device=dev.index,
                    channels=self._ring.channels,
                    samplerate=dev.samplerate,
                    dtype="float32",
                    callback=self._callback,
                    finished_callback=self._finished,
                )
        except (sd.PortAudioError, ValueError) as e:
            raise CaptureDeviceError(
                f"Cannot open '{dev.name}' ({e}). It may have been unplugged or be in use by "
                "another program; choose another device."
            ) from None
        try:
            stream.start()
        except sd.PortAudioError as e:
            stream.close(ignore_errors=True)
            raise CaptureDeviceError(f"Cannot start recording from '{dev.name}' ({e}).") from None
        self._stream = stream

    def _callback(self, indata: np.ndarray, frames: int, time_info: object, status: object) -> None:
        # PortAudio's thread: copy and count, nothing else.
        if status and status.input_overflow:  # type: ignore[attr-defined]
            self._input_overflows += 1
        self._ring.write(indata)

    def _finished(self) -> None:
        if not self._stopping:
            self.error = (
                f"'{self.device.name}' stopped delivering audio (unplugged, switched off, or "
                "taken by another program). Choose another device to continue."
            )

    def fail(self, message: str) -> None:
        """Give up on the device (e.g. it is gone): `error` says so; the audio so far stays."""
        self.error = message
        self.stop()

    def stop(self) -> None:
        self._stopping = True
        stream, self._stream = self._stream, None
        if stream is not None:
            sd = sounddevice()
            with contextlib.suppress(sd.PortAudioError):
                stream.stop()
            stream.close(ignore_errors=True)
        self._stopped = True

    def read(self) -> np.ndarray:
        """Everything captured since the last read, at 16 kHz mono (after `stop()`, the tail)."""
        block = self._ring.read()
        mono = block.mean(axis=1, dtype=np.float32) if block.ndim == 2 else block
        dropped = self._ring.dropped - self._dropped_seen
        if dropped:
            # The full ring refused these frames after what it holds: silence keeps time right.
            self._dropped_seen += dropped
            mono = np.concatenate([mono, np.zeros(dropped, dtype=np.float32)])
        self.frames += len(block)
        last = self._stopped and not self._flushed
        if not len(mono) and not last:
            return np.zeros(0, dtype=np.float32)
        out = self._resampler.resample_chunk(np.ascontiguousarray(mono), last=last)
        self._flushed = self._flushed or last
        if len(block):
            self._level = level_db(out)
        self.delivered += len(out)
        return out


class Capture:
    """The live session's audio: `source` "mic", "system" or "both" (two aligned tracks).

    Devices default to the operating system's (`default_device`); `CaptureDeviceError` (or
    `NoSystemAudioError`) is raised here when there is none, and by `start` when one cannot be
    opened. Once started, device failures never raise: see `errors()`.
    """

    def __init__(
        self,
        source: str = "mic",
        mic: InputDevice | None = None,
        system: InputDevice | None = None,
        *,
        ring_seconds: float = 20.0,
        max_skew: float = 0.5,
    ) -> None:
        if source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {source!r}")
        self.source = source
        self.tracks = TRACKS if source == "both" else (source,)
        given = {"mic": mic, "system": system}
        self.devices = {t: given[t] or default_device(t) for t in self.tracks}
        self._ring_seconds = ring_seconds
        self._skew = max(1, round(max_skew * SAMPLE_RATE))
        self._max_skew = max_skew
        self._inputs: dict[str, TrackStream] = {}
        self._pending = {t: np.zeros(0, dtype=np.float32) for t in self.tracks}
        self._anchored = dict.fromkeys(self.tracks, False)
        self._last_data = dict.fromkeys(self.tracks, 0.0)
        self._overflow_base = dict.fromkeys(self.tracks, 0)
        self._lost_base = dict.fromkeys(self.tracks, (0, 0))  # (dropped, frames) of old devices
        # Meeting mode: system audio follows the microphone's clock.
        self._drift = {"system": DriftCorrector()} if source == "both" else {}
        self._drift_flushed: InputCapture | None = None  # the stopped device it was flushed for
        self._emitted = 0  # samples per track handed out so far
        self._clock = (0.0, 0)  # (monotonic time, timeline sample) of the last reference audio
        self._running = False
        self._watch: PulseSourceWatch | None = None
        self._watched = 0.0
        self._lock = threading.Lock()

    @property
    def position(self) -> int:
        """Samples per track returned by `read` so far (the timeline's length)."""
        return self._emitted

    def start(self) -> None:
        with self._lock:
            if self._running:
                return
            opened: list[TrackStream] = []
            try:
                for t in self.tracks:
                    capture = (self.devices[t].opens_with or InputCapture)(
                        self.devices[t], self._ring_seconds
                    )
                    capture.start()
                    opened.append(capture)
            except BaseException:
                for capture in opened:
                    capture.stop()
                raise
            now = time.monotonic()
            self._inputs = dict(zip(self.tracks, opened, strict=True))
            self._anchored = dict.fromkeys(self.tracks, False)
            self._last_data = dict.fromkeys(self.tracks, now)
            self._clock = (now, self._emitted)
            self._running = True
            if any(d.pulse_source for d in self.devices.values()):
                self._watch = PulseSourceWatch()
                self._watch.sources()  # connect now rather than in the first read

    def stop(self) -> None:
        """Stop the streams; the next `read` returns what was still on its way."""
        with self._lock:
            for capture in self._inputs.values():
                capture.stop()
            self._running = False
            if self._watch is not None:
                self._watch.close()
                self._watch = None

    def read(self) -> dict[str, np.ndarray]:
        """New 16 kHz mono samples per track; all tracks the same length."""
        with self._lock:
            now = time.monotonic()
            if self._running:
                self._check_sources(now)
            fresh = {t: self._pull(t, now) for t in self._inputs}
            if self._running:
                n = self._align(now, fresh)
            else:  # stopped: hand out everything, padded to the longest track
                for t, audio in fresh.items():
                    self._pending[t] = np.concatenate([self._pending[t], audio])
                n = max(len(p) for p in self._pending.values())
            out = {}
            for t in self.tracks:
                self._pad(t, n - len(self._pending[t]))
                out[t], self._pending[t] = self._pending[t][:n], self._pending[t][n:]
            self._emitted += n
            return out

    def _check_sources(self, now: float) -> None:
        """Fail tracks whose sound-server source has gone, before the server moves them on."""
        watched = {t: c for t, c in self._inputs.items() if c.device.pulse_source and not c.error}
        if not watched or now - self._watched < _WATCH_S:
            return
        self._watched = now
        self._watch = self._watch or PulseSourceWatch()
        present = self._watch.sources()
        if present is None:
            return
        for capture in watched.values():
            if capture.device.pulse_source not in present:
                capture.fail(
                    f"'{capture.device.name}' is gone (unplugged or switched off). Choose "
                    "another device to continue."
                )

    def _pull(self, track: str, now: float) -> np.ndarray:
        capture = self._inputs[track]
        frames = capture.frames
        audio = capture.read()
        drift = self._drift.get(track)
        if drift is not None:
            audio = self._follow_mic(drift, capture, audio, now)
        if capture.frames > frames:
            self._last_data[track] = now
            if not self._anchored[track]:
                return audio  # placed by _aligned once the reference is known
        self._pending[track] = np.concatenate([self._pending[track], audio])
        return np.zeros(0, dtype=np.float32)

    def _follow_mic(
        self, drift: DriftCorrector, capture: InputCapture, audio: np.ndarray, now: float
    ) -> np.ndarray:
        """Put a follower's audio on the microphone's clock (meeting mode). While the mic
        does not deliver, there is no clock to follow: the counting starts again after."""
        mic = self._inputs["mic"]
        if mic.error is not None or now - self._last_data["mic"] > self._max_skew:
            drift.rebase()
        out = drift.process(audio, mic.delivered) if len(audio) else audio
        if capture.flushed and self._drift_flushed is not capture:  # stopped: the tail too
            self._drift_flushed = capture
            out = np.concatenate([out, drift.flush()])
        return out

    def _align(self, now: float, fresh: dict[str, np.ndarray]) -> int:
        """Place fresh audio, fill and trim tracks; return how many samples all tracks share."""
        stalled = {
            t: self._inputs[t].error is not None or now - self._last_data[t] > self._max_skew
            for t in self.tracks
        }
        total = {t: self._emitted + len(self._pending[t]) for t in self.tracks}
        live = [t for t in self.tracks if self._anchored[t] and not stalled[t]]
        ref = "mic" if "mic" in live else (max(live, key=total.get) if live else None)
        if ref is not None:
            self._clock = (now, total[ref])
        then, pos = self._clock
        position = pos + round((now - then) * SAMPLE_RATE) if ref is None else total[ref]
        for t in self.tracks:
            if t == ref:
                continue
            if not self._anchored[t] and len(fresh.get(t, ())):
                # First audio from this device: it ends now, so it starts `len` samples ago.
                self._pad(t, position - total[t] - len(fresh[t]))
                self._pending[t] = np.concatenate([self._pending[t], fresh[t]])
                self._anchored[t] = True
            elif stalled[t]:
                self._pad(t, position - total[t])
                if t in self._drift:
                    self._drift[t].rebase()
            elif self._anchored[t]:
                self._pad(t, position - self._skew - total[t])  # its clock runs slow
        n = min(len(p) for p in self._pending.values())
        for t in self.tracks:
            excess = len(self._pending[t]) - n - self._skew
            if t != ref and excess > 0:  # its clock runs fast: skip ahead
                self._pending[t] = self._pending[t][excess:]
        return n

    def _pad(self, track: str, samples: int) -> None:
        if samples > 0:
            zeros = np.zeros(samples, dtype=np.float32)
            self._pending[track] = np.concatenate([self._pending[track], zeros])

    def switch_device(self, track: str, device: InputDevice) -> None:
        """Record `track` from `device` from now on; the gap while switching becomes silence.

        Raises `CaptureDeviceError` if `device` cannot be opened (the old device stays on).
        """
        if track not in self.tracks:
            raise ValueError(f"this capture has no {track!r} track (it has {self.tracks})")
        with self._lock:
            if not self._running:
                self.devices[track] = device
                return
            new = (device.opens_with or InputCapture)(device, self._ring_seconds)
            new.start()
            old = self._inputs[track]
            old.stop()
            now = time.monotonic()
            leftover = old.read()
            drift = self._drift.get(track)
            if drift is not None and self._drift_flushed is not old:  # its tail, on the clock
                leftover = drift.process(leftover, self._inputs["mic"].delivered)
                leftover = np.concatenate([leftover, drift.flush()])
            if self._anchored[track]:
                self._pending[track] = np.concatenate([self._pending[track], leftover])
            self._overflow_base[track] += old.overflows
            dropped, frames = self._lost_base[track]
            self._lost_base[track] = (dropped + old.dropped, frames + old.frames)
            for drift in self._drift.values():  # either clock changed: count afresh
                drift.rebase()
            self._inputs[track] = new
            self.devices[track] = device
            self._anchored[track] = False  # anchored again when the new device delivers
            self._last_data[track] = now

    def levels(self) -> dict[str, float]:
        """RMS dBFS per track of the last audio read (for meters)."""
        return {t: c.level for t, c in self._inputs.items()}

    def overflows(self) -> dict[str, int]:
        """Per track: input overflows reported by PortAudio + frames the full ring dropped."""
        return {t: self._overflow_base[t] + c.overflows for t, c in self._inputs.items()}

    def dropped_share(self) -> float:
        """Input frames lost (refused by a full ring) as a share of all frames the devices
        delivered, over every track."""
        dropped = frames = 0
        for t, c in self._inputs.items():
            base_dropped, base_frames = self._lost_base[t]
            dropped += base_dropped + c.dropped
            frames += base_frames + c.frames
        return dropped / (frames + dropped) if frames + dropped else 0.0

    def errors(self) -> dict[str, str]:
        """Tracks whose device failed, with a message for the user; {} when all is well."""
        return {t: c.error for t, c in self._inputs.items() if c.error}

    def receiving(self) -> dict[str, bool]:
        """Whether each track's device delivered audio within the last `max_skew` seconds."""
        now = time.monotonic()
        return {
            t: c.error is None and c.frames > 0 and now - self._last_data[t] <= self._max_skew
            for t, c in self._inputs.items()
        }


def mix(tracks: dict[str, np.ndarray]) -> np.ndarray:
    """The mono mix for recognition: tracks summed at -3 dB each, bent (tanh) short of ±1."""
    arrays = [np.asarray(a, dtype=np.float32).reshape(-1) for a in tracks.values()]
    if not arrays:
        return np.zeros(0, dtype=np.float32)
    out = np.zeros(max(len(a) for a in arrays), dtype=np.float32)
    for a in arrays:
        out[: len(a)] += a
    if len(arrays) > 1:
        out *= np.float32(1.0 / np.sqrt(len(arrays)))
    over = np.abs(out) > _MIX_KNEE
    if over.any():
        mag = np.abs(out[over])
        room = 1.0 - _MIX_KNEE
        out[over] = np.sign(out[over]) * (_MIX_KNEE + room * np.tanh((mag - _MIX_KNEE) / room))
    return out
