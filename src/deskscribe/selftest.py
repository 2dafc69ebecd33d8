"""``deskscribe --self-test``: is this installation whole? Works in the frozen app too.

Reports versions, ONNX Runtime providers, audio devices, the model store, and transcribes a
short built-in clip (``assets/selftest.flac``, espeak-ng saying "The quick brown fox jumps
over the lazy dog.") with the first installed model. Exit code 0 when every check that could
run passed; 1 when one failed (each failure says what to do).
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from . import __version__

CLIP = Path(__file__).resolve().parent / "assets" / "selftest.flac"
CLIP_TEXT = "the quick brown fox jumps over the lazy dog"


def _line(ok: bool | None, what: str, detail: str) -> bool:
    mark = {True: "ok  ", False: "FAIL", None: "--  "}[ok]
    print(f"[{mark}] {what}: {detail}", flush=True)
    return ok is not False


def run() -> int:
    frozen = getattr(sys, "frozen", False)
    good = _line(
        True,
        "deskscribe",
        f"{__version__} ({'bundled app' if frozen else 'Python package'}), Python "
        f"{platform.python_version()} on {platform.system()} {platform.machine()}",
    )
    good &= _versions()
    good &= _providers()
    good &= _devices()
    good &= _assets()
    good &= _models_and_clip()
    print("self-test passed" if good else "self-test FAILED", flush=True)
    return 0 if good else 1


def _versions() -> bool:
    try:
        import av
        import numpy
        import onnxruntime
        import tokenizers
    except ImportError as err:
        return _line(False, "libraries", f"{err}; reinstall DeskScribe")
    parts = [
        f"onnxruntime {onnxruntime.__version__}",
        f"numpy {numpy.__version__}",
        f"PyAV {av.__version__}",
        f"tokenizers {tokenizers.__version__}",
    ]
    try:
        import PySide6

        parts.append(f"PySide6 {PySide6.__version__}")
    except ImportError:
        parts.append("PySide6 missing (the desktop app will not start)")
    return _line(True, "libraries", ", ".join(parts))


def _providers() -> bool:
    from .whisper.runtime import available_providers

    providers = available_providers()
    return _line(
        "CPUExecutionProvider" in providers, "ONNX Runtime providers", ", ".join(providers)
    )


def _devices() -> bool:
    from .audio.devices import CaptureDeviceError, list_devices

    for kind in ("mic", "system"):
        try:
            names = [d.name for d in list_devices(kind)]
        except CaptureDeviceError as err:
            _line(None, f"{kind} devices", str(err).splitlines()[0])
            continue
        _line(None if not names else True, f"{kind} devices", ", ".join(names) or "none found")
    return True  # no sound device is not a broken installation


def _assets() -> bool:
    from .audio.vad import MODEL_PATH, speech_regions

    if not MODEL_PATH.exists() or not CLIP.exists():
        return _line(False, "assets", f"missing {MODEL_PATH.name} or {CLIP.name}; reinstall")
    from .audio.decode import decode_audio

    regions = speech_regions(decode_audio(CLIP))
    return _line(bool(regions), "voice activity detector", f"{len(regions)} speech region(s)")


def _models_and_clip() -> bool:
    from .models.store import list_models, store_dir

    models = list_models()
    if not models:
        _line(
            None,
            "models",
            f"none installed in {store_dir()} (run `deskscribe models install-starter`)",
        )
        return True
    _line(True, "models", ", ".join(m.name for m in models) + f" in {store_dir()}")
    from .errors import EngineError
    from .service.files import transcribe_media
    from .service.models import ModelCache
    from .whisper.model import ModelNotBuiltError
    from .whisper.transcribe import TranscribeOptions

    try:
        model = ModelCache().model(str(models[0].path))
        transcript = transcribe_media(model, CLIP, TranscribeOptions(language="en", beam_size=None))
    except (ModelNotBuiltError, EngineError, MemoryError) as err:
        first = (str(err) or type(err).__name__).splitlines()[0]
        return _line(False, f"transcription with {models[0].name}", first)
    heard = " ".join("".join(c for c in transcript.text.lower() if c.isalnum() or c == " ").split())
    expected = set(CLIP_TEXT.split())
    matched = len(expected & set(heard.split())) / len(expected)
    return _line(
        matched >= 0.6,
        f"transcription ({model.name} on {model.runtime.label})",
        repr(transcript.text.strip()),
    )
