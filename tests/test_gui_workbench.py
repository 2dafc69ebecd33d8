"""The transcript workbench driven as a user drives it, on a real phone call
(``../shared/eval/two-speakers.wav``, transcribed by tiny.en with word times; who speaks comes
from the call's reference, so that these tests are about the workbench, not diarization):

- the player, heard through a private PulseAudio server (a null sink's monitor recorded and
  matched against the file): the slider moves, the word marked is the word being heard, a
  click on a word goes there, 1.5x plays in 2/3 of the time;
- every kind of edit through the real widgets and keys, each undone and redone exactly; split
  and join keep the word times; Replace all changes exactly the matches; a line's speaker set
  by hand reaches every export.
"""

from __future__ import annotations

import os
import re
import statistics

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.register_assert_rewrite("files_support")
pytest_plugins = ["files_support"]  # fixtures: ctx, window, opened (the call open here)

from docx import Document  # noqa: E402
from PySide6.QtCore import QPoint, Qt, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from conftest import EVAL  # noqa: E402
from deskscribe.audio.decode import decode_audio  # noqa: E402
from deskscribe.service.playback import PlaybackState  # noqa: E402
from deskscribe.transcript import FORMATS, SpeakerTurn, Transcript  # noqa: E402
from deskscribe.whisper.options import TranscribeOptions  # noqa: E402
from deskscribe.whisper.transcribe import transcribe_file  # noqa: E402
from playback_support import Recorder, first_sound, sound_runs, where_in  # noqa: E402

CALL = EVAL / "two-speakers.wav"
CTRL = Qt.KeyboardModifier.ControlModifier
SHIFT = Qt.KeyboardModifier.ShiftModifier
ALT = Qt.KeyboardModifier.AltModifier
LEFT = Qt.MouseButton.LeftButton


def reference_turns() -> list[SpeakerTurn]:
    ids: dict[str, str] = {}
    turns = []
    for line in (EVAL / "two-speakers.rttm").read_text().splitlines():
        f = line.split()
        sid = ids.setdefault(f[7], f"S{len(ids) + 1}")
        turns.append(SpeakerTurn(float(f[3]), float(f[3]) + float(f[4]), sid))
    return sorted(turns, key=lambda x: x.start)


def _speaker_at(turns: list[SpeakerTurn], t: float) -> str:
    return min(
        turns, key=lambda x: 0.0 if x.start <= t <= x.end else min(abs(t - x.start), abs(t - x.end))
    ).speaker


@pytest.fixture(scope="module")
def call_transcript(tiny_model) -> Transcript:
    """The call as tiny.en hears it, with word times; speakers from the reference."""
    t = transcribe_file(tiny_model, CALL, TranscribeOptions(language="en", word_timestamps=True))
    turns = reference_turns()
    for seg in t.segments:
        for w in seg.words:
            w.speaker = _speaker_at(turns, (w.start + w.end) / 2)
        said = [w.speaker for w in seg.words] or [_speaker_at(turns, seg.start)]
        seg.speaker = max(set(said), key=said.count)
    t.turns = turns
    assert sum(len(s.words) for s in t.segments) > 50, t.text
    return t


def answer_dialog(act) -> None:
    def attempt() -> None:
        dialog = QApplication.activeModalWidget()
        if dialog is None:
            QTimer.singleShot(20, attempt)
            return
        act(dialog)

    QTimer.singleShot(0, attempt)


# --------------------------------------------------------------------------- the player


def _sink(pulse, monkeypatch, name: str) -> str:
    monitor = pulse.add_null_sink(name)
    pulse.set_default_sink(name)
    monkeypatch.setenv("PULSE_SINK", name)
    return monitor


def _word_cell_point(view, row: int, word: int) -> QPoint:
    """A point on screen (viewport coordinates) over word ``word`` of line ``row``, found the
    way the view finds what was clicked (its text laid out as drawn)."""
    from deskscribe.gui.segments_model import TEXT

    index = view.model.index(row, TEXT)
    view.table.scrollTo(index)
    rect = view.table.visualRect(index)
    a, b = view.model.word_spans(row)[word]
    font = view.table.font()
    for y in range(rect.top() + 2, rect.bottom(), 3):
        for x in range(rect.left() + 2, rect.right(), 2):
            at = view.delegate.offset_at(index, rect, QPoint(x, y), font)
            if at is not None and a < at < b:
                return QPoint(x, y)
    raise AssertionError(f"word {word} of line {row} is not drawn in {rect}")


