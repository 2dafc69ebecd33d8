"""Ask and Translate in the app, driven as a user drives them, with a real language model (the
offline starter, SmolLM2-135M, on the built-in llama.cpp server, found in the model store as
the app finds it): the Library's Ask… asks across a real library, the answer streams, a line
it cites opens that recording there; Cancel stops the model within a second; a library with
nothing that matches says so before any model starts. The export dialog's "Translate to…"
checks the language typed, and `TranslateRunner` translates on a worker with a progress
dialog whose Cancel stops it within a second and changes nothing. A 135M model answers and
translates poorly: what is checked is the path and its guarantees, not the wording."""

from __future__ import annotations

import copy
import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.register_assert_rewrite("files_support")
pytest_plugins = ["files_support"]  # fixtures: ctx, window, model_store

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QDialog, QPushButton, QWidget  # noqa: E402

from deskscribe.gui.ask_dialog import GUESS, AskDialog, citation_text, streamed_answer  # noqa: E402
from deskscribe.gui.export_dialog import (  # noqa: E402
    ExportDialog,
    TranslateRunner,
    copy_translation,
)
from deskscribe.llm.ask import Answer, Citation  # noqa: E402
from deskscribe.service.translate import untranslated  # noqa: E402
from files_support import made  # noqa: E402

LEFT = Qt.MouseButton.LeftButton
BUDGET = [
    "Welcome everyone, let's go over the quarterly budget.",
    "Marketing spent forty thousand dollars last quarter.",
    "We agreed to cut the travel budget by ten percent.",
    "Finance will send the revised spreadsheet on Friday.",
]
HIKING = [
    "We started the hike at the trailhead at six in the morning.",
    "The trail climbed through the forest to a ridge.",
    "We camped by the glacier lake that night.",
    "At the lake we saw mountain goats and a black bear.",
    "The next day we walked down in the rain.",
]
BAKING = [
    "Today we bake sourdough bread in the kitchen.",
    "Mix the flour, the water and the starter in a large bowl.",
    "The dough rests overnight in the fridge.",
    "Bake it for forty minutes in a hot oven.",
]


@pytest.fixture
def library(ctx, model_store) -> dict[str, int]:
    """Three recordings in the app's library: a budget meeting, a hiking trip, a baking class."""
    ids = {}
    for title, lines in (("Budget meeting", BUDGET), ("Hiking trip", HIKING),
                         ("Baking class", BAKING)):  # fmt: skip
        ids[title] = ctx.library.add_file(ctx.data_dir / f"{title}.wav", {})
        ctx.library.save_transcript(ids[title], made(lines))
        ctx.library.update(ids[title], status="done", duration=40.0)
    return ids


def _click_row(qtbot, dialog: AskDialog, row: int) -> None:
    widget = dialog.citations
    rect = widget.visualItemRect(widget.item(row))
    qtbot.mouseClick(widget.viewport(), LEFT, pos=rect.center())


