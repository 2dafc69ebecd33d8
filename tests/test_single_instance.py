"""One running app: with the window open (a real one, under Xvfb), ``deskscribe FILE`` hands
the file to it and exits, and the first window's queue transcribes it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from conftest import espeak
from deskscribe.library import Library
from gui_support import app_env, install_test_model, start_xvfb  # noqa: F401 (fixture)


def test_a_second_start_hands_its_files_to_the_open_window(app_env, tiny_fp32, qapp):  # noqa: F811
    from deskscribe.gui.single import hand_over

    install_test_model(app_env, tiny_fp32)
    wav = espeak("Remember to water the plants on Sunday.", app_env.root / "second.wav")
    display = ":94"
    xvfb = start_xvfb(display)
    env = {**os.environ, **app_env.env(), "DISPLAY": display, "QT_QPA_PLATFORM": "xcb",
           "XDG_RUNTIME_DIR": str(app_env.root)}  # fmt: skip
    first = subprocess.Popen([sys.executable, "-m", "deskscribe"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not hand_over([]):  # (this process has the same user and data folder)
            assert first.poll() is None, first.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the first window never listened"
            time.sleep(0.2)
        began = time.monotonic()
        second = subprocess.run([sys.executable, "-m", "deskscribe", str(wav)], env=env,
                                capture_output=True, text=True, timeout=30)  # fmt: skip
        took = time.monotonic() - began
        assert second.returncode == 0, second.stderr
        print(f"the second start handed its file over and exited in {took:.1f} s")
        library = Library(app_env.data / "library.sqlite3")
        deadline = time.monotonic() + 120
        while not [i for i in library.search(kind="file") if i.status == "done"]:
            assert first.poll() is None, first.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the first window did not transcribe the file"
            time.sleep(0.2)
        [item] = library.search(kind="file")
        assert item.source == str(wav)
        assert "sunday" in library.load_transcript(item.id).text.lower()
    finally:
        first.terminate()
        first.wait(timeout=30)
        xvfb.terminate()
        xvfb.wait(timeout=10)