def test_player_heard_through_the_speakers(qtbot, pulse, monkeypatch, opened):
    """Play a line, click a word while it plays, then play the end at 1.5x: the slider, the
    marked word and the position all agree with what the sound server received."""
    _win, view, _item = opened
    bar, model, playback = view.player_bar, view.model, view.playback
    source = decode_audio(CALL)
    segs = view.transcript.segments
    monitor = _sink(pulse, monkeypatch, "workbench_playback")
    rec = Recorder(pulse, monitor)
    samples: list[tuple[float, float, int | None, int | None]] = []
    try:
        qtbot.waitUntil(lambda: rec.seconds() > 0.2, timeout=10_000)
        # 1. Click a line's time (a line about 8 s in): it plays from there.
        row = next(i for i, s in enumerate(segs) if s.start >= 8.0)
        from deskscribe.gui.segments_model import TIME

        index = model.index(row, TIME)
        qtbot.mouseClick(view.table.viewport(), LEFT, pos=view.table.visualRect(index).center())
        assert bar.play_button.text() == "Pause"
        qtbot.waitUntil(lambda: rec.sounding() > 0.3, timeout=10_000)
        slider_at = bar.slider.value()

        def sample() -> bool:
            samples.append((rec.seconds(), playback.position(), model.playing,
                            model.playing_word))  # fmt: skip
            return rec.sounding() > 3.0

        qtbot.waitUntil(sample, timeout=15_000)
        assert bar.slider.value() > slider_at + 2000, (slider_at, bar.slider.value())

        # 2. While it plays, click a word of a later line: it goes on from that word.
        later = next(i for i, s in enumerate(segs) if s.start >= 20.0 and len(s.words) >= 3)
        point = _word_cell_point(view, later, 1)
        word = segs[later].words[1]
        clicked_at = rec.seconds()
        qtbot.mouseClick(view.table.viewport(), LEFT, pos=point)
        qtbot.waitUntil(lambda: rec.seconds() > clicked_at + 2.2, timeout=10_000)
        assert model.playing == later

        # 3. Pause (Space), let it fall silent, then play the last 12 s at 1.5x.
        qtbot.keyClick(view.table, Qt.Key.Key_Space)
        qtbot.waitUntil(lambda: playback.state is PlaybackState.PAUSED, timeout=5_000)
        qtbot.waitUntil(lambda: rec.silent_for() > 0.6, timeout=10_000)
        bar.speed.setCurrentIndex(bar.speed.findData(1.5))
        fast_from = rec.seconds()
        view.play_at(18.0)
        qtbot.waitUntil(lambda: playback.state is PlaybackState.ENDED, timeout=20_000)
        qtbot.waitUntil(lambda: rec.silent_for() > 0.6, timeout=10_000)
    finally:
        view.stop()
        heard = rec.stop()
        pulse.remove_sink("workbench_playback")

    # What was heard when the samples were taken: the first 2 s of sound placed in the file.
    began = first_sound(heard)
    assert began is not None, "nothing reached the speakers"
    p0 = where_in(source, heard[int(began * 16000) : int((began + 2) * 16000)])
    assert abs(p0 - segs[row].start) <= 0.3, (p0, segs[row].start)
    offsets, on_word = [], 0
    for captured, position, line, w in samples:
        if captured - began < 0.3:
            continue
        heard_pos = p0 + (captured - began)
        offsets.append(position - heard_pos)
        if line is not None and w is not None:
            x = segs[line].words[w]
            on_word += x.start - 0.3 <= heard_pos <= x.end + 0.3
    marked = [s for s in samples if s[3] is not None]
    print(f"{len(offsets)} samples: player position - heard position median "
          f"{statistics.median(offsets):+.3f} s, worst {max(map(abs, offsets)):.3f} s; "
          f"{on_word} of {len(marked)} marked words being heard")  # fmt: skip
    assert abs(statistics.median(offsets)) <= 0.2 and max(map(abs, offsets)) <= 0.4
    assert len(marked) >= 0.7 * len(offsets) and on_word >= 0.9 * len(marked)

    # The click on a word: a second later, the sound comes from a second after that word.
    at = clicked_at + 1.0
    piece = heard[int(at * 16000) : int((at + 1.2) * 16000)]
    went_to = where_in(source, piece)
    print(f"clicked “{word.text.strip()}” at {word.start:.2f} s: 1 s later it played "
          f"{went_to:.2f} s")  # fmt: skip
    assert abs(went_to - (word.start + 1.0)) <= 0.35, (went_to, word.start)

    # 1.5x: the last 12 s of the file took about 8 s.
    runs = [r for r in sound_runs(heard) if r[0] >= fast_from - 0.05]
    took = runs[-1][1] - runs[0][0]
    print(f"1.5x: 12.0 s of the file played in {took:.2f} s (1x: 12.0 s)")
    assert abs(took - 12.0 / 1.5) <= 0.6, runs


