"""A built Whisper model: its manifest, tokenizer and ONNX Runtime sessions.

The encoder turns a batch of log-mel windows into cross-attention keys/values; the decoder
is stepped through :class:`DecoderState`, which keeps the self-attention cache. On CUDA the
cache and the cross K/V stay on the GPU between steps (ONNX Runtime I/O binding); elsewhere
they are numpy arrays. A run that fails on the GPU is retried on the CPU, and the model says
so in ``runtime.notes``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnxruntime as ort

from .graph import GRAPH_VERSION
from .runtime import CUDA, Runtime
from .tokenizer import TokenizerError, WhisperTokenizer
from .weights import Dims

MANIFEST = "manifest.json"
T = TypeVar("T")
_ort_state = ort.capi.onnxruntime_pybind11_state
# What ONNX Runtime raises when a run fails on a device (CUDA out of memory arrives as
# RuntimeException). On a GPU, each of them sends the model to the CPU.
RUN_ERRORS = (
    _ort_state.Fail,
    _ort_state.RuntimeException,
    _ort_state.EPFail,
    _ort_state.DeviceReset,
    _ort_state.EngineError,
    RuntimeError,
    MemoryError,
)


class ModelNotBuiltError(Exception):
    """The folder does not hold a usable model built by ``deskscribe models build``."""


@dataclass
class AudioFeatures:
    """Encoder output for a batch of windows: per decoder layer, cross-attention keys and
    values (numpy arrays, or OrtValues resident on the GPU)."""

    cross_k: list
    cross_v: list
    batch: int
    _host_copy: AudioFeatures | None = field(default=None, repr=False, compare=False)

    def feeds(self) -> dict[str, object]:
        named = {f"cross_k_{i}": k for i, k in enumerate(self.cross_k)}
        named.update({f"cross_v_{i}": v for i, v in enumerate(self.cross_v)})
        return named

    def to_host(self) -> AudioFeatures:
        if all(isinstance(x, np.ndarray) for x in (*self.cross_k, *self.cross_v)):
            return self
        if self._host_copy is None:  # copied from the device once, not on every step
            self._host_copy = AudioFeatures(
                [_host(k) for k in self.cross_k], [_host(v) for v in self.cross_v], self.batch
            )
        return self._host_copy


@dataclass(frozen=True)
class _Sessions:
    """Encoder and decoder, opened together and replaced together when falling back."""

    encoder: ort.InferenceSession
    decoder: ort.InferenceSession
    device_type: str | None  # "cuda" when outputs stay on the GPU (I/O binding)
    on_gpu: bool


class WhisperModel:
    def __init__(self, folder: str | Path, device: str = "auto", threads: int = 0) -> None:
        self.folder = Path(folder)
        self.manifest = _read_manifest(self.folder)
        try:
            self.dims = Dims(**self.manifest["dims"])
            self.variant: str = self.manifest["variant"]
            self.alignment_heads = [tuple(h) for h in self.manifest["alignment_heads"]]
            self.tokenizer = WhisperTokenizer(self.folder / "tokenizer.json")
        except (KeyError, TypeError, TokenizerError) as err:
            raise ModelNotBuiltError(
                f"{self.folder} is damaged ({err}); rebuild it with `deskscribe models build`"
            ) from None
        self.name: str = self.manifest.get("name", self.folder.name)
        self.np_dtype = np.float16 if self.variant == "fp16" else np.float32
        self.runtime = Runtime(device=device, threads=threads)
        self._lock = threading.Lock()
        self.sessions = self._open_sessions()

    def _open_sessions(self) -> _Sessions:
        encoder = self.runtime.open(self.folder / "encoder.onnx")
        decoder = self.runtime.open(self.folder / "decoder.onnx")
        cuda = self.runtime.provider == CUDA
        return _Sessions(encoder, decoder, "cuda" if cuda else None, self.runtime.on_gpu)

    @property
    def device_type(self) -> str | None:
        return self.sessions.device_type

    @property
    def n_mels(self) -> int:
        return self.dims.n_mels

    def run_with_fallback(
        self, fn: Callable[[_Sessions], T], before_retry: Callable[[], None] | None = None
    ) -> T:
        """Run ``fn`` on the current sessions; if it fails on a GPU, move to the CPU and retry.

        When several threads fail at once, the first swaps in CPU sessions and the others,
        seeing that the sessions changed, just retry.
        """
        sessions = self.sessions
        try:
            return fn(sessions)
        except RUN_ERRORS as err:
            if not sessions.on_gpu:
                raise
            with self._lock:
                if self.sessions is sessions:
                    self.runtime.fall_back_to_cpu(str(err).splitlines()[0][:200])
                    self.sessions = self._open_sessions()
            if before_retry is not None:
                before_retry()
            return fn(self.sessions)

    def encode(self, mel: np.ndarray) -> AudioFeatures:
        """``mel [B, n_mels, 3000]`` float32 → cross K/V for the decoder."""
        mel = np.ascontiguousarray(mel, dtype=np.float32)
        n = self.dims.n_text_layer

        def run(sess: _Sessions) -> AudioFeatures:
            names = [o.name for o in sess.encoder.get_outputs()]
            if sess.device_type:
                binding = sess.encoder.io_binding()
                binding.bind_cpu_input("mel", mel)
                for name in names:
                    binding.bind_output(name, sess.device_type)
                sess.encoder.run_with_iobinding(binding)
                outs = dict(zip(names, binding.get_outputs(), strict=True))
            else:
                outs = dict(zip(names, sess.encoder.run(names, {"mel": mel}), strict=True))
            return AudioFeatures(
                [outs[f"cross_k_{i}"] for i in range(n)],
                [outs[f"cross_v_{i}"] for i in range(n)],
                mel.shape[0],
            )

        return self.run_with_fallback(run)

    def start(self, audio: AudioFeatures, batch: int) -> DecoderState:
        return DecoderState(self, audio, batch)


class DecoderState:
    """One decoding run: the growing self-attention cache for ``batch`` sequences."""

    def __init__(self, model: WhisperModel, audio: AudioFeatures, batch: int) -> None:
        d = model.dims
        self.model = model
        self.audio = audio
        dh = d.n_text_state // d.n_text_head
        self.past_k: object = np.zeros(
            (d.n_text_layer, batch, d.n_text_head, dh, 0), model.np_dtype
        )
        self.past_v: object = np.zeros(
            (d.n_text_layer, batch, d.n_text_head, 0, dh), model.np_dtype
        )

    def step(
        self, tokens: np.ndarray, cache_index: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Feed ``tokens [B, T]``; returns (logits of the last position [B, V], alignment weights
        [B, A, T, S]). ``cache_index[b]`` is the cached sequence that row b continues."""
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        if cache_index is None:
            cache_index = np.arange(tokens.shape[0], dtype=np.int64)
        cache_index = np.ascontiguousarray(cache_index, dtype=np.int64)

        def run(sess: _Sessions) -> tuple[np.ndarray, np.ndarray]:
            if sess.device_type:
                return self._run_bound(sess, tokens, cache_index)
            feeds = {
                "tokens": tokens,
                "cache_index": cache_index,
                "past_k": _host(self.past_k),
                "past_v": _host(self.past_v),
                **self.audio.to_host().feeds(),
            }
            logits, self.past_k, self.past_v, align = sess.decoder.run(None, feeds)
            return logits, align

        def to_host() -> None:
            self.past_k, self.past_v = _host(self.past_k), _host(self.past_v)
            self.audio = self.audio.to_host()

        return self.model.run_with_fallback(run, before_retry=to_host)

    def _run_bound(
        self, sess: _Sessions, tokens: np.ndarray, cache_index: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The decoder step with the cache and cross K/V left on the device (I/O binding)."""
        device = sess.device_type
        if isinstance(self.past_k, np.ndarray):
            self.past_k = ort.OrtValue.ortvalue_from_numpy(self.past_k, device, 0)
            self.past_v = ort.OrtValue.ortvalue_from_numpy(self.past_v, device, 0)
        binding = sess.decoder.io_binding()
        binding.bind_cpu_input("tokens", tokens)
        binding.bind_cpu_input("cache_index", cache_index)
        binding.bind_ortvalue_input("past_k", self.past_k)
        binding.bind_ortvalue_input("past_v", self.past_v)
        for name, value in self.audio.feeds().items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        binding.bind_output("logits", "cpu")
        binding.bind_output("present_k", device)
        binding.bind_output("present_v", device)
        binding.bind_output("alignment", "cpu")
        sess.decoder.run_with_iobinding(binding)
        logits, self.past_k, self.past_v, align = binding.get_outputs()
        return logits.numpy(), align.numpy()


def _read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.exists():
        raise ModelNotBuiltError(
            f"{folder} is not a built DeskScribe model (no {MANIFEST}); "
            "build one with `deskscribe models build <checkpoint folder>`"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise ModelNotBuiltError(f"{path} cannot be read ({err}); rebuild the model") from None
    if manifest.get("builder_version") != GRAPH_VERSION:
        source = str(manifest.get("source", "<checkpoint folder>"))
        if source.startswith("starter:"):
            command = "deskscribe models install-starter --overwrite"
        elif source.startswith("hf:"):
            command = f"deskscribe models download {source[3:]} --overwrite"
        else:
            command = f"deskscribe models build {source} --overwrite"
        raise ModelNotBuiltError(
            f"{folder} was built by another version of DeskScribe; rebuild it with `{command}`"
        )
    return manifest


def _host(value: object) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else value.numpy()