def test_ask_across_the_library_and_a_cited_line_opens_its_recording_there(
    qtbot, ctx, window, library, tmp_path
):
    win, _files, view, panel = window
    win.go("Library")
    qtbot.mouseClick(panel.ask_button, LEFT)
    dialog = panel.ask_dialog
    assert dialog is not None and dialog.isVisible() and dialog.windowTitle() == "Ask the library"
    qtbot.keyClicks(dialog.question, "Which animals did they see at the glacier lake?")
    with qtbot.waitSignal(dialog.ended, timeout=120_000) as ended:
        qtbot.mouseClick(dialog.ask_button, LEFT)
        assert dialog.running and dialog.cancel_button.isVisible()
        assert not dialog.ask_button.isEnabled()
    assert ended.args == ["done"], dialog.status.text()
    answer = dialog.answer
    print(answer.to_dict())
    assert "built in (on this computer)" in dialog.status.text()
    assert answer.sources[0] == (library["Hiking trip"], "Hiking trip")
    assert "Hiking trip" in dialog.read.text()
    assert dialog.answer_label.text() == (answer.text or "(the model gave no answer)")
    assert dialog.guess.isVisible() == answer.unsupported == (not answer.citations)
    assert not dialog.cancel_button.isVisible() and dialog.ask_button.isEnabled()
    if answer.unsupported:
        assert dialog.guess.text() == GUESS
        dialog.grab().save(str(tmp_path / "ask-guess.png"))
        # SmolLM2-135M cites no line for this question; show an answer citing a real one,
        # as the dialog shows any answer, so that the click is the user's.
        hiking = ctx.library.load_transcript(library["Hiking trip"]).segments
        cited = Citation(library["Hiking trip"], 3, hiking[3].start, "Hiking trip",
                         hiking[3].text.strip())  # fmt: skip
        answer = Answer("Mountain goats and a black bear.", [cited], sources=answer.sources)
        dialog.show_answer(answer)
        assert not dialog.guess.isVisible()
    assert dialog.citations.isVisible() and dialog.citations.count() == len(answer.citations)
    first = answer.citations[0]
    assert dialog.citations.item(0).text() == citation_text(first)
    assert " — " in citation_text(first) and citation_text(first).startswith(first.title)
    dialog.grab().save(str(tmp_path / "ask-dialog.png"))
    with (
        qtbot.waitSignal(panel.open_at, timeout=2_000) as opened,
        qtbot.waitSignal(view.loaded, timeout=20_000),
        qtbot.waitSignal(view.player_bar.position, timeout=20_000,
                         check_params_cb=lambda t: abs(t - first.start) < 1e-3),
    ):  # fmt: skip
        _click_row(qtbot, dialog, 0)
    assert opened.args == [first.item_id, pytest.approx(first.start)]
    # The main window shows that recording, the cited line selected, the player there.
    assert view.item_id == first.item_id and view.isVisible()
    assert [i.row() for i in view.table.selectionModel().selectedRows()] == [first.line]


def test_cancel_stops_the_answer_within_a_second(qtbot, ctx, library):
    item_id = library["Hiking trip"]
    sources = [(item_id, "Hiking trip", ctx.library.load_transcript(item_id))]
    dialog = AskDialog(ctx, None, sources=sources)
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.windowTitle() == "Ask about Hiking trip"
    qtbot.keyClicks(dialog.question, "Tell everything that happened on the hike, in detail.")
    with qtbot.waitSignal(dialog.ended, timeout=120_000) as ended:
        qtbot.keyClick(dialog.question, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(dialog.streamed) > 0, timeout=120_000)
        clicked = time.monotonic()
        qtbot.mouseClick(dialog.cancel_button, LEFT)
    stopped = time.monotonic() - clicked
    assert ended.args == ["cancelled"], dialog.status.text()
    assert stopped < 1.0, f"the model went on for {stopped:.2f} s after Cancel"
    assert dialog.status.text() == "Cancelled." and dialog.answer is None
    assert dialog.ask_button.isEnabled() and not dialog.cancel_button.isVisible()


def test_nothing_to_ask_and_the_model_s_guess_are_said(qtbot, ctx, model_store):
    dialog = AskDialog(ctx)
    qtbot.addWidget(dialog)
    dialog.show()
    qtbot.mouseClick(dialog.ask_button, LEFT)  # no question: nothing starts
    assert not dialog.running
    qtbot.keyClicks(dialog.question, "What did the budget meeting agree?")
    with qtbot.waitSignal(dialog.ended, timeout=10_000) as ended:
        qtbot.mouseClick(dialog.ask_button, LEFT)
    assert ended.args == ["nothing"]
    assert dialog.status.text().startswith("Nothing to ask: no transcript in the library")
    dialog.show_answer(Answer("Paris.", unsupported=True))
    assert dialog.guess.isVisible() and dialog.guess.text() == GUESS
    assert dialog.answer_label.text() == "Paris." and not dialog.citations.isVisible()
    assert streamed_answer('{"answer": "Ten \\"per') == 'Ten "per'
    assert streamed_answer('{"answer": "caf\\u00') == "caf"
    assert streamed_answer('{"ans') == ""


