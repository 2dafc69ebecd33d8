"""Silero VAD: which parts of 16 kHz audio hold speech.

The model is ``silero_vad_16k_op15.onnx`` from the silero-vad 6.2.3 wheel (MIT, see
``assets/silero_vad.LICENSE``), shipped inside our package: the silero-vad package itself
depends on torch, which we never install. It is a small recurrent network run on 512-sample
frames (32 ms) with the previous frame's last 64 samples prepended and a [2, 1, 128] state
carried from frame to frame; it answers one speech probability per frame.

Two ways in, shaped like faster-whisper's ``vad.py``:
- ``speech_regions(audio)`` for a whole file (hysteresis, minimum lengths, padding);
- ``StreamingVAD`` for live audio: feed chunks of any size, get per-frame probabilities and
  ``speaking`` flips as they happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

SAMPLE_RATE = 16000
FRAME = 512  # samples per VAD frame at 16 kHz (32 ms)
CONTEXT = 64  # samples of the previous frame the model sees before each frame
MODEL_PATH = Path(__file__).resolve().parent.parent / "assets" / "silero_vad.onnx"


@dataclass
class VadOptions:
    threshold: float = 0.5  # a frame above this starts (or continues) speech
    neg_threshold: float | None = None  # below this ends speech; default threshold - 0.15
    min_speech_ms: int = 250  # shorter bursts are dropped
    min_silence_ms: int = 500  # a pause must last this long to end a region
    speech_pad_ms: int = 200  # kept on both sides of a region (clipped at neighbours)
    max_speech_s: float = float("inf")  # longer regions are cut at their quietest frame

    @property
    def off_threshold(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)


def silero_session(path: str | Path | None = None) -> ort.InferenceSession:
    """The Silero VAD model on one CPU thread (it is small; more threads only add overhead)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 3
    return ort.InferenceSession(str(path or MODEL_PATH), opts, providers=["CPUExecutionProvider"])


class SileroVAD:
    """The ONNX model with its running state; one instance per audio stream."""

    def __init__(self, path: str | Path | None = None) -> None:
        self._session = silero_session(path)
        self._sr = np.array(SAMPLE_RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(CONTEXT, dtype=np.float32)

    def frame_probability(self, frame: np.ndarray) -> float:
        """Speech probability of one 512-sample frame (continues from the previous frame)."""
        x = np.concatenate([self._context, np.asarray(frame, dtype=np.float32)])
        prob, self._state = self._session.run(
            None, {"input": x[None, :], "state": self._state, "sr": self._sr}
        )
        self._context = x[-CONTEXT:]
        return float(prob[0, 0])

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """Per-frame probabilities of a whole signal, from a fresh state (last frame zero-padded)."""
        self.reset()
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        n = -(-audio.shape[0] // FRAME)
        padded = np.zeros(n * FRAME, dtype=np.float32)
        padded[: audio.shape[0]] = audio
        return np.array(
            [self.frame_probability(padded[i * FRAME : (i + 1) * FRAME]) for i in range(n)],
            dtype=np.float32,
        )


def regions_from_probabilities(
    probs: np.ndarray, n_samples: int, options: VadOptions | None = None
) -> list[tuple[int, int]]:
    """Turn per-frame probabilities into [(start sample, end sample)] speech regions."""
    opt = options or VadOptions()
    on, off = opt.threshold, opt.off_threshold
    min_silence = opt.min_silence_ms * SAMPLE_RATE // 1000
    regions: list[list[int]] = []
    start: int | None = None
    silence_since: int | None = None
    for i, p in enumerate(probs):
        pos = i * FRAME
        if start is None:
            if p >= on:
                start, silence_since = pos, None
            continue
        if p >= on:
            silence_since = None
        elif p < off:
            if silence_since is None:
                silence_since = pos
            if pos + FRAME - silence_since >= min_silence:
                regions.append([start, silence_since])
                start, silence_since = None, None
    if start is not None:
        regions.append([start, n_samples if silence_since is None else silence_since])
    regions = _split_long(regions, probs, opt)
    min_speech = opt.min_speech_ms * SAMPLE_RATE // 1000
    regions = [r for r in regions if r[1] - r[0] >= min_speech]
    pad = opt.speech_pad_ms * SAMPLE_RATE // 1000
    for i, r in enumerate(regions):
        lo = 0 if i == 0 else (regions[i - 1][1] + r[0]) // 2
        hi = n_samples if i == len(regions) - 1 else (r[1] + regions[i + 1][0]) // 2
        r[0], r[1] = max(lo, r[0] - pad), min(hi, r[1] + pad)
    return [(int(a), int(b)) for a, b in regions]


def _split_long(regions: list[list[int]], probs: np.ndarray, opt: VadOptions) -> list[list[int]]:
    if opt.max_speech_s == float("inf"):
        return regions
    limit = int(opt.max_speech_s * SAMPLE_RATE)
    out: list[list[int]] = []
    for start, end in regions:
        while end - start > limit:
            lo, hi = (start + limit // 2) // FRAME, (start + limit) // FRAME
            cut = (lo + int(np.argmin(probs[lo:hi]))) * FRAME
            out.append([start, cut])
            start = cut
        out.append([start, end])
    return out


def speech_regions(
    audio: np.ndarray, options: VadOptions | None = None, vad: SileroVAD | None = None
) -> list[tuple[int, int]]:
    """Speech regions of a 16 kHz mono signal as [(start sample, end sample)]."""
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    probs = (vad or SileroVAD()).probabilities(audio)
    return regions_from_probabilities(probs, audio.shape[0], options)


class StreamingVAD:
    """Live VAD: ``feed`` any number of samples; the speech state follows with hysteresis.

    ``speaking`` turns on at the first frame above ``threshold`` and off once the signal has
    stayed below ``off_threshold`` for ``min_silence_ms``. ``silence_samples`` says how long
    the current pause has lasted (0 while speaking).
    """

    def __init__(self, options: VadOptions | None = None, vad: SileroVAD | None = None) -> None:
        self.options = options or VadOptions()
        self._vad = vad or SileroVAD()
        self._pending = np.zeros(0, dtype=np.float32)
        self.samples = 0  # samples judged so far (whole frames)
        self.speaking = False
        self.speech_start: int | None = None  # sample where the current utterance began
        self.last_speech = -1  # end sample of the last frame above the threshold
        self.last_probability = 0.0

    @property
    def silence_samples(self) -> int:
        return 0 if self.last_speech < 0 else self.samples - self.last_speech

    def feed(self, audio: np.ndarray) -> list[tuple[str, int]]:
        """Judge the new samples; return [("start"|"end", sample)] state changes."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        self._pending = np.concatenate([self._pending, audio]) if self._pending.size else audio
        events: list[tuple[str, int]] = []
        opt = self.options
        min_silence = opt.min_silence_ms * SAMPLE_RATE // 1000
        while self._pending.shape[0] >= FRAME:
            frame, self._pending = self._pending[:FRAME], self._pending[FRAME:]
            p = self._vad.frame_probability(frame)
            self.last_probability = p
            start = self.samples
            self.samples += FRAME
            if p >= opt.threshold:
                self.last_speech = self.samples
                if not self.speaking:
                    self.speaking, self.speech_start = True, start
                    events.append(("start", start))
            elif (
                self.speaking
                and p < opt.off_threshold
                and self.samples - self.last_speech >= min_silence
            ):
                self.speaking = False
                events.append(("end", self.last_speech))
        return events
