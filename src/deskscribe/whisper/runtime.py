"""ONNX Runtime sessions: provider choice, per-provider options and fallback to the CPU.

Provider order for ``device="auto"``: CUDA → DirectML → CoreML → CPU. A provider that fails
to load, or a run that fails on the GPU (out of memory, driver error), falls back to the CPU;
the reason is kept so the caller can show it. ``Runtime.provider`` says what really ran.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import onnxruntime as ort

from ..errors import DeskScribeError, EngineError

log = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
DML = "DmlExecutionProvider"
COREML = "CoreMLExecutionProvider"
PROVIDER_ORDER = (CUDA, DML, COREML, CPU)
DEVICES = {
    "auto": PROVIDER_ORDER,
    "cpu": (CPU,),
    "cuda": (CUDA,),
    "directml": (DML,),
    "coreml": (COREML,),
}
PROVIDER_LABELS = {CPU: "CPU", CUDA: "CUDA GPU", DML: "DirectML GPU", COREML: "CoreML"}


class DeviceError(DeskScribeError):
    """The requested device is not usable here."""


_ort_state = ort.capi.onnxruntime_pybind11_state
# Every exception type of ONNX Runtime's own (InvalidArgument for an input a model does not
# take, RuntimeException for CUDA running out of memory, ...). They never leave whisper/ and
# speakers/: a run is wrapped in ``engine_errors``.
ORT_ERRORS: tuple[type[Exception], ...] = tuple(
    t for t in vars(_ort_state).values() if isinstance(t, type) and issubclass(t, Exception)
)


@contextmanager
def engine_errors() -> Iterator[None]:
    """A failure of ONNX Runtime inside this block (one of its own exception types, or the
    RuntimeError its I/O binding raises) leaves as ``errors.EngineError`` with the same
    message and the original as its cause. MemoryError stays a MemoryError: callers tell
    the user that memory ran out."""
    try:
        yield
    except (*ORT_ERRORS, RuntimeError) as err:
        raise EngineError(str(err) or type(err).__name__) from err


def available_providers() -> list[str]:
    return list(ort.get_available_providers())


def provider_options(provider: str) -> dict[str, str]:
    if provider == CUDA:
        return {"cudnn_conv_algo_search": "HEURISTIC", "arena_extend_strategy": "kSameAsRequested"}
    return {}


def sleep_between_runs(opts: ort.SessionOptions) -> ort.SessionOptions:
    """Let a CPU session's threads sleep while they wait instead of spinning. A decoder step
    is hundreds of operations of a few microseconds each; spinning threads burn a core between
    them and, on a machine with other work, lose it at every wait. Measured on the 2-core
    development box with other processes running (tiny.en int8, one minute of speech, two
    threads): 8.4 s and 5.2 CPU-s without spinning, 11.7 s and 8.9 CPU-s with it. Every CPU
    session needs it, not only the big ones: one small session left spinning after its run
    takes the cores from the next one (beam search's candidate session made each
    turbo-shaped beam-5 decoder step 16 -> 20-22 ms)."""
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return opts


def session_options(provider: str, threads: int = 0) -> ort.SessionOptions:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if threads > 0:
        opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if provider == CPU:
        # The arena keeps its high-water mark for the life of the session; without it the
        # memory goes back after beam search's large first step, at no measured speed cost.
        opts.enable_cpu_mem_arena = False
        if threads != 1:
            sleep_between_runs(opts)
    if provider == DML:
        # DirectML needs these off: it cannot run with memory patterns or in parallel.
        opts.enable_mem_pattern = False
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return opts


@dataclass
class Runtime:
    """The provider chosen for a model and why (``notes`` explains each fallback)."""

    device: str = "auto"
    threads: int = 0
    provider: str = CPU
    notes: list[str] = field(default_factory=list)

    @property
    def on_gpu(self) -> bool:
        return self.provider != CPU

    @property
    def label(self) -> str:
        return PROVIDER_LABELS.get(self.provider, self.provider)

    def candidates(self) -> list[str]:
        if self.device not in DEVICES:
            raise DeviceError(f"unknown device {self.device!r}; use one of: {', '.join(DEVICES)}")
        wanted = DEVICES[self.device]
        present = set(available_providers())
        found = [p for p in wanted if p in present]
        missing = [p for p in wanted if p not in present and p != CPU]
        if self.device != "auto" and not found:
            self.notes.append(
                f"{PROVIDER_LABELS[wanted[0]]} is not available in this ONNX Runtime build "
                f"(have: {', '.join(sorted(present))}); install the matching extra, e.g. deskscribe[cuda]; using the CPU"
            )
        elif self.device != "auto" and missing:
            self.notes.append(f"{', '.join(missing)} not available")
        return [*found, CPU] if CPU not in found else found

    def open(self, path: Path) -> ort.InferenceSession:
        """Open a session on the best working provider, falling back down the list."""
        for provider in self.candidates():
            providers = [(provider, provider_options(provider))]
            if provider != CPU:
                providers.append((CPU, {}))
            try:
                sess = ort.InferenceSession(
                    os.fspath(path),
                    sess_options=session_options(provider, self.threads),
                    providers=providers,
                )
            except Exception as err:
                self.notes.append(
                    f"{PROVIDER_LABELS.get(provider, provider)} failed to load: {err}"
                )
                log.warning("provider %s failed for %s: %s", provider, path.name, err)
                continue
            really = sess.get_providers()[0]
            if really != provider:
                self.notes.append(
                    f"{PROVIDER_LABELS.get(provider, provider)} could not start; using {really}"
                )
            self.provider = really
            return sess
        raise DeviceError(f"no ONNX Runtime provider could open {path}")

    def fall_back_to_cpu(self, reason: str) -> None:
        self.notes.append(f"{self.label} failed while running ({reason}); continuing on the CPU")
        log.warning("falling back to CPU: %s", reason)
        self.device = "cpu"
        self.provider = CPU
