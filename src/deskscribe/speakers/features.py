"""The input features of the speaker-embedding models, in numpy.

* Resemblyzer: ``librosa.feature.melspectrogram`` as its ``audio.wav_to_mel_spectrogram``
  calls it: n_fft 400 (25 ms), hop 160 (10 ms), periodic Hann, centred STFT zero-padded
  (librosa >= 0.10's ``pad_mode="constant"``), power 2, 40 Slaney mel filters, no log.
  Shape ``[frames, 40]`` with ``frames = 1 + samples // 160``.
* WeSpeaker: Kaldi ``compute-fbank-feats`` as ``torchaudio.compliance.kaldi.fbank`` and
  kaldi-native-fbank compute it: 25 ms / 10 ms frames without edge padding (snip_edges),
  samples scaled to the int16 range, no dither, DC removed per frame, pre-emphasis 0.97,
  Povey window (pyannote's WeSpeaker front end: a symmetric Hamming one,
  ``window="hamming"``), FFT of 512, power spectrum, 80 triangular mel bins
  (1127 ln(1 + f/700)) from 20 Hz to 8 kHz, natural log floored at float32 epsilon; then the mean over time
  subtracted (CMN), as WeSpeaker's own front end does.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..audio_format import SAMPLE_RATE
from ..whisper.features import mel_filters

HOP = 160  # 10 ms, both models
WINDOW = 400  # 25 ms, both models
RESEMBLYZER_MELS = 40
FBANK_BINS = 80
FBANK_FFT = 512
_FLOAT_EPS = float(np.finfo(np.float32).eps)


# --------------------------------------------------------------------------- Resemblyzer


@lru_cache(maxsize=1)
def _hann() -> np.ndarray:
    n = np.arange(WINDOW)
    return 0.5 - 0.5 * np.cos(2 * np.pi * n / WINDOW)  # periodic, as scipy's fftbins=True


def mel_power(audio: np.ndarray, n_mels: int = RESEMBLYZER_MELS) -> np.ndarray:
    """Resemblyzer's mel frames of a whole signal: centred, zero-padded; ``[frames, n_mels]``."""
    audio = np.asarray(audio, dtype=np.float32)
    half = WINDOW // 2
    return mel_power_frames(np.pad(audio, (half, half)), n_mels)


def mel_power_span(audio: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The frames of :func:`mel_power` of the whole ``audio`` whose centres lie in
    ``[start, stop)``, computed from that stretch and its real neighbours only."""
    first = -(-start // HOP)
    end = -(-stop // HOP)  # one past the last frame centre inside the span
    if end <= first:
        return np.zeros((0, RESEMBLYZER_MELS), np.float32)
    lo, hi = first * HOP - WINDOW // 2, (end - 1) * HOP + WINDOW // 2
    piece = np.asarray(audio[max(lo, 0) : min(hi, len(audio))], dtype=np.float32)
    piece = np.pad(piece, (max(-lo, 0), max(hi - len(audio), 0)))
    return mel_power_frames(piece)


def mel_power_frames(padded: np.ndarray, n_mels: int = RESEMBLYZER_MELS) -> np.ndarray:
    """Mel power of every full 400-sample frame of ``padded``, 160 samples apart."""
    if len(padded) < WINDOW:
        return np.zeros((0, n_mels), np.float32)
    frames = np.lib.stride_tricks.sliding_window_view(padded, WINDOW)[::HOP]
    spectrum = np.fft.rfft(frames * _hann(), axis=-1)
    power = spectrum.real**2 + spectrum.imag**2
    return (power @ mel_filters(n_mels).T.astype(np.float64)).astype(np.float32)


# --------------------------------------------------------------------------- Kaldi fbank


def _kaldi_mel(hz: np.ndarray) -> np.ndarray:
    return 1127.0 * np.log(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


@lru_cache(maxsize=2)
def kaldi_mel_banks(n_bins: int = FBANK_BINS, low_hz: float = 20.0) -> np.ndarray:
    """Kaldi's triangular mel filters over FFT bins 0..255 (Nyquist unused): ``[256, n_bins]``."""
    n_fft_bins = FBANK_FFT // 2
    mel = _kaldi_mel(np.arange(n_fft_bins) * SAMPLE_RATE / FBANK_FFT)
    lo, hi = _kaldi_mel(low_hz), _kaldi_mel(SAMPLE_RATE / 2)
    delta = (hi - lo) / (n_bins + 1)
    left = lo + np.arange(n_bins) * delta
    centre, right = left + delta, left + 2 * delta
    rising = (mel[:, None] - left) / (centre - left)
    falling = (right - mel[:, None]) / (right - centre)
    inside = (mel[:, None] > left) & (mel[:, None] < right)
    return np.where(inside, np.where(mel[:, None] <= centre, rising, falling), 0.0)


@lru_cache(maxsize=1)
def _povey() -> np.ndarray:
    n = np.arange(WINDOW)
    return (0.5 - 0.5 * np.cos(2 * np.pi * n / (WINDOW - 1))) ** 0.85


@lru_cache(maxsize=1)
def _hamming() -> np.ndarray:
    n = np.arange(WINDOW)
    return 0.54 - 0.46 * np.cos(2 * np.pi * n / (WINDOW - 1))  # symmetric, as Kaldi's


def kaldi_fbank(audio: np.ndarray, n_bins: int = FBANK_BINS, window: str = "povey") -> np.ndarray:
    """Log mel filterbank energies of 16 kHz float audio (-1..1), ``[frames, n_bins]``.

    ``frames = 1 + (samples - 400) // 160`` (none for less than 25 ms). No mean removal.
    """
    x = np.asarray(audio, dtype=np.float64) * 32768.0
    if len(x) < WINDOW:
        return np.zeros((0, n_bins), np.float32)
    frames = np.lib.stride_tricks.sliding_window_view(x, WINDOW)[::HOP]
    frames = frames - frames.mean(axis=1, keepdims=True)
    emphasised = np.empty_like(frames)
    emphasised[:, 1:] = frames[:, 1:] - 0.97 * frames[:, :-1]
    emphasised[:, 0] = frames[:, 0] * (1.0 - 0.97)
    taper = _hamming() if window == "hamming" else _povey()
    spectrum = np.fft.rfft(emphasised * taper, n=FBANK_FFT, axis=-1)[:, : FBANK_FFT // 2]
    power = spectrum.real**2 + spectrum.imag**2
    energies = power @ kaldi_mel_banks(n_bins)
    return np.log(np.maximum(energies, _FLOAT_EPS)).astype(np.float32)


def wespeaker_features(
    audio: np.ndarray, n_bins: int = FBANK_BINS, window: str = "povey"
) -> np.ndarray:
    """WeSpeaker's input: :func:`kaldi_fbank` with its mean over time subtracted."""
    feats = kaldi_fbank(audio, n_bins, window)
    if len(feats):
        feats = feats - feats.mean(axis=0, keepdims=True)
    return feats
