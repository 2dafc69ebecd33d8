"""Shared start of both frozen programs (bundled as a module; imported by entry_*.py).

- ``multiprocessing.freeze_support()``: the file queue's engine runs in a spawned child, which
  in a frozen app starts this same executable; it must hand over to multiprocessing first.
- The offline starter models ship beside the bundle, not in it (the bundle stays under its
  350 MB target): a folder of the starter's unpacked PyPI packages, ``starter/`` in the
  install folder (Windows, optional component) or ``deskscribe-starter/`` next to the bundle's
  folder (Linux: /opt/deskscribe-starter from the deskscribe-starter .deb, or build/dist/ in a
  build tree). When present it goes on ``sys.path``, so ``deskscribe models install-starter``
  finds the packages exactly as from pip (and checks their sha256 as always).
- The notes runtime (llama.cpp's server through xllamacpp, the openai client) ships beside
  the bundle in the same way, for the same reason: ``notes/`` in the install folder or
  ``deskscribe-notes/`` next to the bundle's folder (/opt/deskscribe-notes from the
  deskscribe-notes .deb). It goes on ``sys.path`` after the bundle's own modules.
- ``--self-test-window REPORT``: the self-test's offscreen main-window smoke, run in each
  program of the bundle (selftest.window_smoke).
"""

import multiprocessing
import sys
from pathlib import Path


def starter_folders(exe: Path) -> list[Path]:
    here = exe.resolve().parent
    return [p for p in (here / "starter", here.parent / "deskscribe-starter") if p.is_dir()]


def notes_folders(exe: Path) -> list[Path]:
    here = exe.resolve().parent
    return [p for p in (here / "notes", here.parent / "deskscribe-notes") if p.is_dir()]


def main() -> int:
    multiprocessing.freeze_support()
    exe = Path(sys.executable)
    sys.path.extend(str(p) for p in starter_folders(exe) + notes_folders(exe))
    argv = sys.argv[1:]
    if len(argv) == 2 and argv[0] == "--self-test-window":
        from deskscribe.selftest import window_smoke

        return window_smoke(argv[1])
    from deskscribe.cli import main as cli_main

    return cli_main(argv)
