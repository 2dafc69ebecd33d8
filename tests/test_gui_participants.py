""" "How many people spoke?": the field in the file queue's options and in the live window,
driven as a user does (pytest-qt, the real window, the real engine process, Resemblyzer), and
what it reaches: the queued job's options and the speakers of its transcript; the live
session's label revisions and its pass at Stop (meeting mode counts "You" in it)."""

from __future__ import annotations

import pytest

pytest_plugins = ["files_support"]  # fixtures: media, ctx, window, with_speakers

from PySide6.QtCore import Qt  # noqa: E402

from conversations import build  # noqa: E402
from deskscribe.gui.file_options import FileOptions  # noqa: E402
from deskscribe.gui.speakers_choice import normalize_participants  # noqa: E402
from deskscribe.library import Library  # noqa: E402
from deskscribe.service.speakers import participants_options  # noqa: E402
from files_support import run_queue  # noqa: E402


def _type(qtbot, field, text: str) -> None:
    field.clear()
    qtbot.keyClicks(field, text)
    qtbot.keyClick(field, Qt.Key.Key_Return)


def test_counts_and_ranges_are_read_as_typed_and_wrong_ones_said_plainly() -> None:
    assert normalize_participants(" 2 - 4 ") == "2-4"
    assert normalize_participants("3") == "3" and normalize_participants("4-2") == "2-4"
    assert normalize_participants("3-3") == "3"
    assert normalize_participants("") == ""
    for bad in ("0", "two", "2-4-6", "-3"):
        with pytest.raises(ValueError, match="number of people"):
            normalize_participants(bad)
    assert participants_options("") is None and participants_options("auto") is None
    assert participants_options("3").num_speakers == 3
    meeting = participants_options("2-4", beside_you=True)  # "You" is one of them
    assert (meeting.min_speakers, meeting.max_speakers) == (1, 3)
    assert participants_options("1", beside_you=True).num_speakers == 1
    with pytest.raises(ValueError, match="How many people spoke"):
        participants_options("lots")


@pytest.fixture
def three_voices(speech_dir):
    return build("three", speech_dir / "conversations")


def test_file_queue_field_reaches_the_job_and_its_speakers(
    qtbot, with_speakers, window, ctx, three_voices
) -> None:
    _win, files, _view, _lib = window
    files.options.refresh()
    choice = files.options.speakers
    qtbot.waitUntil(choice.isEnabled, timeout=20_000)
    assert not choice.people.isEnabled()  # off by default: nothing to count
    choice.mode.setCurrentIndex(choice.mode.findData("auto"))
    assert choice.people.isEnabled()
    _type(qtbot, choice.people, " 2 - 4 ")
    assert choice.people.text() == "2-4" and files.options.speakers_choice() == "2-4"
    _type(qtbot, choice.people, "2")
    assert ctx.get("speakers") == "2"  # remembered, and shown so the next time
    again = FileOptions(ctx)
    qtbot.addWidget(again)
    assert again.speakers.by_voice() and again.speakers.people.text() == "2"

    # Three voices, told two: the job gets the count and the transcript has two speakers
    # (detected, it has three: tests/test_diarize.py).
    row = run_queue(qtbot, files, [three_voices.path], timeout=300_000)[three_voices.path.name]
    assert row.status == "done", row.error
    item = Library(ctx.library.path).get(row.item_id)
    assert item.options["speakers"] == "2"
    transcript = Library(ctx.library.path).load_transcript(row.item_id)
    assert len(transcript.speaker_ids()) == 2, transcript.speaker_ids()

    # By channel needs no count: the field is off, and the choice says channels.
    choice.mode.setCurrentIndex(choice.mode.findData("channels"))
    assert not choice.people.isEnabled() and files.options.speakers_choice() == "channels"


def test_live_field_reaches_the_revisions_and_the_pass_at_stop(
    qtbot, with_speakers, window, ctx
) -> None:
    win, *_ = window
    panel = win.live_panel
    picker = panel.picker
    _type(qtbot, picker.participants, "3")
    assert panel.options().participants == "3"

    from deskscribe.service.live.opening import open_live_session

    for source, voices in (("mic", 3), ("both", 2)):  # meeting mode: "You" is one of three
        picker.set_source(source)
        options = panel.options()
        opened = open_live_session(ctx.models, options)
        session = opened.session
        assert session.diarize_options.num_speakers == voices, source
        # The revisions' passes take it, and the pass at Stop (``diarize_options`` too).
        assert session.reviser.growing is not None
        assert session.reviser.growing.options == session.diarize_options
        assert session.diarize_options.level_cue_db is None  # live passes: growing.py
    picker.set_idle(False)  # while recording the count is fixed with the source
    assert not picker.participants.isEnabled()
    picker.set_idle(True)
    _type(qtbot, picker.participants, "")
    assert panel.options().participants == ""
