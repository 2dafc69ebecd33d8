"""Run the real DeskScribe window and record system audio from SOURCE until killed.

    python tests/drivers/record_system_audio.py SOURCE      (e.g. my_sink.monitor)

The app starts exactly as ``deskscribe`` starts it (``gui.app.create_application`` and
``open_main_window``); once its start-up is through and the device list is in, the Live
page picks SOURCE as system audio and starts, as a user's clicks would. Then the event loop
runs until the process is stopped: the crash tests kill it mid-sentence.
"""

from __future__ import annotations

import sys

from PySide6.QtCore import Qt

from deskscribe.gui.app import create_application, open_main_window


def main(source: str) -> int:
    app = create_application()
    window = open_main_window(app)
    panel = window.live_panel

    def record() -> None:
        panel.set_source("system")
        if not panel.select_device("system", source):
            print(f"no system audio source {source!r}", file=sys.stderr)
            app.exit(3)
            return
        window.go("Live")
        panel.start()

    def when_devices_known() -> None:
        if panel.devices_known:
            record()
        else:
            panel.devices_ready.connect(record, Qt.ConnectionType.SingleShotConnection)

    window.start_up_done.connect(when_devices_known, Qt.ConnectionType.SingleShotConnection)
    return app.exec()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
