"""Look and feel: Fusion with a light or dark palette that follows the operating system."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

ACCENT = "#2f6fd0"

# The sidebar and a few accents; everything else comes from the palette.
STYLE = """
QWidget#sidebar { background: palette(alternate-base); border-right: 1px solid palette(mid); }
QListWidget#nav { background: transparent; border: none; outline: none; font-size: 11pt; }
QListWidget#nav::item { padding: 4px 10px; border-radius: 6px; margin: 1px 0; }
QListWidget#nav::item:selected { background: palette(highlight); color: palette(highlighted-text); }
QListWidget#nav::item:hover:!selected { background: palette(midlight); }
QPushButton { padding: 5px 14px; }
"""


def is_dark(app: QGuiApplication) -> bool:
    scheme = app.styleHints().colorScheme()
    if scheme == Qt.ColorScheme.Dark:
        return True
    if scheme == Qt.ColorScheme.Light:
        return False
    return app.palette().color(QPalette.ColorRole.Window).lightness() < 128


def palette(dark: bool) -> QPalette:
    p = QPalette()
    if dark:
        colors = {
            "Window": "#202124", "WindowText": "#e8eaed", "Base": "#17181a",
            "AlternateBase": "#2a2b2e", "Text": "#e8eaed", "Button": "#2d2e31",
            "ButtonText": "#e8eaed", "ToolTipBase": "#2d2e31", "ToolTipText": "#e8eaed",
            "PlaceholderText": "#9aa0a6", "Mid": "#4a4b4f", "Midlight": "#36373a",
            "Dark": "#111214", "Light": "#3c3d40", "BrightText": "#ffffff",
        }  # fmt: skip
    else:
        colors = {
            "Window": "#f6f7f9", "WindowText": "#1f2328", "Base": "#ffffff",
            "AlternateBase": "#eef1f5", "Text": "#1f2328", "Button": "#ffffff",
            "ButtonText": "#1f2328", "ToolTipBase": "#ffffff", "ToolTipText": "#1f2328",
            "PlaceholderText": "#6b7280", "Mid": "#c9ced6", "Midlight": "#e3e7ed",
            "Dark": "#9aa3ad", "Light": "#ffffff", "BrightText": "#000000",
        }  # fmt: skip
    for role, color in colors.items():
        p.setColor(getattr(QPalette.ColorRole, role), QColor(color))
    p.setColor(QPalette.ColorRole.Highlight, QColor(ACCENT))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor("#ffffff"))
    p.setColor(QPalette.ColorRole.Link, QColor("#5b9cf5" if dark else ACCENT))
    disabled = QColor("#6b6f75" if dark else "#a0a6ae")
    for role in (
        QPalette.ColorRole.Text,
        QPalette.ColorRole.ButtonText,
        QPalette.ColorRole.WindowText,
    ):
        p.setColor(QPalette.ColorGroup.Disabled, role, disabled)
    return p


def apply_theme(app: QApplication) -> None:
    """Fusion everywhere (the same layout on every OS), coloured like the OS: light or dark,
    switching when the user switches."""
    app.setStyle("Fusion")

    def update(*_args) -> None:
        app.setPalette(palette(is_dark(app)))

    update()
    app.setStyleSheet(STYLE)
    app.styleHints().colorSchemeChanged.connect(update)
