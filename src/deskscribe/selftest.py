"""``deskscribe --self-test``: is this installation whole? Works in the frozen app too.

Reports versions, ONNX Runtime providers (and opens a tiny session on each GPU provider, so a
CUDA flavour without its CUDA/cuDNN runtime says why instead of quietly running on the CPU),
audio devices, the model store; builds the main window offscreen in a child process of each
program of the installation (a missing Qt plugin fails here, not at the user's first start);
and transcribes a short built-in clip (``assets/selftest.flac``, espeak-ng saying "The quick
brown fox jumps over the lazy dog.") with the first installed model, in this process and
through the file queue's engine process. Exit code 0 when every check that could run passed;
1 when one failed (each failure says what to do).
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from . import __version__

CLIP = Path(__file__).resolve().parent / "assets" / "selftest.flac"
CLIP_TEXT = "the quick brown fox jumps over the lazy dog"
WINDOW_FLAG = "--self-test-window"  # the frozen entry scripts hand this to `window_smoke`
GPU_PROVIDERS = ("CUDAExecutionProvider", "DmlExecutionProvider", "CoreMLExecutionProvider")
GPU_HELP = {
    "CUDAExecutionProvider": (
        "the CUDA flavour needs an NVIDIA driver, the CUDA 12 runtime and cuDNN 9 on the PATH "
        "(README: Installers); without them DeskScribe runs on the CPU"
    ),
    "DmlExecutionProvider": "DirectML needs Windows 10 1903+ and a DirectX 12 GPU driver",
    "CoreMLExecutionProvider": "Core ML needs macOS 14 or later on Apple silicon",
}
NATIVE_QT_PLATFORM = {"win32": "qwindows", "darwin": "qcocoa", "linux": "qxcb"}


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
    good &= _notes_runtime()
    good &= _assets()
    good &= _windows()
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
    good = _line(
        "CPUExecutionProvider" in providers, "ONNX Runtime providers", ", ".join(providers)
    )
    for provider in (p for p in GPU_PROVIDERS if p in providers):
        used, why = gpu_session(provider)
        if used:
            good &= _line(True, f"{provider} session", "a test graph ran on it")
        else:
            good &= _line(False, f"{provider} session", f"{why}; {GPU_HELP[provider]}")
    return good


def gpu_session(provider: str) -> tuple[bool, str]:
    """Open a one-node ONNX session on `provider` (CPU as fallback) and run it.

    (True, "") when `provider` really ran it; else (False, why): ONNX Runtime's own messages
    (it writes them to the process's stderr, e.g. the CUDA library that did not load), or
    "fell back to the CPU" when it said nothing.
    """
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "selftest", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # readable by every ONNX Runtime DeskScribe allows
    onnx.checker.check_model(model)
    with tempfile.TemporaryFile(mode="w+b") as err, _stderr_to(err):
        try:
            session = ort.InferenceSession(
                model.SerializeToString(), providers=[provider, "CPUExecutionProvider"]
            )
            out = session.run(None, {"x": np.ones((1, 4), np.float32)})[0]
            used = session.get_providers()[0] == provider and bool(np.all(out == 2))
            failure = ""
        except Exception as e:  # ONNX Runtime raises its own Fail/RuntimeException types
            used, failure = False, f"{type(e).__name__}: {e}"
        err.seek(0)
        said = err.read().decode(errors="replace")
    if used:
        return True, ""
    lines = [ln.strip() for ln in said.splitlines() if ln.strip()]
    messages = [ln for ln in lines if "rror" in ln or "ailed" in ln] or lines
    why = failure or " | ".join(messages[-3:]) or "ONNX Runtime fell back to the CPU"
    return False, why[:600]


@contextlib.contextmanager
def _stderr_to(file):
    """Send file descriptor 2 (where ONNX Runtime's C++ logger writes) into `file`."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all (a windowed program): nothing to catch
        yield
        return
    try:
        os.dup2(file.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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


def _notes_runtime() -> bool:
    """The notes runtime (llama.cpp's binding, the openai client): absent is not a broken
    installation (it is an add-on), present but failing to load is."""
    try:
        import xllamacpp
    except ImportError:
        from .llm.endpoint import install_hint

        return _line(None, "notes runtime", f"not installed ({install_hint()})")
    except OSError as err:  # a system library it links is missing
        return _line(False, "notes runtime", f"{err}; reinstall the notes add-on")
    try:
        import openai

        devices = [str(d.get("description") or d.get("name")) for d in xllamacpp.get_device_info()]
    except Exception as err:
        return _line(False, "notes runtime", f"{type(err).__name__}: {err}")
    return _line(
        True,
        "notes runtime",
        f"llama.cpp (xllamacpp {getattr(xllamacpp, '__version__', '?')}) on "
        f"{', '.join(devices) or 'no device'}; openai {openai.__version__}",
    )


def _assets() -> bool:
    from .audio.vad import MODEL_PATH, speech_regions

    if not MODEL_PATH.exists() or not CLIP.exists():
        return _line(False, "assets", f"missing {MODEL_PATH.name} or {CLIP.name}; reinstall")
    from .audio.decode import decode_audio

    regions = speech_regions(decode_audio(CLIP))
    return _line(bool(regions), "voice activity detector", f"{len(regions)} speech region(s)")


def programs() -> list[tuple[str, list[str]]]:
    """(name, command line) of each program of this installation that opens the window.

    Frozen: this executable and, on Windows and macOS, the windowed ``DeskScribe`` beside it
    (two programs of one bundle). From Python: this interpreter.
    """
    if not getattr(sys, "frozen", False):
        code = "import sys; from deskscribe.selftest import window_smoke; sys.exit(window_smoke(sys.argv[1]))"
        return [("python", [sys.executable, "-c", code])]
    exe = Path(sys.executable)
    found = [(exe.name, [str(exe), WINDOW_FLAG])]
    for name in ("DeskScribe.exe", "DeskScribe"):
        other = exe.with_name(name)
        if other.is_file() and other != exe:
            found.append((other.name, [str(other), WINDOW_FLAG]))
            break
    return found


def _windows() -> bool:
    good = True
    for name, command in programs():
        with tempfile.TemporaryDirectory(prefix="deskscribe-selftest-") as tmp:
            report = Path(tmp) / "window.txt"
            env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "DESKSCRIBE_DATA_DIR": tmp}
            try:
                done = subprocess.run(
                    [*command, str(report)], env=env, capture_output=True, text=True, timeout=180
                )
                code, tail = done.returncode, (done.stderr or done.stdout).strip()[-400:]
            except (OSError, subprocess.TimeoutExpired) as e:
                code, tail = None, str(e)
            said = report.read_text(encoding="utf-8").strip() if report.exists() else ""
        ok = code == 0 and said.startswith("ok")
        detail = said.removeprefix("ok ").strip() if ok else (said or tail or f"exit {code}")
        good &= _line(ok, f"main window ({name}, offscreen)", detail)
    return good


def window_smoke(report: str) -> int:
    """In a child process: build the main window offscreen, write "ok ..." or why not."""
    lines: list[str] = []
    try:
        from PySide6.QtCore import QCoreApplication, QObject

        from .gui.app import MainWindow, create_application
        from .gui.context import AppContext

        app = create_application([])
        native = NATIVE_QT_PLATFORM.get(
            "linux" if sys.platform.startswith("linux") else sys.platform
        )
        plugins = [
            p.name
            for d in QCoreApplication.libraryPaths()
            if (Path(d) / "platforms").is_dir()
            for p in (Path(d) / "platforms").iterdir()
        ]
        window = MainWindow(AppContext(Path(os.environ["DESKSCRIBE_DATA_DIR"])))
        window.show()
        for _ in range(5):
            app.processEvents()
        widgets = len(window.findChildren(QObject))
        shown = window.isVisible() and widgets > 20
        window.close()
        window.ctx.library.close()
        if native and not any(
            p.startswith(native) or p.startswith(f"lib{native}") for p in plugins
        ):
            lines.append(f"FAIL: no {native} Qt platform plugin (found {plugins}); reinstall")
        elif not shown:
            lines.append(f"FAIL: the window did not show ({widgets} widgets)")
        else:
            lines.append(f"ok {widgets} widgets, Qt plugins {', '.join(sorted(plugins))}")
    except Exception as e:  # any failure is the finding; report it
        lines.append(f"FAIL: {type(e).__name__}: {e}")
    Path(report).write_text("\n".join(lines), encoding="utf-8")
    return 0 if lines[0].startswith("ok") else 1


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
    good = _line(
        _heard(transcript.text),
        f"transcription ({model.name} on {model.runtime.label})",
        repr(transcript.text.strip()),
    )
    return good & _engine_process(str(models[0].path))


def _heard(text: str) -> bool:
    heard = " ".join("".join(c for c in text.lower() if c.isalnum() or c == " ").split())
    expected = set(CLIP_TEXT.split())
    return len(expected & set(heard.split())) / len(expected) >= 0.6


def _engine_process(model: str) -> bool:
    """The clip as a file-queue job, in the engine's own (spawned) process."""
    from .service.engine import EngineProcess
    from .service.jobs import FileJob

    engine = EngineProcess()
    try:
        result = engine.run(FileJob(source=CLIP, model=model, language="en", batched=False))
    finally:
        engine.close()
    if result.status != "done" or result.transcript is None:
        return _line(False, "file queue engine process", f"{result.status}: {result.error}")
    text = result.transcript.text
    return _line(_heard(text), "file queue engine process", repr(text.strip()))
