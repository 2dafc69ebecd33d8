"""The export dialog and the subtitle rules in Settings, with the real widgets (offscreen): the
format chooses the file's suffix, the subtitle rules show only for SRT and VTT, start from the
settings and come back as typed; the Settings dialog saves and loads them."""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QApplication, QDialogButtonBox, QMessageBox

from deskscribe import settings
from deskscribe.gui.context import AppContext
from deskscribe.gui.export_dialog import ExportDialog, ask_export
from deskscribe.gui.settings_dialog import SettingsDialog
from deskscribe.transcript import SubtitleRules
from gui_support import app_env  # noqa: F401 (fixture)

LEFT = Qt.MouseButton.LeftButton


def _type_into(qtbot, spin, text: str) -> None:
    """Replace a spin box's value by typing, as a user does."""
    spin.setFocus()
    spin.lineEdit().selectAll()
    qtbot.keyClicks(spin.lineEdit(), text)
    spin.interpretText()


def _when_open(act) -> None:
    """Run ``act(dialog)`` on the next modal dialog, once it is open."""

    def attempt() -> None:
        dialog = QApplication.activeModalWidget()
        if dialog is None:
            QTimer.singleShot(20, attempt)
            return
        act(dialog)

    QTimer.singleShot(0, attempt)


def test_srt_asks_for_the_rules_starting_from_the_settings(qtbot, app_env, tmp_path):  # noqa: F811
    settings.set_value("subtitle_max_lines", "1")
    settings.set_value("subtitle_speaker_names", "false")
    start = tmp_path / "call.txt"
    seen = {}

    def choose_srt(dialog: ExportDialog) -> None:
        seen["hidden for txt"] = not dialog.rules_box.isVisibleTo(dialog)
        dialog.format.setCurrentIndex(dialog.format.findData("srt"))
        seen["shown for srt"] = dialog.rules_box.isVisibleTo(dialog)
        seen["path"] = dialog.path.text()
        box = dialog.rules_box
        seen["from settings"] = (box.max_lines.value(), box.speaker_names.isChecked(),
                                 box.max_line_chars.value())  # fmt: skip
        _type_into(qtbot, box.max_line_chars, "30")
        qtbot.mouseClick(dialog.export_button, LEFT)

    _when_open(choose_srt)
    choice = ask_export(None, start)
    assert seen == {"hidden for txt": True, "shown for srt": True,
                    "path": str(tmp_path / "call.srt"), "from settings": (1, False, 42)}  # fmt: skip
    assert choice is not None
    assert (choice.path, choice.fmt) == (tmp_path / "call.srt", "srt")
    assert choice.rules == SubtitleRules(max_line_chars=30, max_lines=1, speaker_names=False)
    # The dialog's choice is for this export only: the settings stay as they were.
    assert settings.subtitle_rules() == SubtitleRules(max_lines=1, speaker_names=False)


def test_other_formats_hide_the_rules_and_return_none(qtbot, app_env, tmp_path):  # noqa: F811
    dialog = ExportDialog(None, tmp_path / "call.vtt")
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.fmt() == "vtt" and dialog.rules_box.isVisible()
    for fmt in ("txt", "docx", "json"):
        dialog.format.setCurrentIndex(dialog.format.findData(fmt))
        assert not dialog.rules_box.isVisible()
        assert dialog.path.text() == str(tmp_path / f"call.{fmt}")
    with qtbot.waitSignal(dialog.accepted, timeout=5_000):
        qtbot.mouseClick(dialog.export_button, LEFT)
    assert dialog.choice().rules is None and dialog.choice().fmt == "json"
    # A name without a suffix gets the format's; an empty one cannot be exported.
    dialog.format.setCurrentIndex(dialog.format.findData("vtt"))
    dialog.path.setText(str(tmp_path / "notes"))
    assert dialog.choice().path == tmp_path / "notes.vtt"
    dialog.path.setText("  ")
    assert not dialog.export_button.isEnabled()


def test_an_existing_file_is_replaced_only_when_the_user_says_so(qtbot, app_env, tmp_path):  # noqa: F811
    target = tmp_path / "call.srt"
    target.write_text("mine")
    dialog = ExportDialog(None, target)
    qtbot.addWidget(dialog)
    dialog.show()
    _when_open(lambda box: box.button(QMessageBox.StandardButton.No).click())
    dialog.accept()
    assert dialog.isVisible() and dialog.result() == 0  # still open: choose another name
    _when_open(lambda box: box.button(QMessageBox.StandardButton.Yes).click())
    with qtbot.waitSignal(dialog.accepted, timeout=5_000):
        dialog.accept()


def test_settings_dialog_saves_and_loads_the_subtitle_rules(qtbot, app_env):  # noqa: F811
    dialog = SettingsDialog(AppContext())
    qtbot.addWidget(dialog)
    dialog.resize(905, 600)
    dialog.show()
    box = dialog.subtitles
    assert box.rules() == SubtitleRules()  # nothing set: the defaults
    assert dialog.sizeHint().height() <= 600 and dialog.sizeHint().width() <= 905
    _type_into(qtbot, box.max_line_chars, "32")
    _type_into(qtbot, box.max_lines, "1")
    _type_into(qtbot, box.max_cue_seconds, "5.5")
    _type_into(qtbot, box.min_cue_gap, "0.12")
    box.speaker_names.setChecked(False)
    save = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Save)
    with qtbot.waitSignal(dialog.accepted, timeout=10_000):
        qtbot.mouseClick(save, LEFT)
    saved = json.loads(app_env.settings.read_text())
    assert {k: v for k, v in saved.items() if k.startswith("subtitle_")} == {
        "subtitle_max_line_chars": 32,
        "subtitle_max_lines": 1,
        "subtitle_max_cue_seconds": 5.5,
        "subtitle_min_cue_gap": 0.12,
        "subtitle_speaker_names": False,
    }
    wanted = SubtitleRules(max_line_chars=32, max_lines=1, max_cue_seconds=5.5,
                           min_cue_gap=0.12, speaker_names=False)  # fmt: skip
    assert settings.subtitle_rules() == wanted
    again = SettingsDialog(AppContext())  # a new start of the app shows the same rules
    qtbot.addWidget(again)
    assert again.subtitles.rules() == wanted and again.values() == dialog.values()
    # Back to the defaults: the settings are unset again, not pinned to today's defaults.
    again.subtitles.set_rules(SubtitleRules())
    with qtbot.waitSignal(again.accepted, timeout=10_000):
        again.save()
    assert not [k for k in json.loads(app_env.settings.read_text()) if k.startswith("subtitle_")]
