"""Frozen entry of the windowed app (DeskScribe.exe / DeskScribe.app): the desktop app."""

import sys

from frozen_setup import main

if __name__ == "__main__":
    sys.exit(main())
