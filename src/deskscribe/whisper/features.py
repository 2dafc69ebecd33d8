"""Whisper's log-mel spectrogram in numpy (the reference recipe of openai/whisper).

16 kHz audio, n_fft 400, hop 160, periodic Hann window, centred reflect-padded STFT with
the last frame dropped, power spectrum, Slaney mel filters, log10 clamped at 1e-10 and at
(max - 8), then (x + 4) / 4. One 30 s window gives 3000 frames.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..audio_format import SAMPLE_RATE

N_FFT = 400
HOP_LENGTH = 160
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000 samples in a window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 frames in a window
FRAME_SECONDS = HOP_LENGTH / SAMPLE_RATE  # 0.01 s per mel frame


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    f_sp = 200.0 / 3
    mel = hz / f_sp
    min_log_mel = 1000.0 / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(
        hz >= 1000.0, min_log_mel + np.log(np.maximum(hz, 1e-10) / 1000.0) / logstep, mel
    )


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    f_sp = 200.0 / 3
    min_log_mel = 1000.0 / f_sp
    logstep = np.log(6.4) / 27.0
    return np.where(mel >= min_log_mel, 1000.0 * np.exp(logstep * (mel - min_log_mel)), mel * f_sp)


@lru_cache(maxsize=4)
def mel_filters(n_mels: int) -> np.ndarray:
    """Slaney-normalised triangular filters, shape [n_mels, n_fft // 2 + 1]."""
    fft_freqs = np.linspace(0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(SAMPLE_RATE / 2), n_mels + 2))
    left, centre, right = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (fft_freqs[None, :] - left) / (centre - left)
    falling = (right - fft_freqs[None, :]) / (right - centre)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


@lru_cache(maxsize=1)
def _window() -> np.ndarray:
    n = np.arange(N_FFT)
    return (0.5 - 0.5 * np.cos(2 * np.pi * n / N_FFT)).astype(np.float32)


def log_mel(audio: np.ndarray, n_mels: int = 80, pad_to: int | None = N_SAMPLES) -> np.ndarray:
    """Log-mel of 16 kHz mono float32 audio, shape [n_mels, frames].

    ``pad_to`` zero-pads (or trims) the audio to that many samples first; the default gives
    exactly one 30 s window (3000 frames).
    """
    audio = np.asarray(audio, dtype=np.float32)
    if pad_to is not None:
        audio = audio[:pad_to]
        if audio.shape[0] < pad_to:
            audio = np.pad(audio, (0, pad_to - audio.shape[0]))
    half = N_FFT // 2
    padded = np.pad(audio, (half, half), mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH]
    spectrum = np.fft.rfft(frames * _window(), axis=-1)
    power = (spectrum.real**2 + spectrum.imag**2)[:-1].astype(np.float32)  # drop the last frame
    mel = mel_filters(n_mels) @ power.T
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)
