"""Hearing what the app plays: a recorder on a PulseAudio null sink's monitor, and where in a
source a piece of the recording comes from (normalized cross-correlation)."""

from __future__ import annotations

import os
import subprocess
import threading

import numpy as np

SR = 16000
SOUND = 16  # 16-bit steps: more is sound (the sink's monitor is digital silence when nothing
# plays; the noise floor of real recordings is far above this)


class Recorder:
    """`parec` on a monitor source, read on a thread so that how much it has heard is known."""

    RATE = SR

    def __init__(self, pulse, source: str) -> None:
        self.data = bytearray()
        self.proc = subprocess.Popen(
            ["parec", "-d", source, "--raw", "--format=s16le", f"--rate={self.RATE}",
             "--channels=1", "--latency-msec=20"],
            env={**os.environ, **pulse.env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while chunk := self.proc.stdout.read1(4096):
            self.data += chunk

    def seconds(self) -> float:
        return len(self.data) / 2 / self.RATE

    def samples(self) -> np.ndarray:
        return np.frombuffer(bytes(self.data[: len(self.data) // 2 * 2]), np.int16)

    def sounding(self) -> float:
        """Seconds heard since the first sound (0 while all is digital silence)."""
        heard = self.samples()
        loud = np.flatnonzero(np.abs(heard) > SOUND)
        return (heard.size - loud[0]) / self.RATE if loud.size else 0.0

    def silent_for(self) -> float:
        """Seconds of digital silence at the end of what was heard."""
        heard = self.samples()
        loud = np.flatnonzero(np.abs(heard) > SOUND)
        return (heard.size - (loud[-1] + 1 if loud.size else 0)) / self.RATE

    def stop(self) -> np.ndarray:
        self.proc.terminate()
        self.proc.wait(timeout=5)
        self._reader.join(timeout=5)
        return np.frombuffer(bytes(self.data), np.int16).astype(np.float32) / 32768


def where_in(source: np.ndarray, piece: np.ndarray) -> float:
    """Where in ``source`` (s) ``piece`` comes from: the peak of their normalized
    cross-correlation."""
    piece = piece.astype(np.float64)
    src = source.astype(np.float64)
    size = 1 << (src.size + piece.size).bit_length()
    corr = np.fft.irfft(np.fft.rfft(src, size) * np.conj(np.fft.rfft(piece, size)), size)
    energy = np.concatenate([[0.0], np.cumsum(src**2)])
    window = energy[piece.size :] - energy[: -piece.size]  # source energy under the piece
    score = corr[: window.size] / np.sqrt(np.maximum(window, 1e-12))
    return int(np.argmax(score)) / SR


def first_sound(heard: np.ndarray, after: float = 0.0) -> float | None:
    """Seconds into ``heard`` of its first sound at or after ``after`` s (None: silence)."""
    start = int(after * SR)
    loud = np.flatnonzero(np.abs(heard[start:]) > SOUND / 32768)
    return (start + loud[0]) / SR if loud.size else None


def played_from(heard: np.ndarray, source: np.ndarray, seconds: float = 2.0) -> float | None:
    """Where in ``source`` the playback recorded in ``heard`` starts (s); None if nothing was
    heard. Before it the sink's monitor is digital silence; the first ``seconds`` of what it
    played are found in ``source``."""
    began = first_sound(heard)
    if began is None:
        return None
    at = int(began * SR)
    return where_in(source, heard[at : at + int(seconds * SR)])


def sound_runs(heard: np.ndarray, gap: float = 0.3) -> list[tuple[float, float]]:
    """(start, end) s of each stretch of sound in ``heard``, stretches closer than ``gap`` s of
    digital silence joined."""
    loud = np.flatnonzero(np.abs(heard) > SOUND / 32768)
    if not loud.size:
        return []
    breaks = np.flatnonzero(np.diff(loud) > gap * SR)
    starts = [loud[0], *loud[breaks + 1]]
    ends = [*loud[breaks], loud[-1]]
    return [(a / SR, (b + 1) / SR) for a, b in zip(starts, ends, strict=True)]
