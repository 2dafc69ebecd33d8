"""The Notes tab, driven as a user drives it, with a real language model (the offline starter,
SmolLM2-135M, on the built-in llama.cpp server) writing notes of the real phone call: the
words stream in while it writes, Cancel stops it and keeps what was there, the notes are
saved with the transcript, a time in them moves the player to that line, Edit and Copy keep
what the user wrote."""

from __future__ import annotations

import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.register_assert_rewrite("files_support")
pytest_plugins = ["files_support"]  # fixtures: ctx, window, model_store, opened

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QTextCursor, QTextDocument  # noqa: E402

from deskscribe.gui.notes_panel import notes_view_markdown  # noqa: E402
from deskscribe.transcript.export import notes_markdown  # noqa: E402

LEFT = Qt.MouseButton.LeftButton


@pytest.fixture
def notes_tab(model_store, opened):
    """The call open in the transcript view, its Notes tab shown, the starter model in the
    store (where the app looks for the built-in notes model). (view, item id)"""
    _win, view, item_id = opened
    view.tabs.setCurrentWidget(view.notes_panel)
    return view, item_id


def _anchor(browser, prefix: str):
    """(href, point in the viewport) of the first link in ``browser`` starting ``prefix``."""
    block = browser.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            href = fragment.charFormat().anchorHref()
            if href.startswith(prefix):
                cursor = QTextCursor(browser.document())
                cursor.setPosition(fragment.position() + 1)
                return href, browser.cursorRect(cursor).center()
            it += 1
        block = block.next()
    return None, None


def test_notes_tab_streams_saves_and_a_time_seeks_the_player(qtbot, notes_tab, ctx):
    view, item_id = notes_tab
    panel = view.notes_panel
    assert panel.write_button.text() == "Write notes" and not panel.copy_button.isEnabled()
    seen_streaming = []
    panel.stream.textChanged.connect(
        lambda: seen_streaming.append(panel.running and bool(panel.stream.toPlainText()))
    )
    with (
        qtbot.waitSignal(view.saved, timeout=180_000) as saved,
        qtbot.waitSignal(panel.finished, timeout=180_000) as ended,
    ):
        qtbot.mouseClick(panel.write_button, LEFT)
        qtbot.waitUntil(lambda: panel.stream.isVisible() and panel.cancel_button.isVisible())
    assert ended.args == ["done"], panel.status.text()
    assert saved.args == [item_id]
    assert any(seen_streaming), "no words were shown while the model wrote"
    assert "built in (on this computer)" in panel.status.text()
    stored = ctx.library.load_transcript(item_id).notes
    assert stored["summary"].strip() and stored["model"]
    assert panel.write_button.text() == "Write again" and not panel.stream.isVisible()
    assert "Summary" in panel.browser.toPlainText()

    href, point = _anchor(panel.browser, "seek:")
    if href is None:  # a small model may cite nothing that checks out: give the notes a time
        middle = view.transcript.segments[3].start
        stored = dict(stored, chapters=[{"title": "Middle", "start": middle}])
        view.set_notes(stored)
        panel.show_notes()
        href, point = _anchor(panel.browser, "seek:")
    seconds = float(href.split(":", 1)[1])
    row = next(i for i, s in enumerate(view.transcript.segments) if s.start <= seconds <= s.end)
    with qtbot.waitSignal(view.player_bar.position, timeout=5_000) as moved:
        qtbot.mouseClick(panel.browser.viewport(), LEFT, pos=point)
    assert moved.args[0] == pytest.approx(seconds, abs=1e-3)
    assert view.playback.position() == pytest.approx(seconds, abs=0.05)
    assert [i.row() for i in view.table.selectionModel().selectedRows()] == [row]

    # Edit: the user's words replace the notes, are saved, and exported as written.
    qtbot.mouseClick(panel.edit_button, LEFT)
    assert panel.editor.isVisible() and "Action items" in panel.editor.toPlainText()
    panel.editor.selectAll()
    qtbot.keyClicks(panel.editor, "We agreed to call back on Friday.")
    qtbot.mouseClick(panel.edit_button, LEFT)
    assert view.transcript.notes["edited"] == "We agreed to call back on Friday."
    qtbot.waitUntil(lambda: ctx.library.load_transcript(item_id).notes.get("edited")
                    == "We agreed to call back on Friday.", timeout=10_000)  # fmt: skip
    assert "We agreed to call back on Friday." in panel.browser.toPlainText()
    qtbot.mouseClick(panel.copy_button, LEFT)
    assert "We agreed to call back on Friday." in QGuiApplication.clipboard().text()


