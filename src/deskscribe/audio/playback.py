"""Play a media file, a recorded session or samples from a given time (sounddevice output).

Used by the transcript view ("click a segment to hear it"); QtMultimedia is not shipped. Nothing
here blocks its caller: `Player.play` returns at once, decoding and opening the device happen on
a short-lived thread, and the PortAudio callback only copies samples. Failures (a moved file, no
output device) go to ``on_error`` as a message fit for the user; the player never raises from
a background thread.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import DeskScribeError
from .decode import SAMPLE_RATE, MediaError, decode_audio
from .devices import CaptureDeviceError, sounddevice

log = logging.getLogger(__name__)

Source = str | os.PathLike[str] | np.ndarray


class PlaybackError(DeskScribeError):
    """Audio cannot be played; the message says why and what to do."""


def load_audio(source: str | os.PathLike[str]) -> np.ndarray:
    """16 kHz mono float32 of a media file, or of a recorded session folder (tracks mixed)."""
    path = Path(source)
    if path.is_dir():
        from .session_files import read_journal, scan_chunks
        from .sessions import read_track

        journal = read_journal(path)
        names = list((journal or {}).get("tracks") or scan_chunks(path))
        if not names:
            raise PlaybackError(f"The recording in '{path}' has no audio to play.")
        tracks = [read_track(path, t) for t in names]
        out = np.zeros(max(len(t) for t in tracks), np.float32)
        for t in tracks:
            out[: len(t)] += t / len(tracks)
        return out
    return decode_audio(path)


class Player:
    """One sound at a time: ``play`` replaces what is playing."""

    def __init__(
        self,
        on_error: Callable[[str], None] | None = None,
        on_finished: Callable[[], None] | None = None,
        device: int | str | None = None,
    ) -> None:
        self.on_error = on_error
        self.on_finished = on_finished
        self.device = device
        self._lock = threading.Lock()
        self._generation = 0
        self._stream = None
        self._audio = np.zeros(0, np.float32)
        self._rate = SAMPLE_RATE
        self._pos = 0  # next sample the callback hands out (in self._rate samples)
        self._playing = False
        self._cache: tuple[tuple, np.ndarray] | None = None  # (source key, 16 kHz audio)
        self.error: str | None = None

    # --- public ----------------------------------------------------------------------------

    def play(self, source: Source, start_s: float = 0.0) -> None:
        """Start playing ``source`` (a path, a session folder or 16 kHz samples) at ``start_s``."""
        with self._lock:
            self._generation += 1
            generation = self._generation
            old, self._stream = self._stream, None
            self._playing, self.error = True, None
            self._pos = 0
        _close_later(old)
        threading.Thread(
            target=self._start, args=(source, max(0.0, start_s), generation),
            name="playback-open", daemon=True,
        ).start()  # fmt: skip

    def stop(self) -> None:
        with self._lock:
            self._generation += 1
            old, self._stream, self._playing = self._stream, None, False
        _close_later(old)

    def position(self) -> float:
        """Seconds into the source of the sample being handed to the device now."""
        return self._pos / self._rate

    @property
    def is_playing(self) -> bool:
        """True from `play` until the end, `stop`, or an error (also while still loading)."""
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

    def _samples(self, source: Source) -> np.ndarray:
        if isinstance(source, np.ndarray):
            return np.asarray(source, np.float32).reshape(-1)
        path = Path(source)
        try:
            st = path.stat()
            key: tuple = (str(path.resolve()), st.st_mtime, st.st_size)
        except OSError:
            key = (str(path),)
        if self._cache is not None and self._cache[0] == key:
            return self._cache[1]
        audio = load_audio(path)
        self._cache = (key, audio)
        return audio

    def _start(self, source: Source, start_s: float, generation: int) -> None:
        try:
            audio = self._samples(source)
            sd = sounddevice()
        except (MediaError, PlaybackError, CaptureDeviceError, OSError, ValueError) as e:
            self._fail(generation, str(e))
            return
        if not self._current(generation):
            return
        try:
            stream, rate, audio = self._open(sd, audio, generation)
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
            self._pos = min(len(audio), int(start_s * rate))
            self._stream = stream
        try:
            stream.start()
        except Exception as e:
            self._fail(generation, f"Playback could not start: {_reason(e)}.")

    def _open(self, sd, audio: np.ndarray, generation: int):
        def callback(outdata, frames, _time, _status) -> None:
            if not self._current(generation):
                outdata.fill(0)
                raise sd.CallbackAbort
            i = self._pos
            chunk = self._audio[i : i + frames]
            outdata[: len(chunk), 0] = chunk
            self._pos = i + len(chunk)
            if len(chunk) < frames:
                outdata[len(chunk) :] = 0
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
            return open_at(SAMPLE_RATE), SAMPLE_RATE, audio
        except sd.PortAudioError:
            # Some devices (WASAPI shared mode, some USB) take only their own rate.
            info = sd.query_devices(self.device, "output")
            rate = int(info["default_samplerate"])
            import soxr

            return open_at(rate), rate, soxr.resample(audio, SAMPLE_RATE, rate).astype(np.float32)


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
