"""A built Whisper model: its manifest, tokenizer and ONNX Runtime sessions.

The encoder turns a batch of log-mel windows into cross-attention keys/values; the decoder
is stepped through :class:`DecoderState`, which keeps the self-attention cache. On CUDA the
cache and the cross K/V stay on the GPU between steps (ONNX Runtime I/O binding); elsewhere
they are numpy arrays. A run that fails on the GPU is retried on the CPU, and the model says
so in ``runtime.notes``.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnxruntime as ort

from ..errors import DeskScribeError
from ..graph_cache import cached
from .graph_version import READABLE_VERSIONS
from .runtime import (
    CPU,
    CUDA,
    DEVICES,
    Runtime,
    available_providers,
    engine_errors,
    provider_options,
    session_options,
)
from .tokenizer import TokenizerError, WhisperTokenizer
from .weights import Dims

MANIFEST = "manifest.json"
T = TypeVar("T")
_ort_state = ort.capi.onnxruntime_pybind11_state
# What ONNX Runtime raises when a run fails on a device (CUDA out of memory arrives as
# RuntimeException). On a GPU, each of them sends the model to the CPU. Internal to whisper/
# and speakers/: a run that fails for good leaves as ``errors.EngineError`` (or MemoryError).
RUN_ERRORS = (
    _ort_state.Fail,
    _ort_state.RuntimeException,
    _ort_state.EPFail,
    _ort_state.DeviceReset,
    _ort_state.EngineError,
    RuntimeError,
    MemoryError,
)


class ModelNotBuiltError(DeskScribeError):
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

    def rows(self, lo: int, hi: int) -> AudioFeatures:
        """Windows ``lo`` to ``hi`` (views in host memory)."""
        host = self.to_host()
        return AudioFeatures(
            [k[lo:hi] for k in host.cross_k], [v[lo:hi] for v in host.cross_v], hi - lo
        )

    def to_host(self) -> AudioFeatures:
        if all(isinstance(x, np.ndarray) for x in (*self.cross_k, *self.cross_v)):
            return self
        if self._host_copy is None:  # copied from the device once, not on every step
            with engine_errors():
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


class _LazySession:
    """A CPU session opened on first use (of any of its attributes). A file transcribed in
    batches on the CPU runs on the model's single-threaded copies (``single_threaded``), so
    the multi-threaded sessions may never be needed: opening them cost a turbo-sized int8
    model 1.5 s and a second copy of its weights (0.6 GB more at its peak)."""

    def __init__(self, path: Path, threads: int) -> None:
        self._path, self._threads = path, threads
        self._session: ort.InferenceSession | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        if self._session is None:
            with self._lock:
                if self._session is None:
                    self._session = cpu_session(self._path, self._threads)
        return getattr(self._session, name)


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
        self._local = threading.local()
        self.sessions = self._open_sessions()
        n = self.dims.n_text_layer
        # Decoder outputs in the order the decoder state reads them.
        self.decoder_outputs = [
            "logits",
            *(f"new_k_{i}" for i in range(n)),
            *(f"new_v_{i}" for i in range(n)),
            "alignment",
        ]
        self._cache_sessions: dict[int, ort.InferenceSession] = {}
        self._single: WhisperModel | None = None

    def _open_sessions(self) -> _Sessions:
        if self._cpu_only():
            self.runtime.candidates()  # notes why, when a GPU was asked for
            self.runtime.provider = CPU
            for name in ("encoder.onnx", "decoder.onnx"):
                if not (self.folder / name).is_file():
                    raise ModelNotBuiltError(
                        f"{self.folder} lacks {name}; rebuild it with `deskscribe models build`"
                    )
            encoder, decoder = (
                _LazySession(self.folder / name, self.runtime.threads)
                for name in ("encoder.onnx", "decoder.onnx")
            )
            return _Sessions(encoder, decoder, None, False)
        encoder = self.runtime.open(self.folder / "encoder.onnx")
        decoder = self.runtime.open(self.folder / "decoder.onnx")
        cuda = self.runtime.provider == CUDA
        return _Sessions(encoder, decoder, "cuda" if cuda else None, self.runtime.on_gpu)

    def _cpu_only(self) -> bool:
        """No GPU provider this model could use is present (or the CPU was asked for)."""
        wanted = DEVICES.get(self.runtime.device)
        if wanted is None:
            return False  # unknown device: Runtime.open says so
        present = set(available_providers())
        return not any(p != CPU and p in present for p in wanted)

    @property
    def batches_share_scales(self) -> bool:
        """int8 weights: each matmul quantizes its input with one scale for all
        the rows of the batch, so a row's numbers depend on the rows beside it. Windows
        decoded together would then change each other's words, and which windows share a
        batch depends on the machine (the batched path's lanes, one per core) and on timing:
        on the 3-minute bench meeting (tiny.en int8, beam 5) 33 and 43 of 255 words differed
        between 2 lanes of 4 windows, 2 lanes of 1 and 1 lane of 8 (fp32: none). So such a
        model decodes each window on its own (``WindowDecoder.decode_batch``); a window's
        beams still share their batch, which depends on nothing but the window. On a GPU too:
        an int8 model can be named there, and its matmuls quantize the same way wherever
        they run (the GPUs' own variant is fp16)."""
        return self.variant == "int8"

    def single_threaded(self) -> WhisperModel:
        """This model on sessions of its own that run on one thread each (opened on first
        use; CPU only). Batched transcription runs one lane per core on them, in Python
        threads (ONNX Runtime lets go of the GIL while it runs), which uses the cores better
        than one session spreading each small decoder step over them. It holds a second
        copy of the weights."""
        with self._lock:
            if self._single is None:
                opened = [
                    cpu_session(self.folder / name, 1) for name in ("encoder.onnx", "decoder.onnx")
                ]
                view = copy.copy(self)
                view.sessions = _Sessions(opened[0], opened[1], None, False)
                view.runtime = Runtime(device="cpu", threads=1, provider=CPU)
                view._lock = threading.Lock()
                view._single = view
                self._single = view
            return self._single

    @contextmanager
    def gpu_errors_raise(self) -> Iterator[None]:
        """Within this block (in this thread) a run that fails on the GPU raises (``EngineError``
        or MemoryError) instead of moving the model to the CPU: batched decoding first retries
        with a smaller batch."""
        self._local.gpu_errors_raise = True
        try:
            yield
        finally:
            self._local.gpu_errors_raise = False

    def cache_session(self, sessions: _Sessions) -> ort.InferenceSession:
        """The cache graph on the same device as ``sessions`` (opened on first use)."""
        key = id(sessions)
        if key not in self._cache_sessions:
            provider = sessions.decoder.get_providers()[0]
            providers: list = [(provider, provider_options(provider))]
            if provider != CPU:
                providers.append(CPU)
            opts = session_options(provider, self.runtime.threads)
            self._cache_sessions[key] = cached(
                "kv-cache",
                _cache_graph_blobs,
                lambda b: ort.InferenceSession(b[0], sess_options=opts, providers=providers),
                self.dims.n_text_layer,
                np.dtype(self.np_dtype).name,
            )
        return self._cache_sessions[key]

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
        seeing that the sessions changed, just retry. A failure that is not retried (on the
        CPU, within ``gpu_errors_raise``, or of the retry) leaves as ``errors.EngineError``.
        """
        with engine_errors():
            sessions = self.sessions
            try:
                return fn(sessions)
            except RUN_ERRORS as err:
                if not sessions.on_gpu or getattr(self._local, "gpu_errors_raise", False):
                    raise
                with self._lock:
                    if self.sessions is sessions:
                        self.runtime.fall_back_to_cpu(str(err).splitlines()[0][:200])
                        self.sessions = self._open_sessions()
                if before_retry is not None:
                    before_retry()
                return fn(self.sessions)

    def encode(self, mel: np.ndarray) -> AudioFeatures:
        """``mel [B, n_mels, frames]`` float32 (3000 frames: a 30 s window) → cross K/V."""
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
    """One decoding run: the self-attention cache of ``batch`` sequences.

    On the CPU the cache is one numpy buffer per layer with spare slots; the decoder reads
    the buffer in place and returns only the new tokens' keys/values, which are written into
    the next free slots, so a step copies nothing but those. Beam search reorders rows by
    copying only the rows that move (``copy_plan``). On a GPU the cache stays on the device:
    the new keys/values are appended (and rows reordered) there by a small cache graph.
    """

    SLACK = 64  # free slots added whenever the buffer is full

    def __init__(self, model: WhisperModel, audio: AudioFeatures, batch: int) -> None:
        d = model.dims
        self.model = model
        self.audio = audio
        self.batch = batch
        self.length = 0  # cached positions (on a GPU: including the pending ones)
        self._dh = d.n_text_state // d.n_text_head
        self.k: list = []
        self.v: list = []
        self._pending: tuple[list, list, int] | None = None  # device: new K/V not yet appended
        self._reordered = False
        self._host_buffers(batch, 1)

    def _host_buffers(self, batch: int, slots: int) -> None:
        d, dt = self.model.dims, self.model.np_dtype
        shape_k = (batch, d.n_text_head, self._dh, slots)
        shape_v = (batch, d.n_text_head, slots, self._dh)
        self.k = [np.zeros(shape_k, dt) for _ in range(d.n_text_layer)]
        self.v = [np.zeros(shape_v, dt) for _ in range(d.n_text_layer)]

    def step(
        self, tokens: np.ndarray, cache_index: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Feed ``tokens [B, T]``; returns (logits of the last position [B, V], alignment weights
        [B, A, T, S]). ``cache_index[b]`` is the cached sequence that row b continues (None: row
        b continues row b). Rows of one audio must be contiguous: with ``audio.batch`` N and B
        rows, rows [j * B/N, (j + 1) * B/N) read audio j."""
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        index = None
        if cache_index is not None:
            index = np.ascontiguousarray(cache_index, dtype=np.int64)
            if index.shape[0] == self.batch and np.array_equal(index, np.arange(self.batch)):
                index = None

        def run(sess: _Sessions) -> tuple[np.ndarray, np.ndarray]:
            if sess.device_type:
                return self._run_bound(sess, tokens, index)
            return self._run_host(sess, tokens, index)

        self._reordered = False  # set once ``index`` has been applied (a retry must not redo it)
        out = self.model.run_with_fallback(run, before_retry=self.to_host)
        self.batch = tokens.shape[0]
        return out

    def _run_host(
        self, sess: _Sessions, tokens: np.ndarray, index: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        if index is not None and not self._reordered:
            self._reorder_host(index)
            self.batch = index.shape[0]
            self._reordered = True
        n_new = tokens.shape[1]
        if self.length + n_new > self.k[0].shape[-1]:
            self._grow(self.length + n_new + self.SLACK)
        feeds: dict[str, object] = {
            "tokens": tokens,
            "past_len": np.array([self.length], dtype=np.int64),
            **self.audio.to_host().feeds(),
        }
        for i, (k, v) in enumerate(zip(self.k, self.v, strict=True)):
            feeds[f"past_k_{i}"] = k
            feeds[f"past_v_{i}"] = v
        outs = sess.decoder.run(self.model.decoder_outputs, feeds)
        n = len(self.k)
        lo, hi = self.length, self.length + n_new
        for i in range(n):
            self.k[i][..., lo:hi] = outs[1 + i]
            self.v[i][:, :, lo:hi] = outs[1 + n + i]
        self.length = hi
        return outs[0], outs[-1]

    def _reorder_host(self, index: np.ndarray) -> None:
        """Row b of the cache becomes row index[b]. Beam search mostly keeps rows in place:
        only the rows that change are copied, and only their filled slots, however many move
        (a ``take`` of whole buffers, spare slots included, cost 5.6 ms a step at turbo's shape
        and beam 5 against 2.0 ms for every row's filled slots). Row by row, each straight
        from its source (see ``copy_plan``), where one fancy-indexed assignment first gathers
        the moved rows into a temporary and then scatters it: turbo's shape, four of five
        rows moving, 100 slots, four layers, 1.25 against 2.5 ms."""
        n = self.length
        if n == 0:
            self._host_buffers(index.shape[0], self.k[0].shape[-1])
            return
        if index.shape[0] != self.batch:  # a new number of rows: new buffers
            self.k = [np.take(k, index, axis=0) for k in self.k]
            self.v = [np.take(v, index, axis=0) for v in self.v]
            return
        plan = copy_plan(index)
        for k, v in zip(self.k, self.v, strict=True):
            saved_k = saved_v = None
            for dst, src in plan:
                if dst < 0:  # a cycle: keep this row before it is overwritten
                    saved_k, saved_v = k[src, :, :, :n].copy(), v[src, :, :n].copy()
                else:
                    k[dst, :, :, :n] = k[src, :, :, :n] if src >= 0 else saved_k
                    v[dst, :, :n] = v[src, :, :n] if src >= 0 else saved_v

    def _grow(self, slots: int) -> None:
        grown_k, grown_v = [], []
        for k, v in zip(self.k, self.v, strict=True):
            nk = np.zeros((*k.shape[:3], slots), k.dtype)
            nv = np.zeros((v.shape[0], v.shape[1], slots, v.shape[3]), v.dtype)
            nk[..., : self.length] = k[..., : self.length]
            nv[:, :, : self.length] = v[:, :, : self.length]
            grown_k.append(nk)
            grown_v.append(nv)
        self.k, self.v = grown_k, grown_v

    def to_host(self) -> None:
        """Bring the cache (and the audio) to host memory; used when a GPU run fails."""
        self.audio = self.audio.to_host()
        if self._pending is None and all(isinstance(k, np.ndarray) for k in self.k):
            return
        k = [_host(x) for x in self.k]
        v = [_host(x) for x in self.v]
        if self._pending is not None:
            new_k, new_v, done = self._pending
            k = [
                np.concatenate([a[..., :done], _host(b)], axis=-1)
                for a, b in zip(k, new_k, strict=True)
            ]
            v = [
                np.concatenate([a[:, :, :done], _host(b)], axis=2)
                for a, b in zip(v, new_v, strict=True)
            ]
            self._pending = None
        self.k, self.v = k, v
        if self.length == 0:
            self._host_buffers(self.k[0].shape[0], 1)
        else:
            self._grow(self.length + self.SLACK)

    def select_audio(self, index: np.ndarray) -> bool:
        """Keep only the audio rows in ``index`` (batched decoding drops finished windows).
        Returns False, changing nothing, when the audio lives on a device."""
        audio = self.audio
        if not all(isinstance(x, np.ndarray) for x in (*audio.cross_k, *audio.cross_v)):
            return False
        self.audio = AudioFeatures(
            [np.take(x, index, axis=0) for x in audio.cross_k],
            [np.take(x, index, axis=0) for x in audio.cross_v],
            int(index.shape[0]),
        )
        return True

    def _run_bound(
        self, sess: _Sessions, tokens: np.ndarray, index: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The decoder step with the cache and cross K/V left on the device (I/O binding)."""
        device = sess.device_type
        if self._pending is not None:
            self._append_on_device(sess, index)
        elif isinstance(self.k[0], np.ndarray):  # the first step: upload the (empty) cache
            if self.length == 0:
                self._host_buffers(tokens.shape[0], 1)
            elif index is not None:
                self.k = [np.take(k[..., : self.length], index, axis=0) for k in self.k]
                self.v = [np.take(v[:, :, : self.length], index, axis=0) for v in self.v]
            self.k = [_device(k, device) for k in self.k]
            self.v = [_device(v, device) for v in self.v]
        self._reordered = True
        binding = sess.decoder.io_binding()
        binding.bind_cpu_input("tokens", tokens)
        binding.bind_cpu_input("past_len", np.array([self.length], dtype=np.int64))
        for i, (k, v) in enumerate(zip(self.k, self.v, strict=True)):
            binding.bind_ortvalue_input(f"past_k_{i}", k)
            binding.bind_ortvalue_input(f"past_v_{i}", v)
        for name, value in self.audio.feeds().items():
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        n = len(self.k)
        names = self.model.decoder_outputs
        for name in names:
            binding.bind_output(name, "cpu" if name in ("logits", "alignment") else device)
        sess.decoder.run_with_iobinding(binding)
        outs = binding.get_outputs()
        self._pending = (outs[1 : 1 + n], outs[1 + n : 1 + 2 * n], self.length)
        self.length += tokens.shape[1]
        return outs[0].numpy(), outs[-1].numpy()

    def _append_on_device(self, sess: _Sessions, index: np.ndarray | None) -> None:
        """cache = reorder(concat(cache[:done], new)) on the device (the cache graph)."""
        new_k, new_v, done = self._pending
        if index is None:
            index = np.arange(self.batch, dtype=np.int64)
        graph = self.model.cache_session(sess)
        binding = graph.io_binding()
        binding.bind_cpu_input("past_len", np.array([done], dtype=np.int64))
        binding.bind_cpu_input("index", index)
        n = len(self.k)
        for i in range(n):
            binding.bind_ortvalue_input(f"past_k_{i}", self.k[i])
            binding.bind_ortvalue_input(f"past_v_{i}", self.v[i])
            binding.bind_ortvalue_input(f"new_k_{i}", new_k[i])
            binding.bind_ortvalue_input(f"new_v_{i}", new_v[i])
            binding.bind_output(f"k_{i}", sess.device_type)
            binding.bind_output(f"v_{i}", sess.device_type)
        graph.run_with_iobinding(binding)
        outs = binding.get_outputs()
        self.k, self.v = list(outs[0::2]), list(outs[1::2])
        self._pending = None


def copy_plan(index: np.ndarray) -> list[tuple[int, int]]:
    """How to make row b of a buffer hold what row ``index[b]`` holds, one row copy at a time
    and without overwriting a row another copy still has to read: ``(dst, src)`` pairs, where
    ``dst`` -1 means "keep row ``src`` aside" and ``src`` -1 means "the row kept aside". Rows
    whose moves form a cycle (two rows swap) need one row kept aside per cycle; one place is
    enough, since a cycle is unwound before the next is broken."""
    pending = {b: int(index[b]) for b in range(len(index)) if index[b] != b}
    plan: list[tuple[int, int]] = []
    while pending:
        read = set(pending.values())
        ready = [b for b in pending if b not in read]
        if not ready:  # every row left is on a cycle: break one
            row = next(iter(pending))
            plan.append((-1, row))
            pending = {d: -1 if s == row else s for d, s in pending.items()}
            continue
        plan += [(b, pending.pop(b)) for b in ready]
    return plan


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
    if manifest.get("builder_version") not in READABLE_VERSIONS:
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


def cpu_session(path: Path, threads: int) -> ort.InferenceSession:
    """A CPU session with the app's options (``session_options``: threads sleep while they
    wait)."""
    return ort.InferenceSession(
        str(path), sess_options=session_options(CPU, threads), providers=[CPU]
    )


def _host(value: object) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else value.numpy()


def _device(value: np.ndarray, device: str) -> ort.OrtValue:
    return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value), device, 0)


def _cache_graph_blobs(n_layers: int, dtype: str) -> list[bytes]:
    return [cache_graph(n_layers, np.dtype(dtype).type)]


def cache_graph(n_layers: int, dtype: type) -> bytes:
    """The device-side cache update, as an in-memory ONNX model: for each layer,
    ``k_i = Gather(Concat(past_k_i[..., :past_len], new_k_i), index)`` (v likewise)."""
    from onnx import TensorProto, helper

    ft = TensorProto.FLOAT16 if dtype == np.float16 else TensorProto.FLOAT
    nodes, inputs, outputs = [], [], []
    inputs.append(helper.make_tensor_value_info("past_len", TensorProto.INT64, [1]))
    inputs.append(helper.make_tensor_value_info("index", TensorProto.INT64, ["rows"]))
    zero = helper.make_tensor("zero", TensorProto.INT64, [1], [0])
    axis_k = helper.make_tensor("axis_k", TensorProto.INT64, [1], [3])
    axis_v = helper.make_tensor("axis_v", TensorProto.INT64, [1], [2])
    for i in range(n_layers):
        for kind, axis, shape_past, shape_new in (
            ("k", "axis_k", ["batch", "h", "dh", "slots"], ["batch", "h", "dh", "t"]),
            ("v", "axis_v", ["batch", "h", "slots", "dh"], ["batch", "h", "t", "dh"]),
        ):
            past, new, out = f"past_{kind}_{i}", f"new_{kind}_{i}", f"{kind}_{i}"
            inputs.append(helper.make_tensor_value_info(past, ft, shape_past))
            inputs.append(helper.make_tensor_value_info(new, ft, shape_new))
            outputs.append(helper.make_tensor_value_info(out, ft, None))
            cat_axis = 3 if kind == "k" else 2
            nodes += [
                helper.make_node("Slice", [past, "zero", "past_len", axis], [f"{past}_valid"]),
                helper.make_node("Concat", [f"{past}_valid", new], [f"{out}_all"], axis=cat_axis),
                helper.make_node("Gather", [f"{out}_all", "index"], [out], axis=0),
            ]
    graph = helper.make_graph(nodes, "kv_cache", inputs, outputs, [zero, axis_k, axis_v])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()
