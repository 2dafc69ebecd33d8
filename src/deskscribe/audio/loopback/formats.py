"""Sample formats of native loopback streams: to float, downmix, and gaps by time."""

from __future__ import annotations

import numpy as np

# Bytes per sample and how to read them (little-endian, interleaved frames).
FORMATS = {"float32": 4, "int16": 2, "int24": 3, "int32": 4}


def to_float(
    data: bytes | memoryview | np.ndarray, sample_format: str, channels: int
) -> np.ndarray:
    """Interleaved samples as float32 frames, shape (frames, channels), in [-1, 1).

    `data` is raw little-endian bytes in `sample_format`, or an array of samples (floats as
    they are, integers scaled by their type's range). A trailing partial frame is dropped.
    """
    if sample_format not in FORMATS:
        raise ValueError(f"unknown sample format {sample_format!r}; one of {sorted(FORMATS)}")
    if isinstance(data, np.ndarray):
        out = data.astype(np.float32)
        if data.dtype.kind in "iu":
            out /= float(np.iinfo(data.dtype).max) + 1.0
        out = out.reshape(-1)
    else:
        raw = np.frombuffer(data, dtype=np.uint8)
        width = FORMATS[sample_format]
        raw = raw[: len(raw) // width * width]
        if sample_format == "float32":
            out = raw.view("<f4").astype(np.float32)
        elif sample_format == "int16":
            out = raw.view("<i2").astype(np.float32) / 32768.0
        elif sample_format == "int32":
            out = raw.view("<i4").astype(np.float32) / 2147483648.0
        else:  # int24: three bytes, the sign in the top one
            b = raw.reshape(-1, 3).astype(np.int32)
            value = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
            value = np.where(value >= 1 << 23, value - (1 << 24), value)
            out = value.astype(np.float32) / float(1 << 23)
    usable = len(out) // channels * channels
    return out[:usable].reshape(-1, channels)


def float_frames(data: bytes, channels: int, planar: bool) -> np.ndarray:
    """(frames, channels) float32 from one buffer of little-endian float32 samples: planar
    (every sample of channel 0, then of channel 1, ...: Core Audio's non-interleaved layout,
    which ScreenCaptureKit delivers) or interleaved (`to_float`). A trailing partial frame is
    dropped."""
    channels = max(1, channels)
    if not planar:
        return to_float(data, "float32", channels)
    samples = np.frombuffer(data, dtype=np.uint8)
    samples = samples[: len(samples) // 4 * 4].view("<f4")
    per_channel = len(samples) // channels
    return samples[: per_channel * channels].reshape(channels, per_channel).T.astype(np.float32)


def downmix(frames: np.ndarray) -> np.ndarray:
    """Mono from (frames, channels): the mean of the channels that carry sound.

    A channel that is digital zero throughout the block while another is not (a headset
    that plays a call on one side, a 5.1 device whose rear channels are empty) is left out,
    so the voice keeps its level instead of dropping by the number of empty channels.
    """
    frames = np.asarray(frames, dtype=np.float32)
    if frames.ndim == 1 or frames.shape[1] == 1:
        return frames.reshape(-1).copy()
    live = np.any(frames != 0.0, axis=0)
    if not live.any():
        return np.zeros(len(frames), dtype=np.float32)
    return frames[:, live].mean(axis=1, dtype=np.float32)


class GapFiller:
    """Zeros for the time a loopback stream delivered nothing.

    WASAPI loopback sends no packets at all while nothing plays (and ScreenCaptureKit
    pauses likewise), so the recording would shrink and drift from the microphone. After
    `hold_s` without data, `missing(now)` returns the frames of silence since the last data
    (or the last fill); once data flows again nothing is added. Times are monotonic seconds.
    """

    def __init__(self, rate: float, started_at: float, hold_s: float = 0.25) -> None:
        self.rate = float(rate)
        self.hold_s = hold_s
        self._anchor = started_at  # the end of the last real data or fill
        self.filled = 0  # frames of silence handed out so far

    def arrived(self, at: float) -> None:
        """Real data came in at `at`."""
        self._anchor = max(self._anchor, at)

    def missing(self, now: float) -> int:
        if now - self._anchor < self.hold_s:
            return 0
        frames = round((now - self._anchor) * self.rate)
        self._anchor = now
        self.filled += frames
        return frames
