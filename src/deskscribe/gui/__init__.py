"""The desktop app (PySide6). Only this package imports Qt; see `gui.app.main`."""

from .compat import guard_singletons

guard_singletons()  # before any Qt call: see compat (PySide6 6.12 on Python < 3.12)