def test_cancel_stops_the_model_and_keeps_the_notes_there_were(qtbot, notes_tab, ctx):
    view, item_id = notes_tab
    panel = view.notes_panel
    before = {"summary": "Kept.", "key_points": [], "decisions": [], "action_items": [],
              "chapters": [], "model": "earlier"}  # fmt: skip
    with qtbot.waitSignal(view.saved, timeout=10_000):
        view.set_notes(before)
    panel.show_notes()
    with qtbot.waitSignal(panel.finished, timeout=120_000) as ended:
        qtbot.mouseClick(panel.write_button, LEFT)
        qtbot.waitUntil(lambda: len(panel.stream.toPlainText()) > 10, timeout=120_000)
        clicked = time.monotonic()
        qtbot.mouseClick(panel.cancel_button, LEFT)
    stopped = time.monotonic() - clicked
    assert ended.args == ["cancelled"]
    assert stopped < 1.0, f"the model went on for {stopped:.2f} s after Cancel"
    assert "Cancelled" in panel.status.text()
    assert view.transcript.notes == before
    assert ctx.library.load_transcript(item_id).notes == before
    assert "Kept." in panel.browser.toPlainText() and panel.write_button.isEnabled()


def test_ask_about_this_recording_and_export_a_translation(qtbot, notes_tab, ctx, tmp_path):
    """The view's Ask… asks about the recording shown; an export in a language the
    transcript has a translation in is written in it, at the original times."""
    view, item_id = notes_tab
    qtbot.mouseClick(view.ask_button, LEFT)
    dialog = view.ask_window
    assert dialog.isVisible()
    qtbot.keyClicks(dialog.question, "Where does Diane live?")
    with qtbot.waitSignal(dialog.ended, timeout=120_000) as ended:
        qtbot.mouseClick(dialog.ask_button, LEFT)
    assert ended.args == ["done"], dialog.status.text()
    assert [s[0] for s in dialog.answer.sources] == [item_id]
    assert all(c.item_id == item_id for c in dialog.answer.citations)
    dialog.close()

    segments = view.transcript.segments
    for s in segments[:2]:
        s.translations = {"fr": f"Ligne {s.id} en français."}
    out = tmp_path / "call.fr.srt"
    with qtbot.waitSignal(view.exported, timeout=10_000):
        view.export_to(out, "srt", None, "fr")
    text = out.read_text("utf-8")
    said = " ".join(x.split(": ", 1)[-1] for x in text.splitlines()
                    if x and not x.isdigit() and "-->" not in x)  # fmt: skip
    assert "Ligne 0 en français. Ligne 1 en français." in said
    assert " ".join(segments[2].text.split()) in said  # untranslated lines keep their text
    start = segments[0].start
    stamp = f"{int(start // 3600):02d}:{int(start % 3600 // 60):02d}:{int(start % 60):02d},"
    assert stamp in text


def test_what_the_model_wrote_is_shown_as_text_not_as_markdown(qapp):
    """The tab and the Markdown export escape alike: a '#' that starts the summary or a point
    opens no heading, marks are no emphasis, a '#' inside a line is left as written."""
    point = "#1 cut ~travel~ by *10%*, item #2 | `x` [y]"
    notes = {"summary": "# Budget <b>approved</b>", "decisions": [point],
             "cited": {"decisions": [[61.0]]}}  # fmt: skip
    for markdown in (notes_view_markdown(notes), notes_markdown(notes)):
        assert "item #2" in markdown  # not escaped where it means nothing
        document = QTextDocument()
        document.setMarkdown(markdown)
        block, shown = document.begin(), []
        while block.isValid():
            shown.append((block.text(), block.blockFormat().headingLevel()))
            block = block.next()
        assert ("# Budget <b>approved</b>", 0) in shown, shown
        assert any(text.startswith(point) and level == 0 for text, level in shown), shown
        assert not any(f.fontStrikeOut() or f.fontItalic() or f.fontWeight() > 400
                       for f in _formats(document, point)), markdown  # fmt: skip


def _formats(document: QTextDocument, text: str) -> list:
    """The character formats of the fragments of ``document`` inside the block ``text`` starts."""
    block, found = document.begin(), []
    while block.isValid():
        if block.text().startswith(text):
            it = block.begin()
            while not it.atEnd():
                found.append(it.fragment().charFormat())
                it += 1
        block = block.next()
    return found
