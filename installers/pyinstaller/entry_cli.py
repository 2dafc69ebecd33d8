"""Frozen entry of the console program (deskscribe-cli): the command line; no arguments opens the app."""

import sys

from frozen_setup import main

if __name__ == "__main__":
    sys.exit(main())