def test_a_meeting_plays_mixed_or_one_track(qtbot, pulse, monkeypatch, window, ctx, tmp_path):
    """A meeting recorded as two tracks (the call into the microphone, JFK as system audio):
    the player offers All tracks / Microphone / System audio, and System audio plays JFK."""
    from deskscribe.audio.recorder import SessionRecorder

    win, _files, view, _library = window
    call, jfk = decode_audio(CALL)[: 16000 * 8], decode_audio(EVAL / "jfk.flac")[: 16000 * 8]
    folder = tmp_path / "meeting"
    with SessionRecorder(folder, ("mic", "system"), chunk_seconds=2.0) as rec:
        rec.write("mic", call)
        rec.write("system", jfk)
    (folder / "transcript.json").write_text(
        Transcript(segments=[], duration=8.0).to_json(), encoding="utf-8"
    )
    item_id = ctx.library.add_live_session(folder, "Meeting", duration=8.0)
    with qtbot.waitSignal(view.loaded, timeout=20_000):
        win.show_transcript(item_id)
    combo = view.player_bar.track
    assert combo.isVisible()
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "All tracks", "Microphone", "System audio"]  # fmt: skip
    combo.setCurrentIndex(combo.findData("system"))
    assert view.playback.track == "system"
    monitor = _sink(pulse, monkeypatch, "workbench_tracks")
    rec = Recorder(pulse, monitor)
    try:
        qtbot.waitUntil(lambda: rec.seconds() > 0.2, timeout=10_000)
        view.play_at(1.0)
        qtbot.waitUntil(lambda: rec.sounding() > 2.5, timeout=10_000)
        view.player_bar.toggle()
    finally:
        view.stop()
        heard = rec.stop()
        pulse.remove_sink("workbench_tracks")
    began = first_sound(heard)
    piece = heard[int((began + 0.3) * 16000) : int((began + 2.3) * 16000)]
    # JFK's words, from where it was asked to play: the microphone's call is not in it.
    assert abs(where_in(jfk, piece) - 1.3) <= 0.3

    def match(source) -> float:
        at = int(where_in(source, piece) * 16000)
        ref = source[at : at + piece.size]
        return float(abs(ref @ piece) / (np.linalg.norm(ref) * np.linalg.norm(piece) + 1e-9))

    assert match(jfk) > 0.8 > 0.3 > match(call), (match(jfk), match(call))


# --------------------------------------------------------------------------- editing


def _state(view) -> dict:
    return view.transcript.to_dict()


def _round_trip(qtbot, view, act, check=None) -> dict:
    """Do ``act`` (as the user), then Ctrl+Z back to exactly before and Ctrl+Shift+Z forward
    to exactly after; returns the state after."""
    before = _state(view)
    act()
    after = _state(view)
    assert after != before, "the edit changed nothing"
    if check is not None:
        check()
    win = view.window()  # active again after a dialog
    win.activateWindow()
    qtbot.waitUntil(lambda: QApplication.activeWindow() is win, timeout=5_000)
    view.table.setFocus()
    qtbot.keyClick(view.table, Qt.Key.Key_Z, CTRL)
    assert _state(view) == before
    qtbot.keyClick(view.table, Qt.Key.Key_Z, CTRL | SHIFT)
    assert _state(view) == after
    return after


def _select_row(view, row: int) -> None:
    from deskscribe.gui.segments_model import TEXT

    view.table.setFocus()
    view.editing.select(row)
    assert view.table.currentIndex().row() == row and view.table.model().index(row, TEXT)


def _open_editor(qtbot, view, row: int):
    from deskscribe.gui.segments_model import TEXT

    view.table.edit(view.model.index(row, TEXT))
    qtbot.waitUntil(lambda: QApplication.focusWidget() is not None and
                    QApplication.focusWidget().__class__.__name__ == "LineEditor")  # fmt: skip
    return QApplication.focusWidget()


def _times(words) -> list[tuple[float, float]]:
    return [(w.start, w.end) for w in words]


