"""Frozen entry of the windowed app (DeskScribe.exe / DeskScribe.app): the desktop app."""

import multiprocessing
import sys

if __name__ == "__main__":
    # The file queue runs the engine in a child process: in a frozen app that child starts
    # this same executable, which must hand over to multiprocessing before anything else.
    multiprocessing.freeze_support()
    from deskscribe.cli import main

    sys.exit(main(sys.argv[1:]))
