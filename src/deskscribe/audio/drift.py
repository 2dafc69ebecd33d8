"""Two devices, two clocks: keep a follower track (system audio) on the microphone's clock.

A microphone and a sound card that both say "48 kHz" differ by tens to hundreds of ppm; over
an hour, 100 ppm is 0.36 s. ``DriftCorrector`` estimates the follower's true rate against the
master from the sample counts both have delivered (the slope of a least-squares line through
(master count, follower count) pairs, one pair a block, since a common starting point), and
resamples the follower with that variable ratio (soxr's variable-rate stream, ``vr=True``).
A slope is not moved by a steady delay (a device that always delivers a little late), and
arrival jitter (a device delivering in bursts) averages out over the span. The estimate is
used only once it is sure: at least ``SETTLE_S`` of master audio and a standard error of the
slope (from the residuals of the same fit) of at most ``MAX_ERROR_PPM``. Before that the
track passes at ratio 1: with tens of milliseconds of jitter, a few seconds of counts give
slopes hundreds of ppm off (measured on PulseAudio and PipeWire null sinks, which share one
clock), and stretching by those would misalign the tracks by up to 1 ms a second. The ratio
is limited to ``max_ppm`` around 1.

``rebase`` starts the counting afresh (after a stall, a device switch, or when the master
changes): the estimate is kept until the new span is long enough, since a device's clock
does not change.
"""

from __future__ import annotations

import numpy as np
import soxr

from ..audio_format import SAMPLE_RATE

SETTLE_S = 5.0  # master audio needed before the counts are trusted for a rate estimate
MAX_ERROR_PPM = 20.0  # the estimate's standard error at which it is trusted


class DriftCorrector:
    """Resample one follower track, block by block, to the master's clock."""

    def __init__(self, rate: int = SAMPLE_RATE, max_ppm: float = 1000.0) -> None:
        self.rate = rate
        self.max_ratio = max_ppm * 1e-6
        try:
            self._stream: soxr.ResampleStream | None = soxr.ResampleStream(
                rate, rate, 1, dtype="float32", vr=True
            )
        except TypeError:  # a soxr without variable-rate streams: pass the audio through
            self._stream = None
        self.ratio = 1.0  # follower samples in per sample out (its clock / the master's)
        self.rebase()

    @property
    def ppm(self) -> float:
        """The estimated rate difference of the follower, in ppm (+: its clock runs fast)."""
        return (self.ratio - 1.0) * 1e6

    def rebase(self) -> None:
        """Count afresh from the next block (the ratio so far stays until then)."""
        self._base: int | None = None
        self._in = 0  # follower samples since the base
        self._n = 0  # (master, follower) pairs, and their running means and co-moments
        self._mx = self._my = self._cxx = self._cxy = self._cyy = 0.0

    def process(self, audio: np.ndarray, master_total: int) -> np.ndarray:
        """The follower's new ``audio``, on the master's clock. ``master_total``: samples
        the master has delivered so far (any origin; only differences count)."""
        audio = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        if self._stream is None:
            return audio
        if self._base is None:
            self._base = master_total
        self._in += audio.shape[0]
        self._add(float(master_total - self._base), float(self._in))
        if master_total - self._base >= SETTLE_S * self.rate and self._settled():
            ratio = _clamp(self._cxy / self._cxx, self.max_ratio)
            if ratio != self.ratio:
                self.ratio = ratio
                self._stream.set_io_ratio(self.rate * ratio, self.rate)
        return self._stream.resample_chunk(audio)

    def flush(self) -> np.ndarray:
        """The samples still inside the resampler (the device's last audio); the corrector
        then goes on with a fresh resampler (the next device), the same ratio, counted anew."""
        if self._stream is None:
            return np.zeros(0, dtype=np.float32)
        tail = self._stream.resample_chunk(np.zeros(0, dtype=np.float32), last=True)
        self._stream = soxr.ResampleStream(self.rate, self.rate, 1, dtype="float32", vr=True)
        if self.ratio != 1.0:
            self._stream.set_io_ratio(self.rate * self.ratio, self.rate)
        self.rebase()
        return tail

    def _add(self, x: float, y: float) -> None:
        """One more (master, follower) pair into the running least-squares sums (Welford)."""
        self._n += 1
        dx, dy = x - self._mx, y - self._my
        self._mx += dx / self._n
        self._my += dy / self._n
        self._cxx += dx * (x - self._mx)
        self._cxy += dx * (y - self._my)
        self._cyy += dy * (y - self._my)

    def _settled(self) -> bool:
        """Whether the slope's standard error is down to ``MAX_ERROR_PPM``."""
        if self._n < 3 or self._cxx <= 0:
            return False
        residual = max(self._cyy - self._cxy**2 / self._cxx, 0.0) / (self._n - 2)
        return (residual / self._cxx) ** 0.5 <= MAX_ERROR_PPM * 1e-6


def _clamp(ratio: float, limit: float) -> float:
    return min(1.0 + limit, max(1.0 - limit, ratio))
