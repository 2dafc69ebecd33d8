"""A built Whisper model: its manifest, tokenizer and ONNX Runtime sessions.

The encoder turns a batch of log-mel windows into cross-attention keys/values; the decoder
is stepped through :class:`DecoderState`, which keeps the self-attention cache. On CUDA the
cache and the cross K/V stay on the GPU between steps (ONNX Runtime I/O binding); elsewhere
they are numpy arrays. A run that fails on the GPU is retried on the CPU once, and the model
says so in ``runtime.notes``.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from .graph import GRAPH_VERSION
from .runtime import CUDA, Runtime
from .tokenizer import WhisperTokenizer
from .weights import Dims

MANIFEST = "manifest.json"


class ModelNotBuiltError(Exception):
    """The folder does not hold a model built by ``deskscribe models build`` (or an outdated one)."""


@dataclass
class AudioFeatures:
    """Encoder output for a batch of windows: per decoder layer, cross-attention keys and
    values (numpy arrays, or OrtValues resident on the GPU)."""

    cross_k: list
    cross_v: list
    batch: int

    def feeds(self) -> dict[str, object]:
        named = {f"cross_k_{i}": k for i, k in enumerate(self.cross_k)}
        named.update({f"cross_v_{i}": v for i, v in enumerate(self.cross_v)})
        return named

    def to_host(self) -> AudioFeatures:
        return AudioFeatures(
            [_host(k) for k in self.cross_k], [_host(v) for v in self.cross_v], self.batch
        )


class WhisperModel:
    def __init__(self, folder: str | Path, device: str = "auto", threads: int = 0) -> None:
        self.folder = Path(folder)
        manifest_path = self.folder / MANIFEST
        if not manifest_path.exists():
            raise ModelNotBuiltError(
                f"{self.folder} is not a built DeskScribe model (no {MANIFEST}); "
                "build one with `deskscribe models build <checkpoint folder>`"
            )
        self.manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        if self.manifest.get("builder_version") != GRAPH_VERSION:
            raise ModelNotBuiltError(
                f"{self.folder} was built by another version of DeskScribe; rebuild it with "
                f"`deskscribe models build {self.manifest.get('source', '<checkpoint folder>')} --overwrite`"
            )
        self.dims = Dims(**self.manifest["dims"])
        self.variant: str = self.manifest["variant"]
        self.name: str = self.manifest.get("name", self.folder.name)
        self.alignment_heads = [tuple(h) for h in self.manifest["alignment_heads"]]
        self.tokenizer = WhisperTokenizer(self.folder / "tokenizer.json")
        self.runtime = Runtime(device=device, threads=threads)
        self._lock = threading.Lock()
        self._open_sessions()

    def _open_sessions(self) -> None:
        self.encoder = self.runtime.open(self.folder / "encoder.onnx")
        self.decoder = self.runtime.open(self.folder / "decoder.onnx")
        self.np_dtype = np.float16 if self.variant == "fp16" else np.float32
        self.device_type = "cuda" if self.runtime.provider == CUDA else None

    @property
    def is_multilingual(self) -> bool:
        return self.tokenizer.multilingual

    @property
    def n_mels(self) -> int:
        return self.dims.n_mels

    def _run_with_fallback(self, fn):
        try:
            return fn()
        except (ort.capi.onnxruntime_pybind11_state.Fail, RuntimeError, MemoryError) as err:
            if not self.runtime.on_gpu:
                raise
            with self._lock:
                self.runtime.fall_back_to_cpu(str(err).splitlines()[0][:200])
                self._open_sessions()
            return fn()

    def encode(self, mel: np.ndarray) -> AudioFeatures:
        """``mel [B, n_mels, 3000]`` float32 → cross K/V for the decoder."""
        mel = np.ascontiguousarray(mel, dtype=np.float32)

        n = self.dims.n_text_layer
        names = [o.name for o in self.encoder.get_outputs()]

        def run() -> AudioFeatures:
            if self.device_type:
                binding = self.encoder.io_binding()
                binding.bind_cpu_input("mel", mel)
                for name in names:
                    binding.bind_output(name, self.device_type)
                self.encoder.run_with_iobinding(binding)
                outs = dict(zip(names, binding.get_outputs(), strict=True))
            else:
                outs = dict(zip(names, self.encoder.run(names, {"mel": mel}), strict=True))
            return AudioFeatures(
                [outs[f"cross_k_{i}"] for i in range(n)],
                [outs[f"cross_v_{i}"] for i in range(n)],
                mel.shape[0],
            )

        return self._run_with_fallback(run)

    def start(self, audio: AudioFeatures, batch: int) -> DecoderState:
        return DecoderState(self, audio, batch)


class DecoderState:
    """One decoding run: the growing self-attention cache for ``batch`` sequences."""

    def __init__(self, model: WhisperModel, audio: AudioFeatures, batch: int) -> None:
        d = model.dims
        self.model = model
        self.audio = audio
        self.batch = batch
        dh = d.n_text_state // d.n_text_head
        self.past_k: object = np.zeros(
            (d.n_text_layer, batch, d.n_text_head, dh, 0), model.np_dtype
        )
        self.past_v: object = np.zeros(
            (d.n_text_layer, batch, d.n_text_head, 0, dh), model.np_dtype
        )
        self.length = 0

    def step(
        self, tokens: np.ndarray, cache_index: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Feed ``tokens [B, T]``; returns (logits of the last position [B, V], alignment weights
        [B, A, T, S]). ``cache_index[b]`` is the cached sequence that row b continues."""
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        if cache_index is None:
            cache_index = np.arange(tokens.shape[0], dtype=np.int64)
        cache_index = np.ascontiguousarray(cache_index, dtype=np.int64)
        m = self.model
        if m.device_type and isinstance(self.past_k, np.ndarray) and self.length == 0:
            self.past_k = ort.OrtValue.ortvalue_from_numpy(self.past_k, m.device_type, 0)
            self.past_v = ort.OrtValue.ortvalue_from_numpy(self.past_v, m.device_type, 0)

        def run() -> tuple[np.ndarray, np.ndarray]:
            if m.device_type and not isinstance(self.past_k, np.ndarray):
                binding = m.decoder.io_binding()
                binding.bind_cpu_input("tokens", tokens)
                binding.bind_cpu_input("cache_index", cache_index)
                binding.bind_ortvalue_input("past_k", self.past_k)
                binding.bind_ortvalue_input("past_v", self.past_v)
                for name, value in self.audio.feeds().items():
                    binding.bind_ortvalue_input(name, value)
                binding.bind_output("logits", "cpu")
                binding.bind_output("present_k", m.device_type)
                binding.bind_output("present_v", m.device_type)
                binding.bind_output("alignment", "cpu")
                m.decoder.run_with_iobinding(binding)
                logits, pk, pv, align = binding.get_outputs()
                self.past_k, self.past_v = pk, pv
                return logits.numpy(), align.numpy()
            feeds = {
                "tokens": tokens,
                "cache_index": cache_index,
                "past_k": _host(self.past_k),
                "past_v": _host(self.past_v),
                **self.audio.to_host().feeds(),
            }
            logits, self.past_k, self.past_v, align = m.decoder.run(None, feeds)
            return logits, align

        try:
            out = run()
        except (ort.capi.onnxruntime_pybind11_state.Fail, RuntimeError, MemoryError) as err:
            if not m.runtime.on_gpu:
                raise
            # Move everything to the host and continue on the CPU.
            self.past_k, self.past_v = _host(self.past_k), _host(self.past_v)
            self.audio = self.audio.to_host()
            with m._lock:
                m.runtime.fall_back_to_cpu(str(err).splitlines()[0][:200])
                m._open_sessions()
            out = run()
        self.length += tokens.shape[1]
        return out


def _host(value: object) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else value.numpy()