def test_every_edit_undoes_and_redoes(qtbot, opened, ctx, tmp_path):
    _win, view, item_id = opened
    t = view.transcript
    segs = t.segments
    row = max(range(len(segs)), key=lambda i: len(segs[i].words))  # the longest line
    seg = segs[row]
    assert len(seg.words) >= 6, [s.text for s in segs]
    words_before = [w.text.strip() for w in seg.words]

    # 1. Retype one word: the line's other words keep their times.
    def retype() -> None:
        editor = _open_editor(qtbot, view, row)
        text = editor.text()
        a, b = view.model.word_spans(row)[2]
        assert text[a:b] == words_before[2]
        editor.setText(text[:a] + "Zanzibar" + text[b:])
        qtbot.keyClick(editor, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: view.table.state() != view.table.State.EditingState)

    def kept_times() -> None:
        new = view.transcript.segments[row]
        assert [w.text.strip() for w in new.words][2] == "Zanzibar"
        keep = [k for k in range(len(seg.words)) if k != 2]
        assert [_times([new.words[k]]) for k in keep] == [_times([seg.words[k]]) for k in keep]

    _round_trip(qtbot, view, retype, kept_times)

    # 2. Split at the cursor (Ctrl+Enter in the editor): times follow the words; join back.
    original = [w.to_dict() for w in view.transcript.segments[row].words]

    def split() -> None:
        editor = _open_editor(qtbot, view, row)
        spans = view.model.word_spans(row)
        editor.setCursorPosition(spans[3][0])  # before the fourth word
        qtbot.keyClick(editor, Qt.Key.Key_Return, CTRL)

    def split_kept() -> None:
        a, b = view.transcript.segments[row : row + 2]
        assert [w.to_dict() for w in a.words + b.words] == original
        assert len(a.words) == 3 and a.end == a.words[-1].end and b.start == b.words[0].start

    _round_trip(qtbot, view, split, split_kept)
    split_state = _state(view)

    def join() -> None:
        _select_row(view, row)
        qtbot.keyClick(view.table, Qt.Key.Key_J, CTRL)

    joined = _round_trip(qtbot, view, join)
    assert len(joined["segments"]) == len(split_state["segments"]) - 1
    assert [w for w in joined["segments"][row]["words"]] == original

    # 3. A line's speaker (Alt+2), a new speaker for a line (Alt+0, named in a dialog), the
    # selected words' speaker (Alt+1 in the editor).
    ids = t.speaker_ids()
    first = view.transcript.segments[0].speaker
    other = next(s for s in ids if s != first)

    def set_speaker() -> None:
        _select_row(view, 0)
        qtbot.keyClick(view.table, Qt.Key.Key_1 + ids.index(other), ALT)

    _round_trip(
        qtbot,
        view,
        set_speaker,
        lambda: view.transcript.segments[0].speaker == other or pytest.fail("speaker"),
    )

    def new_speaker() -> None:
        _select_row(view, 1)
        answer_dialog(lambda d: (d.setTextValue("Guest"), d.accept()))
        qtbot.keyClick(view.table, Qt.Key.Key_0, ALT)

    def guest() -> None:
        sid = view.transcript.segments[1].speaker
        assert sid not in ids and view.transcript.speaker_name(sid) == "Guest"
        assert view.speakers.count() == len(ids) + 1

    _round_trip(qtbot, view, new_speaker, guest)

    def words_speaker() -> None:
        editor = _open_editor(qtbot, view, row)
        spans = view.model.word_spans(row)
        editor.setSelection(spans[1][0], spans[2][1] - spans[1][0])  # words 2 and 3
        who = view.transcript.segments[row].speaker
        target = next(s for s in view.transcript.speaker_ids() if s != who)
        qtbot.keyClick(editor, Qt.Key.Key_1 + view.transcript.speaker_ids().index(target), ALT)

    def words_moved() -> None:
        a, b, c = view.transcript.segments[row : row + 3]
        assert len(b.words) == 2 and b.speaker != a.speaker == c.speaker
        assert [w.to_dict()["start"] for w in a.words + b.words + c.words] == [
            w["start"] for w in joined["segments"][row]["words"]]  # fmt: skip

    _round_trip(qtbot, view, words_speaker, words_moved)

    # 4. Rename and merge speakers (the side panel's buttons).
    def rename() -> None:
        view.speakers.setCurrentRow(0)
        answer_dialog(lambda d: (d.setTextValue("Diane"), d.accept()))
        view.rename_dialog()

    _round_trip(qtbot, view, rename)

    def merge() -> None:
        view.speakers.setCurrentRow(view.speakers.count() - 1)
        answer_dialog(lambda d: d.accept())
        view.merge_dialog()

    _round_trip(
        qtbot, view, merge, lambda: view.speakers.count() == len(view.transcript.speaker_ids())
    )

    # 5. Replace all (Ctrl+H), whole words: exactly the matches change, and say how many.
    texts = [s.text for s in view.transcript.segments]
    pattern = re.compile(r"(?<!\w)you(?!\w)", re.IGNORECASE)
    expected = sum(len(pattern.findall(x)) for x in texts)
    assert expected >= 2, texts

    def replace_all() -> None:
        qtbot.keyClick(view.table, Qt.Key.Key_H, CTRL)
        bar = view.find_bar
        assert bar.isVisible() and bar.replace_row.isVisible()
        bar.edit.setText("you")
        bar.whole.setChecked(True)
        bar.replacement.setText("y'all")
        bar.replace_all_button.click()
        assert bar.count.text() == f"{expected} replaced"

    def exactly() -> None:
        assert [s.text for s in view.transcript.segments] == [pattern.sub("y'all", x)
                                                             for x in texts]  # fmt: skip

    final = _round_trip(qtbot, view, replace_all, exactly)

    # Replace one: the match in the selected line only, then on to the next match.
    bar = view.find_bar
    bar.edit.setText("y'all")
    bar.replacement.setText("you all")
    first = bar.model.matches[0]
    before = [s.text for s in view.transcript.segments]

    def replace_one() -> None:
        bar.replace_button.click()

    def one_replaced() -> None:
        after = [s.text for s in view.transcript.segments]
        changed = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        assert changed == [first]
        assert after[first] == before[first].replace("y'all", "you all", 1)

    final = _round_trip(qtbot, view, replace_one, one_replaced)

    # Every step was saved: the library holds the last state.
    qtbot.waitUntil(lambda: not view._pending and view._save_job is None, timeout=10_000)
    assert ctx.library.load_transcript(item_id).to_dict() == final


