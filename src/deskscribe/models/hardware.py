"""What this computer can run, and which model and variant we recommend for it.

The recommendation comes with one sentence the GUI can show as it is.
Figures behind it (bench/, 2-core CPU): base int8 transcribes a file at RTF 0.10 with the
same WER as fp32 (9.9 % vs 9.5 %), 20 % faster; a turbo-shaped model needs 4.2 s of CPU per
30 s window in int8, too slow to re-decode live audio every second on a laptop CPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass

from ..whisper.runtime import COREML, CUDA, DML, available_providers

TURBO_GPU_GB = 6.0


@dataclass(frozen=True)
class Hardware:
    providers: tuple[str, ...]
    gpu_name: str | None
    gpu_memory_gb: float | None
    cpu_count: int


@dataclass(frozen=True)
class Recommendation:
    model: str  # catalog id
    variant: str
    device: str  # "cuda", "directml", "coreml" or "cpu"
    reason: str


def detect() -> Hardware:
    providers = tuple(available_providers())
    name, memory = (None, None)
    if CUDA in providers:
        name, memory = _nvidia_gpu()
    return Hardware(providers, name, memory, os.cpu_count() or 1)


def _nvidia_gpu() -> tuple[str | None, float | None]:
    """Name and total memory of the first NVIDIA GPU, from nvidia-smi (None if unknown)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        out = (
            subprocess.run(
                [exe, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=5,
                check=True,
            )
            .stdout.strip()
            .splitlines()
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    if not out:
        return None, None
    name, _, mib = out[0].rpartition(",")
    try:
        return name.strip(), float(mib) / 1024
    except ValueError:
        return name.strip() or None, None


def recommend(hw: Hardware) -> Recommendation:
    if CUDA in hw.providers and (hw.gpu_memory_gb or 0) >= TURBO_GPU_GB:
        gpu = hw.gpu_name or "NVIDIA GPU"
        return Recommendation(
            "large-v3-turbo",
            "fp16",
            "cuda",
            f"Your {gpu} ({hw.gpu_memory_gb:.0f} GB) runs Whisper large-v3-turbo, the most "
            "accurate fast model, many times faster than real time.",
        )
    if CUDA in hw.providers and hw.gpu_memory_gb is not None:
        return Recommendation(
            "small",
            "fp16",
            "cuda",
            f"Your GPU has {hw.gpu_memory_gb:.0f} GB, less than the {TURBO_GPU_GB:.0f} GB "
            "large-v3-turbo needs, so Whisper small runs on it instead.",
        )
    if DML in hw.providers or CUDA in hw.providers:
        device = "directml" if DML in hw.providers else "cuda"
        return Recommendation(
            "large-v3-turbo",
            "fp16",
            device,
            "Your graphics card can run Whisper large-v3-turbo; if it runs out of memory, "
            "DeskScribe switches to the CPU by itself.",
        )
    if COREML in hw.providers:
        return Recommendation(
            "large-v3-turbo",
            "fp16",
            "coreml",
            "Your Mac's Neural Engine and GPU run Whisper large-v3-turbo well.",
        )
    model = "small" if hw.cpu_count >= 8 else "base"
    return Recommendation(
        model,
        "int8",
        "cpu",
        f"Without a supported GPU, Whisper {model} is the most accurate model that stays quick "
        f"on your {hw.cpu_count} CPU cores (a file takes a small part of its length); "
        "large-v3-turbo would be several times slower.",
    )
