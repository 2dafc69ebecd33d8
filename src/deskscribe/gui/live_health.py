"""The live window's health panel: the measured figures of a live session, on demand.

The live page always shows the compact state next to the model ("keeping up", "3 s behind");
this panel (the "Details" button) shows what the session measured (``service.live.health``):
decode times, commit latency, lost input, CPU, memory, model and device, the budgets a reading
breaks, and every switch the session made to keep up (``Adapted`` events).
"""

from __future__ import annotations

from html import escape

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QToolButton

from ..service.live import Adapted, Health

WARN_STYLE = "color: #c01c28;"


class HealthDetails(QLabel):
    """The figures as a small table; hidden until the Details button is pressed."""

    def __init__(self) -> None:
        super().__init__()
        self.setTextFormat(Qt.TextFormat.RichText)
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setWordWrap(True)
        self.health: Health | None = None
        self.switches: list[Adapted] = []
        self.hide()
        self.button = QToolButton()
        self.button.setText("Details")
        self.button.setCheckable(True)
        self.button.setToolTip("Show how the live engine is doing: speed, lag, lost input, CPU")
        self.button.toggled.connect(self.setVisible)
        self.button.setEnabled(False)

    def clear(self) -> None:
        self.health, self.switches = None, []
        self.setText("")
        self.button.setEnabled(False)

    def show_health(self, health: Health) -> None:
        self.health = health
        self.button.setEnabled(True)
        self._render()

    def add_switch(self, event: Adapted) -> None:
        self.switches.append(event)
        self._render()

    def _render(self) -> None:
        h = self.health
        rows = h.detail() if h is not None else []
        html = "<table cellspacing=2>" + "".join(
            f"<tr><td><b>{escape(name)}</b>&nbsp;&nbsp;</td><td>{escape(value)}</td></tr>"
            for name, value in rows
        )
        html += "</table>"
        if h is not None and h.warnings:
            html += "".join(
                f'<div style="{WARN_STYLE}">Over budget: {escape(w)}</div>' for w in h.warnings
            )
        for s in self.switches[-5:]:
            verb = "Stepped down to" if s.down else "Back to"
            html += f"<div>{escape(verb)} “{escape(s.level)}” at {s.at:.0f} s ({escape(s.reason)})</div>"
        self.setText(html)
