"""What this computer has for a language model, and which catalog model suits it.

Free memory and GPUs come from llama.cpp itself (``xllamacpp.get_device_info``): a GPU is
listed there only when the installed build can offload to it (the Linux and Windows wheels on
PyPI are CPU builds; macOS on Apple silicon has Metal), so a GPU it lists is one the
built-in server will use. Without the binding, free memory comes from the system.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .catalog import LLM_CATALOG, STARTER_ID, LLMEntry

GIB = 1024**3


@dataclass(frozen=True)
class Memory:
    free_ram_gb: float | None  # None: unknown
    gpus: tuple[tuple[str, float], ...]  # (name, free GB) of GPUs llama.cpp can offload to
    binding: bool  # llama.cpp's binding (the notes extra) is installed
    cores: int = 0  # CPU cores (0: unknown)


@dataclass(frozen=True)
class LLMRecommendation:
    id: str  # a catalog id, or STARTER_ID
    entry: LLMEntry | None  # None for the starter
    reason: str  # one sentence the app shows as it is


def memory() -> Memory:
    try:
        import xllamacpp
    except ImportError:
        return Memory(_system_free_gb(), (), False, os.cpu_count() or 0)
    try:
        devices = xllamacpp.get_device_info()
    except Exception:  # an old or odd build: fall back to the system's figure
        return Memory(_system_free_gb(), (), True, os.cpu_count() or 0)
    ram, gpus = None, []
    for dev in devices:
        kind = str(dev.get("type", "")).upper()
        free = float(dev.get("memory_free") or 0) / GIB
        if kind.endswith("CPU"):
            ram = free
        elif "GPU" in kind:
            gpus.append((str(dev.get("description") or dev.get("name") or "GPU"), free))
    free = ram if ram is not None else _system_free_gb()
    return Memory(free, tuple(gpus), True, os.cpu_count() or 0)


def _system_free_gb() -> float | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / GIB
    except (AttributeError, ValueError, OSError):  # Windows: no sysconf
        return None


def recommend_llm(mem: Memory) -> LLMRecommendation:
    """The largest catalog model that fits in the free GPU memory, else in the free RAM, with
    room to spare (the app and Whisper run beside it); the starter when none fits. On the CPU
    a model over 5B parameters is offered only with 8 cores or more: reading a one-hour
    transcript (about 12,000 tokens) takes a 7B model many minutes on a laptop's few cores."""
    by_size = sorted(LLM_CATALOG, key=lambda e: e.memory_gb, reverse=True)
    best_gpu = max(mem.gpus, key=lambda g: g[1], default=None)
    if best_gpu is not None:
        name, free = best_gpu
        for entry in by_size:
            if entry.memory_gb + 0.5 <= free:
                return LLMRecommendation(
                    entry.id,
                    entry,
                    f"{entry.id} ({entry.size_mb / 1000:.1f} GB) runs on your {name}, which has "
                    f"{free:.0f} GB free: {entry.good_for}.",
                )
    if mem.free_ram_gb is None:
        entry = next(e for e in LLM_CATALOG if e.id == "llama-3.2-3b-instruct")
        return LLMRecommendation(
            entry.id,
            entry,
            f"{entry.id} ({entry.size_mb / 1000:.1f} GB) needs about {entry.memory_gb:.0f} GB "
            f"of free memory while it writes (this computer's free memory is unknown).",
        )
    free = mem.free_ram_gb
    for entry in by_size:
        if entry.parameters_b > 5 and mem.cores < 8:
            continue
        if entry.memory_gb * 1.5 <= free:
            where = "on the CPU" if not mem.gpus else "on the CPU (too large for the GPU)"
            return LLMRecommendation(
                entry.id,
                entry,
                f"{entry.id} ({entry.size_mb / 1000:.1f} GB) fits the {free:.0f} GB of memory "
                f"free now and runs {where}: {entry.good_for}.",
            )
    return LLMRecommendation(
        STARTER_ID,
        None,
        f"Only {free:.1f} GB of memory is free: the offline starter runs in it, but its notes "
        "are poor; close other programs and choose a catalog model, or use Ollama or LM Studio "
        "on another computer.",
    )


GPU_WHEELS = "https://xorbitsai.github.io/xllamacpp/whl"


def unused_gpu_hint(mem: Memory, gpu_name: str | None) -> str:
    """One sentence when this computer has a GPU (``gpu_name``, as ONNX Runtime found it for
    Whisper) that the installed llama.cpp build cannot use; else ""."""
    if not gpu_name or mem.gpus or not mem.binding:
        return ""
    import sys

    if getattr(sys, "frozen", False):
        return (
            f"Your {gpu_name} is not used for notes: this notes add-on is a CPU build of llama.cpp."
        )
    return (
        f"Your {gpu_name} is not used for notes: the installed llama.cpp is a CPU build; for "
        f"an NVIDIA GPU: pip install xllamacpp --force-reinstall --index-url {GPU_WHEELS}/cu128 "
        f"(or {GPU_WHEELS}/vulkan for any GPU with a Vulkan driver)"
    )
