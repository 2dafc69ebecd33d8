"""Which Whisper model this computer runs well, measured here rather than guessed from the
number of cores.

A 30 s window's encoder is most of what a window costs on a CPU (83 % on the turbo shape,
``bench/turbo_shape.py``), and it depends on the CPU's int8 kernels, its cache and its
memory, which the core count does not tell. So for each candidate this builds the encoder of
its exact width (int8, as the app runs it on a CPU) with one and with three layers and random
weights, times one window with each, and extrapolates to the model's depth (the layers are
identical: the time grows by the same step per layer). A few seconds per candidate, no
download.

The recommendation: the most accurate candidate whose live captions keep up (its window
encodes in ``LIVE_ENCODER_S`` or less: a live pass is the encoder plus about 70 % more for
decoding, tiny.en int8: 290 of 490 ms, and keeps up with a pass of about 1.7 s); and, for
files alone, the most accurate one that still runs ``FILES_SPEED``x faster than real time
(window encoder at most ``30 / FILES_SPEED / 1.25`` s; the decoder adds about 20 % on the
turbo shape).

distil-large-v3 (in the catalog, English only) is not a candidate: its encoder is large-v3's,
32 layers of 1280 like turbo's, and only its decoder is smaller (2 layers against turbo's
4), so on a CPU, where the encoder is most of a window, it runs about as fast as turbo and
would never be the one that fits where turbo does not.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import Cancelled, Progress
from ..whisper.weights import Checkpoint, Dims

# The candidates for a CPU, least to most accurate, with their real shapes.
CANDIDATES: dict[str, Dims] = {
    "tiny": Dims(80, 51865, 1500, 384, 6, 4, 448, 384, 6, 4),
    "base": Dims(80, 51865, 1500, 512, 8, 6, 448, 512, 8, 6),
    "small": Dims(80, 51865, 1500, 768, 12, 12, 448, 768, 12, 12),
    "large-v3-turbo": Dims(128, 51866, 1500, 1280, 20, 32, 448, 1280, 20, 4),
}
DEPTH = 3  # the deeper of the two cut encoders: the step per layer from 1 to 3 layers
LIVE_ENCODER_S = 1.0
FILES_SPEED = 4.0
DECODER_SHARE = 1.25  # a window's whole cost over its encoder's, for files (turbo shape)
FILES_ENCODER_S = 30.0 / FILES_SPEED / DECODER_SHARE


class MeasureCancelled(Cancelled):
    """The measurement was cancelled."""


@dataclass(frozen=True)
class Measured:
    """Seconds to encode one 30 s window, per candidate, on this computer."""

    encoder_s: dict[str, float]
    threads: int

    def speed(self, model: str) -> float:
        """How many times faster than real time a file runs (estimated from the encoder)."""
        return 30.0 / (self.encoder_s[model] * DECODER_SHARE)


@dataclass(frozen=True)
class MeasuredChoice:
    model: str  # the most accurate model whose live captions keep up
    files_model: str  # the most accurate model for files alone (the same or larger)
    reason: str
    measured: Measured


def _shape(name: str, d: Dims) -> tuple[int, ...]:
    """The shape of a canonical tensor (``weights.canonical_names``) of a model of dims ``d``."""
    a = d.n_audio_state
    if name == "enc.conv1.w":
        return (a, d.n_mels, 3)
    if name == "enc.conv2.w":
        return (a, a, 3)
    if name == "enc.pos":
        return (d.n_audio_ctx, a)
    width = a if name.startswith("enc.") or ".cross." in name else d.n_text_state
    if name.endswith("mlp1.w"):
        return (4 * width, width)
    if name.endswith("mlp1.b"):
        return (4 * width,)
    if name.endswith("mlp2.w"):
        return (width, 4 * width)
    if name.endswith(".w"):
        return (width, width)
    return (width,)


def random_checkpoint(dims: Dims, seed: int = 0) -> Checkpoint:
    """A checkpoint of ``dims`` with small random weights (any tensor name, made on demand)."""
    rng = np.random.default_rng(seed)

    class Tensors(dict):
        def __missing__(self, name: str):
            return lambda: (rng.standard_normal(_shape(name, dims)) * 0.02).astype(np.float32)

    return Checkpoint(dims, Tensors(), kind="random")


def time_encoder(dims: Dims, layers: int, threads: int, folder: Path, runs: int = 3) -> float:
    """Fastest of ``runs`` passes of one 30 s window through an int8 encoder of ``dims`` cut
    to ``layers`` layers (built in ``folder``), after one run to warm it up. The fastest, not
    the median: other programs only ever add time."""
    import onnxruntime as ort

    from ..whisper.graph import build_encoder
    from ..whisper.runtime import CPU, session_options

    cut = Dims(**{**dims.to_dict(), "n_audio_layer": layers})
    path = folder / f"encoder-{dims.n_audio_state}-{layers}.onnx"
    build_encoder(random_checkpoint(cut), path, "int8")
    session = ort.InferenceSession(str(path), session_options(CPU, threads), providers=[CPU])
    mel = np.random.default_rng(1).standard_normal((1, dims.n_mels, 3000)).astype(np.float32)
    session.run(None, {"mel": mel})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, {"mel": mel})
        times.append(time.perf_counter() - start)
    return min(times)


def measure(
    threads: int = 0,
    candidates: list[str] | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Measured:
    """Encoder seconds per 30 s window of each candidate on this CPU (``threads``: 0 = all)."""
    names = candidates or list(CANDIDATES)
    work = Path(tempfile.mkdtemp(prefix="deskscribe-measure-"))
    out: dict[str, float] = {}
    try:
        for i, name in enumerate(names):
            if cancel is not None and cancel.is_set():
                raise MeasureCancelled("measuring this computer was cancelled")
            if progress is not None:
                progress(i, len(names), name)
            dims = CANDIDATES[name]
            one = time_encoder(dims, 1, threads, work)
            more = time_encoder(dims, DEPTH, threads, work)
            per_layer = max(more - one, 0.0) / (DEPTH - 1)
            out[name] = one + (dims.n_audio_layer - 1) * per_layer
            for f in work.iterdir():
                f.unlink()
        if progress is not None:
            progress(len(names), len(names), "")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return Measured(out, threads)


def choose(measured: Measured) -> MeasuredChoice:
    """The recommendation from a measurement, with the measured figures in its sentence."""
    order = [m for m in CANDIDATES if m in measured.encoder_s]
    t = measured.encoder_s
    live = [m for m in order if t[m] <= LIVE_ENCODER_S]
    files = [m for m in order if t[m] <= FILES_ENCODER_S]
    model = live[-1] if live else order[0]
    files_model = files[-1] if files else model
    files_model = max(model, files_model, key=order.index)
    reason = (
        f"Measured on this computer: Whisper {model} encodes a 30 s window in {t[model]:.2f} s, "
        + (
            "so live captions keep up"
            if model in live
            else f"the fastest here, though live captions may lag (over {LIVE_ENCODER_S:.1f} s)"
        )
        + f" and a file runs about {measured.speed(model):.0f}x faster than real time."
    )
    if files_model != model:
        reason += (
            f" For files alone, {files_model} is more accurate: {t[files_model]:.1f} s a window "
            f"here, about {measured.speed(files_model):.0f}x real time (download it from Models)."
        )
    return MeasuredChoice(model, files_model, reason, measured)


def measure_and_choose(
    threads: int = 0,
    progress: Callable[[float, float, str], None] | None = None,
    cancel: threading.Event | None = None,
) -> MeasuredChoice:
    return choose(measure(threads, progress=progress, cancel=cancel))
