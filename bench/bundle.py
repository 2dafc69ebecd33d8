"""Size of the Linux bundle and .deb, and cold-start time of the frozen app to its window.

    bash installers/linux/build.sh && python bench/bundle.py [--runs 3]

Start time is measured under Xvfb: from launching ``deskscribe-cli`` (no arguments: the app)
to the first screen grab that shows a drawn window (grabs every 50 ms from a separate Qt
process). The first run is cold: the page cache is dropped before it (as root, where
``/proc/sys/vm/drop_caches`` can be written; otherwise it says so), as after a reboot; the
others are warm. Sizes are given in MiB and in MB (10^6 bytes). Targets (issue 7): bundle
without models <= 350 MB, window visible <= 3 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT

BUNDLE = ROOT / "build" / "dist" / "deskscribe"
WATCH = """
import sys, time
from PySide6.QtGui import QGuiApplication
app = QGuiApplication([])
print("ready", flush=True)
sys.stdin.readline()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    image = app.primaryScreen().grabWindow(0).toImage()
    colours = {image.pixel(x, y) for x in range(0, image.width(), 32) for y in range(0, image.height(), 32)}
    if len(colours) > 20:
        print(time.monotonic(), flush=True)
        sys.exit(0)
    time.sleep(0.05)
sys.exit(1)
"""


def size_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def size_mb(path: Path) -> float:
    """MiB."""
    return size_bytes(path) / 2**20


def sizes(path: Path) -> str:
    n = size_bytes(path)
    return f"{n / 2**20:.0f} MiB ({n / 1e6:.0f} MB)"


def drop_page_cache() -> bool:
    """Forget every cached file page (as after a reboot); False when not allowed."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def start_once(display: str, home: Path) -> float:
    env = {**os.environ, "DISPLAY": display, "QT_QPA_PLATFORM": "xcb"}
    watcher = subprocess.Popen(
        [sys.executable, "-c", WATCH],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert watcher.stdout.readline().strip() == "ready"
    app_env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "DISPLAY": display,
        "QT_QPA_PLATFORM": "xcb",
        "DESKSCRIBE_DATA_DIR": str(home / "data"),
        "DESKSCRIBE_SETTINGS": str(home / "settings.json"),
        "DESKSCRIBE_MODELS_DIR": str(home / "models"),
        "XDG_RUNTIME_DIR": str(home),
    }
    watcher.stdin.write("go\n")
    watcher.stdin.flush()
    started = time.monotonic()
    app = subprocess.Popen(
        [str(BUNDLE / "deskscribe-cli")],
        env=app_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        line = watcher.stdout.readline().strip()
        watcher.wait(timeout=70)
        if watcher.returncode != 0 or not line:
            raise RuntimeError("the window did not appear within 60 s")
        return float(line) - started
    finally:
        app.terminate()
        app.wait(timeout=10)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    if not (BUNDLE / "deskscribe-cli").exists():
        raise SystemExit("no bundle: run `bash installers/linux/build.sh` first")
    debs = sorted((ROOT / "build").glob("deskscribe_*.deb"))
    print(f"bundle {BUNDLE.relative_to(ROOT)}: {sizes(BUNDLE)} (target <= 350 MB)")
    if debs:
        print(f"package {debs[-1].name}: {sizes(debs[-1])}")
    biggest = sorted(
        ((size_mb(p), p.name) for p in (BUNDLE / "_internal").iterdir()), reverse=True
    )[:8]
    print("largest parts: " + ", ".join(f"{name} {mb:.0f} MiB" for mb, name in biggest))
    display = ":94"
    xvfb = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cold = drop_page_cache()
            times = [start_once(display, Path(tmp)) for _ in range(args.runs)]
    finally:
        xvfb.terminate()
    first = "cold (page cache dropped)" if cold else "page cache NOT dropped (needs root)"
    print(
        "start to window: "
        + ", ".join(f"{t:.2f} s" for t in times)
        + f" (first run {first}, then warm; target <= 3 s); load avg {os.getloadavg()[0]:.1f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
