"""Speaker embeddings: a speaker model folder run by our ONNX Runtime wrapper.

A speaker model folder holds ``manifest.json`` (``"task": "speaker-embedding"``, ``"kind"``,
optionally ``"thresholds"``: the clustering thresholds measured for this model by
``bench/speakers.py --calibrate``) and one ONNX file. Two kinds:

* ``resemblyzer``: the voice encoder of the Resemblyzer wheel, converted by
  :mod:`deskscribe.speakers.convert` (mel power frames [B, T, 40] + lengths → [B, 256]).
* ``wespeaker``: a WeSpeaker ONNX export (ResNet34-LM): CMN'd Kaldi fbank [B, T, 80] →
  [B, 256]. Input/output names and sizes are read from the file.

All embeddings are float32 and L2-normalised, so a dot product is the cosine similarity.

Windows for :meth:`SpeakerEncoder.embed_windows` are sample ranges of one 16 kHz signal.
They are clipped to the signal; an empty one is an error. A window shorter than
``min_window_seconds`` is padded to that length, the way each model's own code pads:

* Resemblyzer (1.6 s): zero frames after the window's frames, as its ``embed_utterance``
  pads short audio. Measured on four espeak-ng voices, 0.2 s windows told same from
  different voices better padded with zeros (pairwise AUC 0.97) than repeated (0.94).
  The frames see their real neighbouring samples; a window longer than 1.6 s is the
  average of its 1.6 s partials (1.3 per second, the last one aligned to the window's end).
  The volume is raised as Resemblyzer's ``preprocess_wav`` does (to -30 dBFS, never
  lowered), with one gain for the whole ``audio`` passed in.
* WeSpeaker (0.5 s): the window's own samples repeated, as WeSpeaker's training pads
  short utterances; each window is then seen whole, with its own mean normalisation.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnxruntime as ort

from ..audio_format import SAMPLE_RATE
from ..errors import DeskScribeError
from ..fsutil import UnsafePathError, inside
from ..whisper.model import RUN_ERRORS
from ..whisper.runtime import Runtime, engine_errors
from . import features

T = TypeVar("T")
MANIFEST = "manifest.json"
TASK = "speaker-embedding"
KINDS = ("resemblyzer", "wespeaker")
# Resemblyzer's embed_utterance defaults: 1.6 s partials, 1.3 per second, last one kept
# when at least 75 % of it is real audio.
PARTIAL_RATE = 1.3
MIN_COVERAGE = 0.75
PARTIAL_STEP = round(SAMPLE_RATE / PARTIAL_RATE / features.HOP)  # 77 frames
TARGET_DBFS = -30.0  # Resemblyzer's audio_norm_target_dBFS (volume raised, never lowered)
MAX_GAIN_DB = 50.0  # near-silence is not blown up into noise
WESPEAKER_MAX_SECONDS = 20.0  # embed(): longer audio is embedded in pieces and averaged


class SpeakerModelError(DeskScribeError):
    """The folder does not hold a usable speaker model (the message says what to do)."""


def read_manifest(folder: Path) -> dict:
    """The manifest of a speaker model folder, or :class:`SpeakerModelError`."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise SpeakerModelError(
            f"{folder} is not a speaker model ({err}); install one with "
            "`deskscribe models install-speaker-starter` or `deskscribe models download wespeaker`"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("task") != TASK:
        raise SpeakerModelError(
            f'{folder / MANIFEST} is not a speaker model\'s manifest (no "task": "{TASK}"); '
            "install the speaker model again with --overwrite"
        )
    if manifest.get("kind") not in KINDS:
        raise SpeakerModelError(
            f"{folder / MANIFEST}: speaker model kind {manifest.get('kind')!r} is not one this "
            f"version knows ({', '.join(KINDS)}); update DeskScribe or install another model"
        )
    return manifest


