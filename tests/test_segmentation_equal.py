"""Our segmentation pipeline (``speakers/segmentation.py``) equals pyannote.audio's own on the
same weights, on 18 s of a real AMI clip; and changing one step of ours breaks the equality.

pyannote runs in its own environment (torch, never in ours): ``$DESKSCRIBE_PYANNOTE_PYTHON``
or ``.pyannote-env/bin/python`` (``scripts/pyannote_env.sh`` makes it). Without it the test
skips, except with ``CI=true``, where it is created first. Weights, ONNX exports and
pyannote's outputs are built by ``bench/segmentation_equal.py`` and cached in the test cache.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import wave

import numpy as np
import pytest

import skips
from conftest import CACHE, EVAL, ROOT

sys.path.insert(0, str(ROOT / "bench"))
import segmentation_equal as se

CLIP, START, SECONDS = EVAL / "ami" / "trn02.wav", 0.0, 18.0
STAGES = ("seg", "count", "emb", "clusters", "diar", "excl")


def _pyannote_python() -> str:
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


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, float]]:
    if not CLIP.exists():
        pytest.fail(f"{CLIP} is missing (the shared eval recordings)")
    python = _pyannote_python()
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
    runs = se.run_ours(folder, [clip], None, {"ours": {}} | se.SABOTAGE)
    return {name: rows[clip.stem] for name, rows in runs.items()}


def test_equal_to_pyannote(results):
    row = results["ours"]
    assert row["pyannote_speakers"] >= 2, "the weights must give more than one speaker"
    low = {k: row[k] for k in STAGES if row[k] < se.TOLERANCE}
    assert not low, f"below {se.TOLERANCE:.0%} of frames: {low}"
    assert row["emb_diff"] < 1e-4


@pytest.mark.parametrize("name", sorted(se.SABOTAGE))
def test_changed_step_breaks_equality(results, name):
    row = results[name]
    assert min(row[k] for k in STAGES) < se.TOLERANCE - 0.02, row
