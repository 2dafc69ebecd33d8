"""Draw the app icon (src/deskscribe/assets/icon.png): a speech waveform turning into lines
of text on a blue rounded square. Run once after changing it: python tools/make_icon.py"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QColor, QGuiApplication, QImage, QLinearGradient, QPainter

OUT = Path(__file__).resolve().parents[1] / "src" / "deskscribe" / "assets" / "icon.png"


def draw(size: int = 512) -> QImage:
    img = QImage(size, size, QImage.Format.Format_ARGB32)
    img.fill(Qt.GlobalColor.transparent)
    p = QPainter(img)
    p.setRenderHint(QPainter.RenderHint.Antialiasing)
    s = size / 512
    grad = QLinearGradient(QPointF(0, 0), QPointF(0, size))
    grad.setColorAt(0, QColor("#3b82f6"))
    grad.setColorAt(1, QColor("#1d4ed8"))
    p.setPen(Qt.PenStyle.NoPen)
    p.setBrush(grad)
    p.drawRoundedRect(QRectF(16 * s, 16 * s, 480 * s, 480 * s), 104 * s, 104 * s)
    p.setBrush(QColor("#ffffff"))
    # Waveform on the left: bars of varying height around the middle.
    heights = (70, 150, 230, 130, 190, 90)
    for i, h in enumerate(heights):
        x = (84 + i * 34) * s
        p.drawRoundedRect(QRectF(x, (256 - h / 2) * s, 20 * s, h * s), 10 * s, 10 * s)
    # Text lines on the right.
    for i, w in enumerate((150, 120, 150, 90)):
        y = (166 + i * 52) * s
        p.drawRoundedRect(QRectF(300 * s, y, w * s * 0.95, 26 * s), 13 * s, 13 * s)
    p.end()
    return img


def main() -> int:
    QGuiApplication(sys.argv[:1])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    draw(256).save(str(OUT))
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
