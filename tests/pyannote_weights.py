"""The seeded random segmentation-3.0 / WeSpeaker / PLDA weights of the equality bench, and
pyannote.audio's own outputs for an 18 s AMI clip, built once per bench version in the test
cache (``bench/segmentation_equal.py`` in the pyannote env, never in ours).

pyannote runs in its own environment (torch): ``$DESKSCRIBE_PYANNOTE_PYTHON`` or
``.pyannote-env/bin/python`` (``scripts/pyannote_env.sh`` makes it). Without it the tests
that need it skip, except with ``CI=true``, where it is created first.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest

import skips
from conftest import CACHE, EVAL, ROOT

sys.path.insert(0, str(ROOT / "bench"))
import segmentation_equal as se

CLIP, START, SECONDS = EVAL / "ami" / "trn02.wav", 0.0, 18.0


def pyannote_python() -> str:
    for candidate in (
        os.environ.get("DESKSCRIBE_PYANNOTE_PYTHON"),
        str(ROOT / ".pyannote-env" / "bin" / "python"),
    ):
        if candidate and os.path.exists(candidate):
            return candidate
    if not skips.in_ci():
        pytest.skip("no pyannote env (bash scripts/pyannote_env.sh makes .pyannote-env)")
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "pyannote_env.sh")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return out.stdout.strip().splitlines()[-1]


def equality_weights() -> tuple[Path, Path]:
    """(the folder of weights and pyannote's outputs, the clip as a 16 kHz WAV in it)."""
    if not CLIP.exists():
        pytest.fail(f"{CLIP} is missing (the shared eval recordings)")
    python = pyannote_python()
    key = hashlib.sha256((ROOT / "bench" / "segmentation_equal.py").read_bytes()).hexdigest()
    folder = CACHE / f"segmentation-equal-{key[:12]}"
    folder.mkdir(parents=True, exist_ok=True)
    clip = folder / f"{CLIP.stem}-{START:g}-{SECONDS:g}.wav"
    if not clip.exists():
        audio = se.read_audio(CLIP, None)[int(START * 16000) : int((START + SECONDS) * 16000)]
        with wave.open(str(clip), "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(16000)
            out.writeframes((np.clip(audio, -1, 1 - 2**-15) * 32768).astype("<i2").tobytes())
    se.run_pyannote(folder, [clip], None, python)
    return folder, clip
