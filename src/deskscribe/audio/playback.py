"""Play a media file, a recorded session (its tracks mixed, or one of them) or samples: pause,
seek, speed 0.5-2x with the pitch kept, volume (sounddevice output).

Used by the transcript view's player (through ``service.playback``); QtMultimedia is not
shipped. Nothing here blocks its caller: `Player.play` returns at once, decoding and opening
the device happen on a short-lived thread. The PortAudio callback hands out what is rendered
ahead: the audio as it is at 1x, or stretched by FFmpeg's ``atempo`` filter (PyAV), which
keeps the pitch, a block at a time. Failures (a moved file, no output device) go to
``on_error`` as a message fit for the user; the player never raises from a background thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from ..errors import DeskScribeError
from .decode import SAMPLE_RATE, MediaError, decode_audio
from .devices import CaptureDeviceError, sounddevice

log = logging.getLogger(__name__)

Source = str | os.PathLike[str] | np.ndarray
SPEEDS = (0.5, 2.0)  # the range ``atempo`` keeps the pitch over in one pass
BLOCK = SAMPLE_RATE // 8  # source samples stretched at a time (125 ms)


class PlaybackError(DeskScribeError):
    """Audio cannot be played; the message says why and what to do."""


def load_audio(source: str | os.PathLike[str], track: str | None = None) -> np.ndarray:
    """16 kHz mono float32 of a media file, or of a recorded session folder (its tracks
    mixed, or only ``track``, e.g. "mic")."""
    path = Path(source)
    if path.is_dir():
        from .sessions import read_track

        names = tracks_of(path)
        if track is not None:
            if track not in names:
                raise PlaybackError(f"The recording in '{path}' has no {track} track.")
            names = [track]
        if not names:
            raise PlaybackError(f"The recording in '{path}' has no audio to play.")
        tracks = [read_track(path, t) for t in names]
        out = np.zeros(max(len(t) for t in tracks), np.float32)
        for t in tracks:
            out[: len(t)] += t / len(tracks)
        return out
    return decode_audio(path)


def tracks_of(source: str | os.PathLike[str]) -> list[str]:
    """The tracks a recorded session folder holds ("mic", "system"); [] for a media file."""
    path = Path(source)
    if not path.is_dir():
        return []
    from .session_files import read_journal, scan_chunks

    journal = read_journal(path)
    return list((journal or {}).get("tracks") or scan_chunks(path))


class _Stretcher:
    """Source audio from a position, at ``speed`` with the pitch kept: ``atempo`` over
    blocks, its output kept until the device takes it. ``played(n)`` turns output samples
    handed out into the source position they correspond to."""

    def __init__(self, audio: np.ndarray, start: int, speed: float, lag: int = 0) -> None:
        self.audio, self.start, self.speed = audio, start, speed
        self.lag = lag  # output samples the device holds before they are heard
        self.fed = start  # next source sample to stretch
        self.out = np.zeros(0, np.float32)
        self.handed = 0  # output samples handed to the device since ``start``
        self.done = False
        self.graph = None if speed == 1.0 else self._graph(speed)

    @staticmethod
    def _graph(speed: float):
        g = av.filter.Graph()
        src = g.add_abuffer(format="flt", sample_rate=SAMPLE_RATE, layout="mono",
                            time_base=Fraction(1, SAMPLE_RATE))  # fmt: skip
        tempo = g.add("atempo", f"{speed:g}")
        sink = g.add("abuffersink")
        src.link_to(tempo)
        tempo.link_to(sink)
        g.configure()
        return g

    def take(self, n: int) -> np.ndarray:
        """Up to ``n`` output samples (fewer only at the end)."""
        while len(self.out) < n and not self.done:
            self._render()
        chunk, self.out = self.out[:n], self.out[n:]
        self.handed += len(chunk)
        return chunk

    def _render(self) -> None:
        block = self.audio[self.fed : self.fed + BLOCK]
        self.fed += len(block)
        if self.graph is None:
            self.out = np.concatenate([self.out, block])
            self.done = self.fed >= len(self.audio)
            return
        if len(block):
            frame = av.AudioFrame.from_ndarray(block[None, :], format="flt", layout="mono")
            frame.sample_rate, frame.time_base = SAMPLE_RATE, Fraction(1, SAMPLE_RATE)
            frame.pts = self.fed - len(block)
            self.graph.push(frame)
        else:
            self.graph.push(None)  # the end: flush what the filter holds
            self.done = True
        while True:
            try:
                got = self.graph.pull().to_ndarray().reshape(-1).astype(np.float32)
            except (av.BlockingIOError, av.EOFError):
                break
            self.out = np.concatenate([self.out, got])

    def position(self) -> int:
        """The source sample being heard now: output handed out, less what the device still
        holds, scaled back by the speed."""
        heard = max(0, self.handed - self.lag)
        return min(len(self.audio), self.start + round(heard * self.speed))


class Player:
    """One sound at a time: ``play`` replaces what is playing; ``pause``/``resume``, ``seek``,
    ``set_speed`` and ``volume`` change it as it plays."""

    def __init__(
        self,
        on_error: Callable[[str], None] | None = None,
        on_finished: Callable[[], None] | None = None,
        device: int | str | None = None,
    ) -> None:
        self.on_error = on_error
        self.on_finished = on_finished
        self.device = device
        self.volume = 1.0  # 0..1, read by the callback
        self._lock = threading.Lock()
        self._generation = 0
        self._stream = None
        self._audio = np.zeros(0, np.float32)
        self._rate = SAMPLE_RATE  # the device's
        self._resampler = None  # 16 kHz -> the device's rate, when it refuses 16 kHz
        self._stretch: _Stretcher | None = None
        self._speed = 1.0
        self._paused = False
        self._playing = False
        self._start_s = 0.0  # where the source plays from while it is still loading
        self._lag = 0  # the device's output latency, in 16 kHz samples
        self._cache: tuple[tuple, np.ndarray] | None = None  # (source key, 16 kHz audio)
        self.error: str | None = None

    # --- public ----------------------------------------------------------------------------

    def play(self, source: Source, start_s: float = 0.0, track: str | None = None) -> None:
        """Start playing ``source`` (a path, a session folder or 16 kHz samples) at ``start_s``."""
        with self._lock:
            self._generation += 1
            generation = self._generation
            old, self._stream = self._stream, None
            self._playing, self._paused, self.error = True, False, None
            self._stretch, self._start_s = None, max(0.0, start_s)
        _close_later(old)
        threading.Thread(
            target=self._start, args=(source, track, generation),
            name="playback-open", daemon=True,
        ).start()  # fmt: skip

    def stop(self) -> None:
        with self._lock:
            self._generation += 1
            old, self._stream, self._playing, self._paused = self._stream, None, False, False
        _close_later(old)

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def seek(self, seconds: float) -> None:
        """Go on from ``seconds`` into the source (at the same speed, paused or not)."""
        with self._lock:
            if self._stretch is None:  # still loading: it starts there
                self._start_s = max(0.0, seconds)
                return
            at = min(len(self._audio), max(0, round(seconds * SAMPLE_RATE)))
            self._stretch = _Stretcher(self._audio, at, self._speed, self._lag)

    @property
    def speed(self) -> float:
        return self._speed

    def set_speed(self, speed: float) -> None:
        """0.5 to 2 times (the pitch is kept); takes effect where playback is now."""
        speed = min(SPEEDS[1], max(SPEEDS[0], float(speed)))
        with self._lock:
            self._speed = speed
            if self._stretch is not None:
                at = self._stretch.position()
                self._stretch = _Stretcher(self._audio, at, speed, self._lag)

    def position(self) -> float:
        """Seconds into the source of the sample being handed to the device now."""
        s = self._stretch
        if s is None:
            return self._start_s if self._playing else 0.0
        return s.position() / SAMPLE_RATE

    @property
    def duration(self) -> float:
        """Seconds of the source loaded (0 until it is)."""
        return len(self._audio) / SAMPLE_RATE

    @property
    def is_playing(self) -> bool:
        """True from `play` until the end, `stop`, or an error (also while still loading,
        and while paused)."""
        return self._playing

    def close(self) -> None:
        self.stop()

    # --- internals -------------------------------------------------------------------------

    def _current(self, generation: int) -> bool:
        return generation == self._generation

    def _fail(self, generation: int, message: str) -> None:
        with self._lock:
            if not self._current(generation):
                return
            self._playing, self.error = False, message
        log.warning("playback: %s", message)
        if self.on_error is not None:
            self.on_error(message)

    def _samples(self, source: Source, track: str | None) -> np.ndarray:
        if isinstance(source, np.ndarray):
            return np.asarray(source, np.float32).reshape(-1)
        path = Path(source)
        try:
            st = path.stat()
            key: tuple = (str(path.resolve()), st.st_mtime, st.st_size, track)
        except OSError:
            key = (str(path), track)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        audio = load_audio(path, track)
        self._cache = (key, audio)
        return audio

    def _start(self, source: Source, track, generation: int) -> None:
        try:
            audio = self._samples(source, track)
            sd = sounddevice()
        except (MediaError, PlaybackError, CaptureDeviceError, OSError, ValueError) as e:
            self._fail(generation, str(e))
            return
        if not self._current(generation):
            return
        try:
            stream, rate = self._open(sd, generation)
        except Exception as e:  # PortAudioError and friends: no device, device busy, ...
            self._fail(
                generation,
                f"No sound can be played: {_reason(e)}. Check that an output device (speakers "
                "or headphones) is connected and enabled in your system's sound settings.",
            )
            return
        with self._lock:
            if not self._current(generation):
                _close_later(stream)
                return
            self._audio, self._rate = audio, rate
            self._resampler = None if rate == SAMPLE_RATE else _resampler(rate)
            self._lag = round(float(getattr(stream, "latency", 0.0) or 0.0) * SAMPLE_RATE)
            at = min(len(audio), int(self._start_s * SAMPLE_RATE))
            self._stretch = _Stretcher(audio, at, self._speed, self._lag)
            self._stream = stream
        try:
            stream.start()
        except Exception as e:
            self._fail(generation, f"Playback could not start: {_reason(e)}.")

    def _fill(self, outdata: np.ndarray, frames: int) -> bool:
        """Fill the device's buffer; False once the source has ended."""
        with self._lock:
            stretch = self._stretch
            if stretch is None or self._paused:
                outdata.fill(0)
                return stretch is not None
            want = frames if self._resampler is None else int(frames * SAMPLE_RATE / self._rate)
            chunk = stretch.take(max(1, want))
            if self._resampler is not None:
                chunk = self._resampler.resample_chunk(chunk, last=stretch.done and
                                                       not len(stretch.out))  # fmt: skip
        n = min(frames, len(chunk))
        outdata[:n, 0] = chunk[:n] * self.volume
        outdata[n:] = 0
        return not (stretch.done and not len(stretch.out) and n < frames)

    def _open(self, sd, generation: int):
        def callback(outdata, frames, _time, _status) -> None:
            if not self._current(generation):
                outdata.fill(0)
                raise sd.CallbackAbort
            if not self._fill(outdata, frames):
                raise sd.CallbackStop

        def finished() -> None:
            if self._current(generation):
                self._playing = False
                if self.on_finished is not None:
                    with contextlib.suppress(Exception):
                        self.on_finished()

        def open_at(rate: int):
            return sd.OutputStream(
                samplerate=rate, channels=1, dtype="float32", device=self.device,
                callback=callback, finished_callback=finished,
            )  # fmt: skip

        try:
            return open_at(SAMPLE_RATE), SAMPLE_RATE
        except sd.PortAudioError:
            # Some devices (WASAPI shared mode, some USB) take only their own rate.
            info = sd.query_devices(self.device, "output")
            rate = int(info["default_samplerate"])
            return open_at(rate), rate


def _resampler(rate: int):
    import soxr

    return soxr.ResampleStream(SAMPLE_RATE, rate, 1, dtype="float32")


def _reason(e: BaseException) -> str:
    return (str(e) or type(e).__name__).rstrip(".")


def _close_later(stream) -> None:
    """Close a stream off the caller's thread (PortAudio may take a moment to drain)."""
    if stream is None:
        return

    def close() -> None:
        with contextlib.suppress(Exception):
            stream.abort()
        with contextlib.suppress(Exception):
            stream.close()

    threading.Thread(target=close, name="playback-close", daemon=True).start()
