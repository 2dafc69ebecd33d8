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
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnxruntime as ort

from ..audio_format import SAMPLE_RATE

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


_CPU = "CPUExecutionProvider"


def _session_options() -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.enable_cpu_mem_arena = False
    opts.log_severity_level = 3
    return opts


def silero_session(path: str | Path | None = None) -> ort.InferenceSession:
    """The Silero VAD model on one CPU thread (it is small; more threads only add overhead)."""
    return ort.InferenceSession(str(path or MODEL_PATH), _session_options(), providers=[_CPU])


# Where the shipped model's stateless part ends: everything before its LSTM depends on one
# frame (with its context) alone.
_ENCODER_OUT = "/model/encoder/3/activation/Relu_output_0"
_HIDDEN = 128


@lru_cache(maxsize=1)
def _sequence_sessions() -> tuple[ort.InferenceSession, ort.InferenceSession, np.ndarray]:
    """The shipped model cut in two: its frame encoder (convolutions, any number of frames in
    one run) and its LSTM as an ONNX ``LSTM`` over a whole sequence of frames (one run for
    all of them). Returns (encoder, lstm, output layer [128 weights + bias])."""
    from ..graph_cache import cached

    opts = _session_options()

    def load(blobs: list[bytes]):
        encoder, lstm, out = blobs
        return (
            ort.InferenceSession(encoder, opts, providers=[_CPU]),
            ort.InferenceSession(lstm, opts, providers=[_CPU]),
            np.frombuffer(out, np.float32).copy(),
        )

    return cached("silero-split", _split_model, load, MODEL_PATH.stat().st_size)


def _split_model(_size: int) -> list[bytes]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(MODEL_PATH))
    inferred = onnx.shape_inference.infer_shapes(model)
    encoder = onnx.utils.Extractor(inferred).extract_model(["input"], [_ENCODER_OUT])
    w = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def gates(x: np.ndarray) -> np.ndarray:  # PyTorch's i, f, g, o -> ONNX's i, o, f, c
        h = _HIDDEN
        return np.concatenate([x[:h], x[3 * h :], x[h : 2 * h], x[2 * h : 3 * h]])

    ih, hh = w["model.decoder.rnn.weight_ih"], w["model.decoder.rnn.weight_hh"]
    bias = np.concatenate(
        [gates(w["model.decoder.rnn.bias_ih"]), gates(w["model.decoder.rnn.bias_hh"])]
    )
    inits = [
        numpy_helper.from_array(gates(ih)[None].astype(np.float32), "W"),
        numpy_helper.from_array(gates(hh)[None].astype(np.float32), "R"),
        numpy_helper.from_array(bias[None].astype(np.float32), "B"),
    ]
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("LSTM", ["x", "W", "R", "B", "", "h0", "c0"], ["y", "h", "c"],
                          hidden_size=_HIDDEN)],
        "silero_lstm",
        [helper.make_tensor_value_info("x", f, ["frames", 1, _HIDDEN]),
         helper.make_tensor_value_info("h0", f, [1, 1, _HIDDEN]),
         helper.make_tensor_value_info("c0", f, [1, 1, _HIDDEN])],
        [helper.make_tensor_value_info("y", f, ["frames", 1, 1, _HIDDEN]),
         helper.make_tensor_value_info("h", f, [1, 1, _HIDDEN]),
         helper.make_tensor_value_info("c", f, [1, 1, _HIDDEN])],
        inits,
    )  # fmt: skip
    lstm = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    out = np.concatenate(
        [w["model.decoder.decoder.2.weight"].reshape(-1), w["model.decoder.decoder.2.bias"]]
    ).astype(np.float32)
    return [encoder.SerializeToString(), lstm.SerializeToString(), out.tobytes()]


class SequenceVAD:
    """Silero VAD over a stream, every whole frame received so far in two model runs.

    The same network as ``SileroVAD``, frame for frame, but its frame encoder runs on all the
    frames at once (a batch) and its LSTM over them as one sequence, instead of one model run
    per frame: on the bench recording 1.06 CPU-seconds per 10 minutes, 2.35 frame by frame.
    """

    BATCH = 2048  # frames per encoder run (about a minute; bounds the encoder's memory)

    def __init__(self) -> None:
        self.encoder, self.lstm, self.out = _sequence_sessions()
        self.h = np.zeros((1, 1, _HIDDEN), dtype=np.float32)
        self.c = np.zeros((1, 1, _HIDDEN), dtype=np.float32)
        self.context = np.zeros(CONTEXT, dtype=np.float32)
        self.pending = np.zeros(0, dtype=np.float32)

    def feed(self, block: np.ndarray) -> np.ndarray:
        """Probabilities of the whole frames now received (the rest waits for more audio)."""
        block = np.asarray(block, dtype=np.float32).reshape(-1)
        self.pending = np.concatenate([self.pending, block]) if self.pending.size else block
        n = self.pending.shape[0] // FRAME
        if n == 0:
            return np.zeros(0, dtype=np.float32)
        audio = self.pending[: n * FRAME]
        self.pending = self.pending[n * FRAME :].copy()  # not a view that keeps ``block`` alive
        return self._run(audio)

    def finish(self) -> np.ndarray:
        """Probabilities of what is left (the last frame zero-padded)."""
        if self.pending.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        audio = np.zeros(FRAME, dtype=np.float32)
        audio[: self.pending.shape[0]] = self.pending
        self.pending = np.zeros(0, dtype=np.float32)
        return self._run(audio)

    def _run(self, audio: np.ndarray) -> np.ndarray:
        frames = audio.reshape(-1, FRAME)
        # Each frame with the last CONTEXT samples before it, as the model is fed one by one.
        before = np.concatenate([self.context[None], frames[:-1, -CONTEXT:]])
        x = np.concatenate([before, frames], axis=1)
        self.context = frames[-1, -CONTEXT:].copy()
        feats = np.concatenate(
            [
                self.encoder.run(None, {"input": x[i : i + self.BATCH]})[0]
                for i in range(0, x.shape[0], self.BATCH)
            ]
        )
        seq = feats.reshape(feats.shape[0], 1, _HIDDEN)
        y, self.h, self.c = self.lstm.run(None, {"x": seq, "h0": self.h, "c0": self.c})
        logit = np.maximum(y[:, 0, 0], 0.0) @ self.out[:_HIDDEN] + self.out[_HIDDEN]
        return (1.0 / (1.0 + np.exp(-logit))).astype(np.float32)


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
        """Per-frame probabilities of a whole signal, from a fresh state (last frame zero-padded):
        ``speech_probabilities``."""
        self.reset()
        return speech_probabilities(audio)


def speech_probabilities(audio: np.ndarray) -> np.ndarray:
    """Per-frame speech probabilities of a whole signal (last frame zero-padded), through
    ``SequenceVAD``: the same figures as frame by frame, about twice as fast.

    Fed a minute at a time, so memory stays that of a minute whatever the length: one run
    over a whole hour held its frames with their context, the encoder's features and the
    LSTM's sequence at once (several hundred MiB more at the peak)."""
    vad = SequenceVAD()
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    step = SequenceVAD.BATCH * FRAME
    parts = [vad.feed(audio[i : i + step]) for i in range(0, audio.shape[0], step)]
    return np.concatenate([*parts, vad.finish()])


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
