"""The frozen Linux app (PyInstaller bundle) and its .deb, as users get them.

``bash scripts/test.sh`` builds them first (installers/linux/build.sh, a few minutes); when
run without a build, these tests are skipped with the command that makes one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, espeak, wer

BUNDLE = ROOT / "build" / "dist" / "deskscribe"
EXE = BUNDLE / "deskscribe-cli"
BUILD_HINT = "build it with `bash installers/linux/build.sh` (scripts/test.sh does)"

GRAB = """
import sys, time
from PySide6.QtGui import QGuiApplication
app = QGuiApplication([])
deadline = time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    image = app.primaryScreen().grabWindow(0).toImage()
    # Xvfb's empty screen is one colour; the window is many.
    colours = {image.pixel(x, y) for x in range(0, image.width(), 16) for y in range(0, image.height(), 16)}
    if len(colours) > 20:
        image.save(sys.argv[1])
        print(len(colours))
        sys.exit(0)
    time.sleep(0.2)
sys.exit(1)
"""


@pytest.fixture(scope="module")
def bundle() -> Path:
    if not EXE.exists():
        pytest.skip(f"no Linux bundle in {BUNDLE}: {BUILD_HINT}")
    return BUNDLE


@pytest.fixture()
def store(tmp_path, tiny_fp32) -> Path:
    folder = tmp_path / "store"
    folder.mkdir()
    (folder / "tiny.en").symlink_to(tiny_fp32)
    return folder


def frozen_env(store: Path, tmp_path: Path, **env: str) -> dict[str, str]:
    """A bare environment, as a user's: no venv on PATH, a fresh home and data folder."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "DESKSCRIBE_MODELS_DIR": str(store),
        "DESKSCRIBE_DATA_DIR": str(tmp_path / "data"),
        "DESKSCRIBE_SETTINGS": str(tmp_path / "settings.json"),
        **env,
    }


def frozen(args: list[str], store: Path, tmp_path: Path, exe: Path = EXE):
    return subprocess.run(
        [str(exe), *args],
        env=frozen_env(store, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_self_test_passes_in_the_bundle(bundle, store, tmp_path):
    result = frozen(["--self-test"], store, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "(bundled app)" in result.stdout
    assert "[ok  ] transcription (tiny.en" in result.stdout, result.stdout
    assert "torch" not in {p.name.split(".")[0] for p in (bundle / "_internal").iterdir()}


def test_frozen_transcribe_gives_the_right_text(bundle, store, tmp_path):
    text = "Please send the quarterly report before Friday afternoon."
    clip = espeak(text, tmp_path / "clip.wav")
    out = tmp_path / "out"
    result = frozen(["transcribe", str(clip), "--output-dir", str(out)], store, tmp_path)
    assert result.returncode == 0, result.stderr
    assert wer(text, (out / "clip.txt").read_text()) < 0.2


def start_xvfb(display: str) -> subprocess.Popen:
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (scripts/test.sh installs it)")
    proc = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    socket = Path("/tmp/.X11-unix") / f"X{display[1:]}"
    deadline = time.monotonic() + 10
    while not socket.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc


def test_frozen_app_window_appears_under_xvfb(bundle, store, tmp_path):
    display = ":93"
    xvfb = start_xvfb(display)
    app = None
    try:
        env = {
            "DISPLAY": display,
            "QT_QPA_PLATFORM": "xcb",
            "XDG_RUNTIME_DIR": str(tmp_path),
        }
        app = subprocess.Popen(
            [str(EXE)],
            env=frozen_env(store, tmp_path, **env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        shot = ROOT / "build" / "bundle-window.png"
        grab = subprocess.run(
            [sys.executable, "-c", GRAB, str(shot), "60"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert app.poll() is None, app.stdout.read().decode(errors="replace")
        assert grab.returncode == 0, "no window was drawn within 60 s" + grab.stderr
        assert shot.stat().st_size > 5000
    finally:
        if app is not None:
            app.terminate()
            app.wait(timeout=10)
        xvfb.terminate()


def test_deb_installs_and_deskscribe_is_on_path(bundle, store, tmp_path):
    debs = sorted((ROOT / "build").glob("deskscribe_*.deb"))
    if not debs:
        pytest.skip(f"no .deb in build/: {BUILD_HINT}")
    if os.geteuid() != 0 or shutil.which("dpkg") is None:
        pytest.skip("installing a .deb needs root and dpkg (CI runs as root on Debian)")
    installed_before = subprocess.run(["dpkg", "-s", "deskscribe"], capture_output=True)
    if installed_before.returncode == 0:
        pytest.skip("a deskscribe package is already installed on this machine; not touching it")
    info = subprocess.run(["dpkg-deb", "--info", str(debs[-1])], capture_output=True, text=True)
    assert "Package: deskscribe" in info.stdout
    install = subprocess.run(["dpkg", "-i", str(debs[-1])], capture_output=True, text=True)
    try:
        assert install.returncode == 0, install.stdout + install.stderr
        assert shutil.which("deskscribe", path="/usr/bin") == "/usr/bin/deskscribe"
        assert Path("/usr/share/applications/deskscribe.desktop").exists()
        result = frozen(["--self-test"], store, tmp_path, exe=Path("/usr/bin/deskscribe"))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "(bundled app)" in result.stdout
    finally:
        subprocess.run(["dpkg", "-r", "deskscribe"], capture_output=True)
    assert not Path("/usr/bin/deskscribe").exists()