def test_a_speaker_set_by_hand_reaches_every_export(qtbot, opened, tmp_path):
    """Right-click a line, Who said this line → the other speaker: TXT, SRT, VTT, JSON, MD,
    CSV, DOCX and RTTM all give that line to them."""
    _win, view, _item = opened
    segs = view.transcript.segments
    row = next(i for i, s in enumerate(segs) if len(s.words) >= 4 and i > 0)
    was = segs[row].speaker
    to = next(s for s in view.transcript.speaker_ids() if s != was)
    view.rename_speaker(to, "Sheila")
    view.rename_speaker(was, "Diane")
    from deskscribe.gui.segments_model import TEXT

    index = view.model.index(row, TEXT)
    view.table.scrollTo(index)

    def choose(menu) -> None:
        who = next(a for a in menu.actions() if a.text() == "Who said this line")
        sheila = next(a for a in who.menu().actions() if a.text() == "Sheila")
        sheila.trigger()
        menu.close()

    def pick() -> None:
        menu = QApplication.activePopupWidget()
        if menu is None:
            QTimer.singleShot(20, pick)
            return
        choose(menu)

    QTimer.singleShot(0, pick)
    view.editing.table_menu(view.table.visualRect(index).center())
    assert view.transcript.segments[row].speaker == to
    text = segs[row].text.strip()
    line_start = view.transcript.segments[row].start

    out = tmp_path / "exports"
    out.mkdir()
    for fmt in FORMATS:
        with qtbot.waitSignal(view.exported, timeout=10_000):
            view.export_to(out / f"call.{fmt}")
    first_words = " ".join(text.split()[:3])
    txt = (out / "call.txt").read_text(encoding="utf-8")
    assert any(x.startswith("Sheila: ") and first_words in x for x in txt.splitlines()), txt
    srt = (out / "call.srt").read_text(encoding="utf-8")
    assert f"Sheila: {first_words}" in srt.replace("\n", " "), srt
    vtt = (out / "call.vtt").read_text(encoding="utf-8")
    assert re.search(rf"<v Sheila>{re.escape(first_words)}", vtt.replace("\n", " ")), vtt
    data = Transcript.from_json((out / "call.json").read_text(encoding="utf-8"))
    assert data.speaker_name(data.segments[row].speaker) == "Sheila"
    md = (out / "call.md").read_text(encoding="utf-8")
    assert any("**Sheila:**" in x and first_words in x for x in md.splitlines()), md
    csv = (out / "call.csv").read_text(encoding="utf-8-sig")
    assert any("Sheila" in x and first_words in x for x in csv.splitlines()), csv
    paragraphs = [p.text for p in Document(out / "call.docx").paragraphs]
    assert any("Sheila" in p and first_words in p for p in paragraphs), paragraphs
    rttm = (out / "call.rttm").read_text(encoding="utf-8").splitlines()
    said = [x.split() for x in rttm]
    covering = [f[7] for f in said
                if float(f[3]) <= line_start + 0.05 < float(f[3]) + float(f[4])]  # fmt: skip
    assert covering == ["Sheila"], (line_start, rttm)