def test_translate_to_a_language_typed_in_the_export_dialog(qtbot, ctx, model_store, tmp_path):
    t = made(HIKING[:3])
    t.segments[0].translations = {"de": "Wir begannen die Wanderung am Ausgangspunkt."}
    window = QWidget()
    qtbot.addWidget(window)
    dialog = ExportDialog(window, tmp_path / "hike.srt", transcript=t)
    qtbot.addWidget(dialog)
    dialog.show()
    names = [dialog.language.itemText(i) for i in range(dialog.language.count())]
    assert names == ["Original", "German (de)", "Translate to…"]
    assert dialog.choice().language is None and not dialog.translate_to.isVisible()
    dialog.language.setCurrentIndex(2)
    assert dialog.translate_to.isVisible()
    qtbot.keyClicks(dialog.translate_to, "Klingon 2")
    qtbot.mouseClick(dialog.export_button, LEFT)
    assert dialog.isVisible() and dialog.language_error.isVisible()
    assert "is not a language" in dialog.language_error.text()
    dialog.translate_to.clear()
    qtbot.keyClicks(dialog.translate_to, "French")
    assert not dialog.language_error.isVisible()
    qtbot.mouseClick(dialog.export_button, LEFT)
    assert dialog.result() == QDialog.DialogCode.Accepted
    choice = dialog.choice()
    assert (choice.fmt, choice.language, choice.translate) == ("srt", "fr", True)

    before = copy.deepcopy(t)
    runner = TranslateRunner(t, "French", window)
    assert (runner.key, runner.name) == ("fr", "French")
    with qtbot.waitSignal(runner.ended, timeout=120_000) as ended:
        runner.start()
        assert runner.running and runner.progress is not None
    assert ended.args == ["done"]
    assert runner.progress is None  # closed
    out, missing = runner.result
    print([s.translations for s in out.segments], missing)
    assert t == before  # the transcript given is not changed
    assert [(s.id, s.start, s.end, s.text) for s in out.segments] == [
        (s.id, s.start, s.end, s.text) for s in t.segments
    ]
    assert missing == len(untranslated(out, "fr")) < len(t.segments)
    assert sum(1 for s in out.segments if s.translations.get("fr")) == 3 - missing
    assert out.segments[0].translations.get("de") == t.segments[0].translations["de"]

    # Onto the live transcript: by id, where the text is still what was translated.
    live = copy.deepcopy(t)
    live.segments[1].text = " The path went up through the woods to a ridge."
    shared = live.segments[2].translations
    given = copy_translation(live, out, "fr")
    assert given == sum(1 for i in (0, 2) if out.segments[i].translations.get("fr"))
    assert "fr" not in live.segments[1].translations
    for i in (0, 2):
        assert live.segments[i].translations.get("fr") == out.segments[i].translations.get("fr")
    assert live.segments[0].translations["de"] == t.segments[0].translations["de"]
    assert "fr" not in shared  # a new dict, not the one a snapshot may share
    assert live.translation_languages()[:1] == ["de"]
    assert [s.text for s in live.translated("fr").segments][2] == (
        out.segments[2].translations.get("fr") or t.segments[2].text
    )


def test_translate_cancel_stops_within_a_second_and_changes_nothing(qtbot, ctx, model_store):
    t = made(HIKING + BUDGET)
    before = copy.deepcopy(t)
    window = QWidget()
    qtbot.addWidget(window)
    window.show()
    runner = TranslateRunner(t, "de", window)
    with qtbot.waitSignal(runner.ended, timeout=120_000) as ended:
        runner.start()
        qtbot.waitUntil(lambda: runner.streamed > 0, timeout=120_000)
        assert runner.progress.isVisible() and "Translating into German" in (
            runner.progress.labelText()
        )
        cancel = runner.progress.findChild(QPushButton)
        clicked = time.monotonic()
        qtbot.mouseClick(cancel, LEFT)
    stopped = time.monotonic() - clicked
    assert ended.args == ["cancelled"]
    assert stopped < 1.0, f"the model went on for {stopped:.2f} s after Cancel"
    assert runner.result is None and runner.progress is None and not runner.running
    assert t == before
