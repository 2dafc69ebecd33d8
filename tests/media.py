"""Make real media files for tests with PyAV + numpy (no ffmpeg binary, no system tools)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

# Encoders that FFmpeg still calls experimental need `strict=-2` to open.
_EXPERIMENTAL = {"vorbis", "opus"}


def has_encoder(name: str) -> bool:
    """True when this PyAV wheel's FFmpeg can encode with codec `name`."""
    try:
        av.codec.Codec(name, "w")
    except Exception:
        return False
    return True


def pick_encoder(*names: str) -> str:
    """The first encoder of `names` the wheel has; skips the calling test when none is there."""
    for name in names:
        if has_encoder(name):
            return name
    pytest.skip(f"no encoder among {names} in this PyAV wheel")
    raise AssertionError  # unreachable, for type checkers


def tone(
    seconds: float,
    rate: int,
    channels: int = 1,
    freqs: tuple[float, ...] = (440.0,),
    amplitude: float = 0.5,
) -> np.ndarray:
    """A sum of sines, float32, shape (channels, n); the first freq is dominant (others at 1/4)."""
    t = np.arange(round(seconds * rate)) / rate
    sig = np.sin(2 * np.pi * freqs[0] * t)
    for f in freqs[1:]:
        sig += 0.25 * np.sin(2 * np.pi * f * t)
    sig *= amplitude / np.max(np.abs(sig)) if len(sig) else 1.0
    return np.tile(sig.astype(np.float32), (channels, 1))


def write_media(
    path: Path,
    samples: np.ndarray | None,
    rate: int = 48000,
    codec: str | None = "pcm_s16le",
    *,
    container: str | None = None,
    video: str | None = None,
    seconds: float | None = None,
    bit_rate: int | None = None,
) -> Path:
    """Encode `samples` (float, shape (channels, n), values in [-1, 1]) into `path`.

    `container` is the FFmpeg muxer name (guessed from the suffix when None). `codec=None`
    writes no audio track. `video` names a video encoder: a small moving test picture is added
    for `seconds` (default: the audio's length). FFmpeg's encoder does the sample-format and
    frame-size conversion.
    """
    path = Path(path)
    with av.open(str(path), "w", format=container) as out:
        astream = vstream = None
        if video is not None:
            vstream = out.add_stream(video, rate=10)
            vstream.width, vstream.height, vstream.pix_fmt = 64, 48, "yuv420p"
        if codec is not None:
            assert samples is not None
            opts = {"strict": "-2"} if codec in _EXPERIMENTAL else {}
            astream = out.add_stream(codec, rate=rate, options=opts)
            astream.layout = "mono" if samples.shape[0] == 1 else "stereo"
            if bit_rate:
                astream.bit_rate = bit_rate
        if video is not None and seconds is None:
            seconds = 0.0 if samples is None else samples.shape[1] / rate

        if astream is not None and samples is not None:
            layout = "mono" if samples.shape[0] == 1 else "stereo"
            data = np.ascontiguousarray(samples, dtype=np.float32)
            step = 4096
            for start in range(0, data.shape[1], step):
                frame = av.AudioFrame.from_ndarray(
                    data[:, start : start + step], format="fltp", layout=layout
                )
                frame.sample_rate = rate
                frame.pts = start
                frame.time_base = Fraction(1, rate)
                out.mux(astream.encode(frame))
            out.mux(astream.encode(None))

        if vstream is not None:
            for i in range(round((seconds or 0.0) * 10)):
                img = np.zeros((48, 64, 3), np.uint8)
                img[:, (i * 4) % 64 :, 0] = 200
                img[(i * 3) % 48 :, :, 1] = 120
                frame = av.VideoFrame.from_ndarray(img, format="rgb24")
                frame.pts = i
                out.mux(vstream.encode(frame))
            out.mux(vstream.encode(None))
    return path