class SpeakerEncoder:
    """``SpeakerEncoder(folder, device="cpu")``; ``embed(audio)``, ``embed_windows(audio, windows)``."""

    def __init__(self, folder: str | Path, device: str = "cpu", threads: int = 0) -> None:
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.kind: str = self.manifest["kind"]
        self.name: str = self.manifest.get("name", self.folder.name)
        # Thresholds measured for this model (bench/speakers.py --calibrate), used instead
        # of the table's for its kind (cluster.threshold_for).
        stored = self.manifest.get("thresholds")
        self.thresholds: dict = stored if isinstance(stored, dict) else {}
        self.sample_rate: int = int(self.manifest.get("sample_rate", SAMPLE_RATE))
        if self.sample_rate != SAMPLE_RATE:
            raise SpeakerModelError(f"{self.folder}: only 16 kHz speaker models are supported")
        try:
            self.onnx_path = inside(
                self.folder, str(self.manifest.get("onnx_file", "encoder.onnx")), resolve=False
            )
        except UnsafePathError as err:
            raise SpeakerModelError(f"{self.folder}: {err}") from None
        if not self.onnx_path.is_file():
            raise SpeakerModelError(
                f"{self.onnx_path} is missing; install the speaker model again with --overwrite"
            )
        self.runtime = Runtime(device=device, threads=threads)
        self._lock = threading.Lock()
        self.session = _open_checked(self.runtime, self.onnx_path)
        if self.kind == "resemblyzer":
            self.partial_frames = int(self.manifest.get("partial_frames", 160))
            self.window_seconds = self.partial_frames * features.HOP / SAMPLE_RATE  # 1.6 s
            self.min_window_seconds = self.window_seconds
            self.dim = int(self.manifest["embedding_dim"])
        else:
            self._inspect_wespeaker()
            self.window_seconds = 1.5
            self.min_window_seconds = 0.5

    # ------------------------------------------------------------------ public

    def embed(self, audio: np.ndarray) -> np.ndarray:
        """One embedding ``[dim]`` for a whole utterance (16 kHz mono float32)."""
        audio = _mono(audio)
        if len(audio) == 0:
            raise ValueError("cannot embed empty audio")
        if self.kind == "resemblyzer":
            return self._embed_utterance(audio)
        pieces = max(1, int(np.ceil(len(audio) / (WESPEAKER_MAX_SECONDS * SAMPLE_RATE))))
        bounds = np.linspace(0, len(audio), pieces + 1).astype(int)
        windows = [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        embeds = self.embed_windows(audio, windows)
        return _normalise(np.average(embeds, axis=0, weights=np.diff(bounds)))

    def volume_gain(self, audio: np.ndarray) -> float:
        """The gain ``embed_windows`` applies to ``audio`` before embedding it: Resemblyzer
        normalises the volume of the whole recording (so a window's embedding depends a
        little on the rest), WeSpeaker embeds the samples as they are (1.0)."""
        return _gain(_mono(audio)) if self.kind == "resemblyzer" else 1.0

    def embed_windows(
        self,
        audio: np.ndarray,
        windows: Sequence[tuple[int, int]],
        batch_size: int = 32,
        *,
        gain: float | None = None,
    ) -> np.ndarray:
        """Embeddings ``[N, dim]`` of sample ranges ``(start, stop)`` of ``audio`` (16 kHz);
        ``gain``: the volume gain to use instead of ``volume_gain(audio)``."""
        audio = _mono(audio)
        clipped = []
        for start, stop in windows:
            a, b = max(int(start), 0), min(int(stop), len(audio))
            if b <= a:
                raise ValueError(f"window ({start}, {stop}) holds no audio of {len(audio)} samples")
            clipped.append((a, b))
        if not clipped:
            return np.zeros((0, self.dim), np.float32)
        if self.kind == "resemblyzer":
            gain = _gain(audio) if gain is None else gain
            return self._resemblyzer_windows(audio, clipped, batch_size, gain)
        return self._wespeaker_windows(audio, clipped, batch_size)

    # ------------------------------------------------------------------ Resemblyzer

    def _embed_utterance(self, audio: np.ndarray) -> np.ndarray:
        """Resemblyzer's ``embed_utterance`` (after its volume normalisation)."""
        audio = audio * _gain(audio)
        n = self.partial_frames
        step = PARTIAL_STEP
        n_frames = int(np.ceil((len(audio) + 1) / features.HOP))
        starts = list(range(0, max(1, n_frames - n + step + 1), step))
        coverage = (len(audio) - starts[-1] * features.HOP) / (n * features.HOP)
        if coverage < MIN_COVERAGE and len(starts) > 1:
            starts.pop()
        end = (starts[-1] + n) * features.HOP
        if end >= len(audio):
            audio = np.pad(audio, (0, end - len(audio)))
        mel = features.mel_power(audio)
        partials = [mel[s : s + n] for s in starts]
        return _normalise(self._run_mels(partials, len(partials)).mean(axis=0))

    def _resemblyzer_windows(
        self, audio: np.ndarray, windows: list[tuple[int, int]], batch_size: int, gain: float
    ) -> np.ndarray:
        gain2 = np.float32(gain**2)  # mel is a power: scale by the gain squared
        owners, sequences = [], []
        for i, (a, b) in enumerate(windows):
            for piece in self._partials(features.mel_power_span(audio, a, b)):
                owners.append(i)
                sequences.append(piece * gain2)
        embeds = self._run_mels(sequences, batch_size)
        out = np.zeros((len(windows), self.dim), np.float64)
        np.add.at(out, np.asarray(owners), embeds)
        return _normalise(out)

    def _partials(self, mel: np.ndarray) -> list[np.ndarray]:
        """A window's frames as one sequence, or as 160-frame partials when longer."""
        n = self.partial_frames
        if len(mel) <= n:  # zero frames after the audio, as embed_utterance pads short audio
            return [np.pad(mel, ((0, n - len(mel)), (0, 0)))]
        step = PARTIAL_STEP
        starts = list(range(0, len(mel) - n + 1, step))
        if starts[-1] + n < len(mel):
            starts.append(len(mel) - n)  # the tail, aligned to the end: no zero padding
        return [mel[s : s + n] for s in starts]

    def _run_mels(self, sequences: list[np.ndarray], batch_size: int) -> np.ndarray:
        """Run variable-length mel sequences through the LSTM in batches (longest first)."""
        order = np.argsort([-len(s) for s in sequences], kind="stable")
        out = np.zeros((len(sequences), self.dim), np.float32)
        for lo in range(0, len(order), max(1, batch_size)):
            idx = order[lo : lo + batch_size]
            lengths = np.array([len(sequences[i]) for i in idx], np.int32)
            batch = np.zeros((len(idx), int(lengths.max()), sequences[idx[0]].shape[1]), np.float32)
            for row, i in enumerate(idx):
                batch[row, : lengths[row]] = sequences[i]
            feeds = {"mels": batch, "lengths": lengths}
            out[idx] = self._run(lambda s, f=feeds: s.run(["embedding"], f)[0])
        return out

    # ------------------------------------------------------------------ WeSpeaker

    def _inspect_wespeaker(self) -> None:
        inputs, outputs = self.session.get_inputs(), self.session.get_outputs()
        if len(inputs) != 1 or len(inputs[0].shape) != 3 or not outputs:
            raise SpeakerModelError(
                f"{self.onnx_path} does not look like a WeSpeaker export (one input [B, T, 80])"
            )
        self.input_name: str = inputs[0].name
        self.output_name: str = outputs[0].name
        bins = inputs[0].shape[2]
        self.n_mels: int = bins if isinstance(bins, int) else int(self.manifest.get("n_mels", 80))
        dim = outputs[0].shape[-1]
        if not isinstance(dim, int):
            feeds = {self.input_name: np.zeros((1, 200, self.n_mels), np.float32)}
            dim = self._run(lambda s: s.run([self.output_name], feeds)[0]).shape[-1]
        self.dim = int(dim)

    def _wespeaker_windows(
        self, audio: np.ndarray, windows: list[tuple[int, int]], batch_size: int
    ) -> np.ndarray:
        min_len = max(int(self.min_window_seconds * SAMPLE_RATE), features.WINDOW)
        feats = []
        for a, b in windows:
            piece = audio[a:b] if b - a >= min_len else np.resize(audio[a:b], min_len)
            feats.append(features.wespeaker_features(piece, self.n_mels))
        out = np.zeros((len(windows), self.dim), np.float32)
        by_length: dict[int, list[int]] = {}
        for i, f in enumerate(feats):
            by_length.setdefault(len(f), []).append(i)
        for idx_all in by_length.values():
            for lo in range(0, len(idx_all), max(1, batch_size)):
                idx = idx_all[lo : lo + batch_size]
                batch = np.stack([feats[i] for i in idx])
                feeds = {self.input_name: batch}
                out[idx] = self._run(lambda s, f=feeds: s.run([self.output_name], f)[0])
        return _normalise(out)

    # ------------------------------------------------------------------ runtime

    def _run(self, fn: Callable[[ort.InferenceSession], T]) -> T:
        """Run on the current session; a failure on a GPU moves the model to the CPU once.
        A failure that is not retried leaves as ``errors.EngineError`` (MemoryError stays)."""
        with engine_errors():
            session = self.session
            try:
                return fn(session)
            except RUN_ERRORS as err:
                if not self.runtime.on_gpu:
                    raise
                with self._lock:
                    if self.session is session:
                        self.runtime.fall_back_to_cpu(str(err).splitlines()[0][:200])
                        self.session = self.runtime.open(self.onnx_path)
                return fn(self.session)


def _open_checked(runtime: Runtime, path: Path) -> ort.InferenceSession:
    """An ONNX Runtime session on ``path``; a file that is not a readable ONNX model (cut
    short, overwritten, another file under its name) is a :class:`SpeakerModelError` naming it,
    not a device problem."""
    from ..whisper.runtime import DeviceError

    try:
        return runtime.open(path)
    except DeviceError:
        detail = runtime.notes[-1] if runtime.notes else "ONNX Runtime cannot read it"
        raise SpeakerModelError(
            f"{path} is not a usable speaker model ({detail.splitlines()[0][:200]}); "
            "install the speaker model again with --overwrite"
        ) from None


def _mono(audio: np.ndarray) -> np.ndarray:
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"expected mono audio (one dimension), got shape {audio.shape}")
    return audio


def _gain(audio: np.ndarray) -> float:
    """Resemblyzer's ``normalize_volume(increase_only=True)`` factor, capped at +50 dB."""
    if len(audio) == 0:
        return 1.0
    rms = float(np.sqrt(max(float(np.dot(audio, audio)), 0.0) / len(audio)))
    if rms <= 0.0:
        return 1.0
    change = TARGET_DBFS - 20 * np.log10(rms)  # dBFS of full scale 1.0 (Resemblyzer: int16)
    return float(10 ** (min(change, MAX_GAIN_DB) / 20)) if change > 0 else 1.0


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norm, 1e-12)).astype(np.float32)
