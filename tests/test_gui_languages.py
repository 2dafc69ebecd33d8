"""The language menu offers several languages to detect among: chosen in the real combo and
its checkable list (offscreen Qt, keyboard and mouse), saved in the settings, carried into the
file job run by the engine process (real tiny.en and multilingual base models) and into the
live window's streaming options; the transcript view names both languages of a recording."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.register_assert_rewrite("files_support")
pytest_plugins = ["files_support"]  # fixtures: media, ctx, window

from PySide6.QtCore import Qt  # noqa: E402

from conftest import espeak, load  # noqa: E402
from deskscribe.gui.file_options import FileOptions  # noqa: E402
from deskscribe.gui.live_panel import LivePanel  # noqa: E402
from deskscribe.gui.settings_dialog import SettingsDialog  # noqa: E402
from deskscribe.gui.widgets import LanguageCombo  # noqa: E402
from files_support import run_queue, status_cell  # noqa: E402
from media import write_media  # noqa: E402
from test_languages import DE, EN, ENGLISH_ONLY, GERMAN_ONLY  # noqa: E402


def settings_file() -> dict:
    return json.loads(Path(os.environ["DESKSCRIBE_SETTINGS"]).read_text())


def pick_languages(qtbot, combo: LanguageCombo, codes: list[str], start_with=()) -> None:
    """As a user: open the menu, click "Detect among several…", tick ``codes`` in the list
    (type to find, Space to tick), OK. ``start_with``: what the list shows ticked on opening."""
    combo.showPopup()
    view = combo.view()
    row = combo.model().index(combo.findData("__several__"), 0)
    view.scrollTo(row)
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=view.visualRect(row).center())
    qtbot.waitUntil(lambda: combo.dialog is not None and combo.dialog.isVisible(), timeout=5000)
    dialog = combo.dialog
    assert dialog is not None and dialog.isVisible()
    assert dialog.codes() == tuple(start_with)
    for code in codes:
        if code in dialog.codes():
            continue
        dialog.filter.clear()
        qtbot.keyClicks(dialog.filter, dialog.item(code).text()[:4])
        visible = [dialog.list.item(i) for i in range(dialog.list.count())]
        assert dialog.item(code) in [i for i in visible if not i.isHidden()]
        dialog.list.setCurrentItem(dialog.item(code))
        qtbot.keyClick(dialog.list, Qt.Key.Key_Space)
    assert dialog.codes() == (*start_with, *[c for c in codes if c not in start_with])
    qtbot.mouseClick(dialog.ok_button, Qt.MouseButton.LeftButton)
    assert not dialog.isVisible()


def test_two_languages_are_saved_and_reach_the_file_job(qtbot, window, ctx, media):
    win, files, _view, _lib = window
    combo = files.options.language
    assert combo.currentText() == "Detect automatically"
    with qtbot.waitSignal(combo.changed):
        pick_languages(qtbot, combo, ["en", "de"])
    assert combo.currentText() == "English, German"
    assert (combo.code(), combo.codes()) == (None, ("en", "de"))
    saved = settings_file()
    assert saved["languages"] == ["en", "de"] and "language" not in saved
    # Cancelling the list again changes nothing.
    qtbot.keyClick(combo, Qt.Key.Key_Down)  # from the set to "Detect among several…"
    assert combo.dialog.isVisible() and combo.dialog.codes() == ("en", "de")
    combo.dialog.reject()
    assert combo.currentText() == "English, German" and combo.codes() == ("en", "de")
    # The app started again shows the same choice.
    again = FileOptions(ctx)
    qtbot.addWidget(again)
    assert again.language.currentText() == "English, German"
    assert again.languages_choice() == ("en", "de")

    # The queued job carries the set, and the engine process transcribes with it: the
    # English-only tiny.en says it cannot tell German apart, and the file fails saying so.
    rows = run_queue(qtbot, files, [media["fox"]], target=win)
    row = rows["fox.mp3"]
    item = ctx.library.get(row.item_id)
    assert item.options["languages"] == ["en", "de"] and item.options["language"] is None
    assert row.status == "failed"
    assert "English-only" in row.error and "cannot detect or transcribe de" in row.error
    assert "multilingual model" in status_cell(files, "fox.mp3")

    # Back to one forced language: the set goes from the settings, the job forces English.
    combo.set_code("en")
    assert settings_file()["language"] == "en" and "languages" not in settings_file()
    files.options.redo.setChecked(True)
    row = run_queue(qtbot, files, [media["fox"]])["fox.mp3"]
    assert row.status == "done", row.error
    assert "languages" not in ctx.library.get(row.item_id).options


@pytest.fixture(scope="module")
def english_then_german(speech_dir: Path, tmp_path_factory) -> Path:
    en = load(espeak(EN, speech_dir / "lang-en.wav", voice="en-us", speed=140))
    de = load(espeak(DE, speech_dir / "lang-de.wav", voice="de", speed=140))
    gap = np.zeros(16000, np.float32)
    audio = np.concatenate([en, gap, de, gap])
    out = tmp_path_factory.mktemp("languages") / "meeting.wav"
    return write_media(out, audio[None, :], rate=16000)


def test_a_recording_in_two_languages_is_written_in_both(
    qtbot, window, ctx, base_fp32, english_then_german
):
    """Multilingual base, detection limited to English and German: each part in its own
    language, and the transcript view says "en, de"."""
    _win, files, view, _lib = window
    (Path(os.environ["DESKSCRIBE_MODELS_DIR"]) / "base").symlink_to(base_fp32)
    ctx.models_changed.emit()
    options = files.options
    qtbot.waitUntil(lambda: options.model.findData("base") >= 0, timeout=20_000)
    options.model.setCurrentIndex(options.model.findData("base"))
    pick_languages(qtbot, options.language, ["de", "en"])
    assert options.language.currentText() == "German, English"

    row = run_queue(qtbot, files, [english_then_german], timeout=600_000)["meeting.wav"]
    assert row.status == "done", row.error
    item = ctx.library.get(row.item_id)
    assert item.options["model"] == "base" and item.options["languages"] == ["de", "en"]
    transcript = ctx.library.load_transcript(row.item_id)
    words = {
        (s.language, w.strip(".,").lower()) for s in transcript.segments for w in s.text.split()
    }
    assert {lang for lang, _ in words} == {"en", "de"}
    assert {w for lang, w in words if lang == "en"} & ENGLISH_ONLY
    assert {w for lang, w in words if lang == "de"} & GERMAN_ONLY

    files.select(row.item_id)
    with qtbot.waitSignal(view.loaded, timeout=20_000):
        files.open_selected()
    meta = view.meta.text().split(" · ")
    assert meta[0] == "meeting.wav"
    assert sorted(meta[2].split(", ")) == ["de", "en"], view.meta.text()


def test_settings_dialog_turns_a_forced_language_into_a_set(qtbot, ctx):
    ctx.set("language", "fr")
    dialog = SettingsDialog(ctx)
    qtbot.addWidget(dialog)
    dialog.show()
    combo = dialog.language
    assert combo.currentText() == "French (fr)"
    pick_languages(qtbot, combo, ["fr", "de"], start_with=("fr",))  # French ticked already
    assert combo.currentText() == "French, German"
    with qtbot.waitSignal(dialog.accepted, timeout=10_000):
        qtbot.mouseClick(dialog.save_btn, Qt.MouseButton.LeftButton)
    saved = settings_file()
    assert saved["languages"] == ["fr", "de"] and "language" not in saved
    # What `deskscribe config languages en,de` writes (text) is read the same way.
    ctx.set("languages", "en, de")
    assert restored(qtbot, ctx) == (None, ("en", "de"))
    # Only one ticked: that language is forced, no set.
    combo.set_codes(["it"])
    assert (combo.code(), combo.codes(), combo.currentText()) == ("it", (), "Italian (it)")


def restored(qtbot, ctx) -> tuple:
    combo = LanguageCombo()
    qtbot.addWidget(combo)
    combo.restore(ctx)
    return combo.code(), combo.codes()


def test_live_window_detects_among_the_chosen_languages(qtbot, ctx):
    """The live window's streaming options carry the set; tiny.en refuses it on Start."""
    panel = LivePanel(ctx)
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: panel.devices_known or panel.banner.isVisible(), timeout=20_000)
    combo = panel.picker.language
    pick_languages(qtbot, combo, ["en", "de"])
    streaming = panel.options().streaming
    assert (streaming.language, streaming.languages) == (None, ("en", "de"))
    panel.start()
    qtbot.waitUntil(lambda: "English-only" in panel.banner.text.text(), timeout=60_000)
    assert panel.state == "idle" and panel.banner.kind == "error"
    assert panel.banner.text.text().startswith("Cannot start: this model is English-only")
    assert "cannot detect or transcribe de" in panel.banner.text.text()
