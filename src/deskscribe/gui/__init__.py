"""The desktop app (PySide6). Only this package imports Qt; see `gui.app.main`."""
