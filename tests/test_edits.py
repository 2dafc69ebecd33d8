"""Transcript edits as commands (deskscribe.transcript.edits): every edit undoes exactly, word
timings survive text edits, and the undo history behaves like an editor's."""

from __future__ import annotations

import copy

import pytest

from deskscribe.transcript.edits import (
    EditHistory,
    EditText,
    JoinSegments,
    MergeSpeakers,
    NothingFound,
    RenameSpeaker,
    Replace,
    SetSpeaker,
    SetWordsSpeaker,
    SplitSegment,
    SplitSegmentAt,
    Together,
    new_speaker_id,
)
from deskscribe.transcript.export import render
from deskscribe.transcript.model import Segment, SpeakerTurn, Transcript, Word

# The start of the phone call in shared/eval/two-speakers.stm (Diane = S1, Sheila = S2), with
# one line as Whisper misheard it ("I heard of deep" for "I heard a beep").
CALL = [
    ("S1", 6.68, 7.16, " Hello?"),
    ("S2", 7.634, 8.155, " Hello?"),
    ("S1", 8.436, 9.798, " Oh, hello. I didn't know you were there."),
    ("S2", 9.838, 10.78, " Neither did I."),
    ("S1", 10.78, 12.54, " Okay, then I thought you know, I heard of deep."),
    ("S1", 12.542, 14.184, " This is Diane in New Jersey."),
    ("S2", 14.444, 17.769, " And I'm Sheila in Texas, originally from Chicago."),
    ("S1", 17.789, 20.113, " Oh, I'm originally from Chicago also."),
]


def _timed_words(text: str, start: float, end: float, speaker: str) -> list[Word]:
    """Words with uneven, Whisper-like times: each word's length follows its letters, a pause
    follows punctuation, and speech starts a little after the segment starts."""
    pieces = text.split(" ")[1:]
    weights = [len(p) + (3 if p[-1] in ",.?" else 0) for p in pieces]
    t, scale = start + 0.06, (end - start - 0.1) / sum(weights)
    words = []
    for i, (piece, weight) in enumerate(zip(pieces, weights, strict=True)):
        length = weight * scale
        said = length * (0.55 if piece[-1] in ",.?" else 0.85)
        prob = round(0.55 + (i * 37 % 44) / 100, 2)
        words.append(Word(round(t, 3), round(t + said, 3), " " + piece, prob, speaker))
        t += length
    return words


def _call() -> Transcript:
    segments = [
        Segment(start, end, text, _timed_words(text, start, end, who), who, id=k, tokens=[k, 7])
        for k, (who, start, end, text) in enumerate(CALL)
    ]
    turns = [SpeakerTurn(s.start, s.end, s.speaker or "") for s in segments]
    return Transcript(segments, "en", 20.2, "call.wav", "base", {"S1": "Diane"}, turns)


def _times(words: list[Word]) -> list[tuple[float, float]]:
    return [(w.start, w.end) for w in words]


# --- every edit undoes exactly -----------------------------------------------------------------

EDITS = {
    "edit text": lambda: EditText(4, " Okay, then I thought, you know, I heard a beep!"),
    "edit text, no words": lambda: EditText(0, " Hello? Hi."),
    "set speaker": lambda: SetSpeaker([1, 3], "S1"),
    "set words speaker": lambda: SetWordsSpeaker(6, 2, 4, "S3"),
    "split": lambda: SplitSegment(2, 2),
    "split at cursor": lambda: SplitSegmentAt(4, 20),
    "join": lambda: JoinSegments(4),
    "rename": lambda: RenameSpeaker("S2", "Sheila"),
    "rename to default": lambda: RenameSpeaker("S1", None),
    "merge": lambda: MergeSpeakers("S2", "S1"),
    "replace all": lambda: Replace("chicago", "Chicago, Illinois"),
    "replace one": lambda: Replace("hello", "hi", index=2, position=0),
    "new speaker": lambda: Together(
        "New speaker", [RenameSpeaker("S3", "Carol"), SetSpeaker([5], "S3")]
    ),
}


@pytest.mark.parametrize("name", EDITS)
def test_every_edit_undoes_exactly_and_redoes_the_same(name):
    t = _call()
    t.segments[0].words = []  # one line without word times, as an imported SRT has
    original = t.to_dict()
    edit = EDITS[name]()
    edit.apply(t)
    applied = t.to_dict()
    assert applied != original
    edit.revert(t)
    assert t.to_dict() == original
    edit.apply(t)
    assert t.to_dict() == applied
    edit.revert(t)
    assert t.to_dict() == original


# --- EditText keeps the times of the words that still match ------------------------------------


def test_correcting_a_word_keeps_every_other_words_exact_time():
    words = [
        Word(10.88, 11.02, " I", 0.93, "S1"),
        Word(11.09, 11.41, " heard", 0.88, "S1"),
        Word(11.47, 11.55, " of", 0.41, "S1"),
        Word(11.6, 12.17, " deep.", 0.36, "S1"),
    ]
    t = Transcript([Segment(10.8, 12.3, " I heard of deep.", copy.deepcopy(words), "S1")])
    EditText(0, " I heard a beep.").apply(t)
    seg = t.segments[0]
    assert [w.text for w in seg.words] == [" I", " heard", " a", " beep."]
    assert seg.words[:2] == words[:2]  # times, probability and speaker, exactly
    assert seg.words[2].start == words[2].start and seg.words[3].end == words[3].end
    assert _times(seg.words[2:]) == _times(words[2:])  # one for one: each keeps its time
    assert [w.probability for w in seg.words[2:]] == [1.0, 1.0]  # the user wrote them
    assert (seg.start, seg.end) == (10.8, 12.3)  # first and last word kept their times


def test_a_longer_correction_shares_the_replaced_words_span_by_characters():
    t = _call()
    old = copy.deepcopy(t.segments[4].words)
    EditText(4, " Okay, then I thought you know, I heard a loud beep.").apply(t)
    new = t.segments[4].words
    assert new[:-3] == old[:-2]
    a, loud, beep = new[-3:]
    assert (a.start, beep.end) == (old[-2].start, old[-1].end)
    assert a.start <= a.end == loud.start <= loud.end == beep.start <= beep.end
    assert (loud.end - loud.start) == pytest.approx(4 * (a.end - a.start))


def test_inserted_words_fill_the_gap_between_their_neighbours():
    t = _call()
    old = copy.deepcopy(t.segments[2].words)  # Oh, hello. I didn't know you were there.
    EditText(2, " Oh, hello. I really didn't know you were there.").apply(t)
    new = t.segments[2].words
    assert [w.text for w in new][2:5] == [" I", " really", " didn't"]
    assert new[:3] + new[4:] == old
    assert old[2].end <= new[3].start <= new[3].end <= old[3].start


def test_deleted_words_go_and_the_line_follows_its_first_and_last_word():
    t = _call()
    seg = t.segments[7]  # Oh, I'm originally from Chicago also.
    old = copy.deepcopy(seg.words)
    EditText(7, " I'm originally from Chicago.").apply(t)
    new = t.segments[7]
    assert [w.text for w in new.words] == [" I'm", " originally", " from", " Chicago."]
    assert _times(new.words) == _times(old[1:5])
    assert (new.start, new.end) == (old[1].start, old[4].end)


def test_matched_words_take_the_new_spelling_and_keep_their_time():
    t = _call()
    old = copy.deepcopy(t.segments[5].words)
    EditText(5, " this is Diane, in New Jersey!").apply(t)
    new = t.segments[5].words
    assert [w.text for w in new] == [" this", " is", " Diane,", " in", " New", " Jersey!"]
    assert [(w.start, w.end, w.probability, w.speaker) for w in new] == [
        (w.start, w.end, w.probability, w.speaker) for w in old
    ]


def test_retiming_is_not_a_fresh_even_spread():
    """Fails if EditText re-timed the words evenly (or by characters) instead of keeping them:
    the call's word times are uneven, and the kept words must come back bit for bit."""
    t = _call()
    old = copy.deepcopy(t.segments[6].words)
    durations = {round(w.end - w.start, 6) for w in old}
    assert len(durations) > 3
    EditText(6, " And I'm Sheila in Dallas, Texas, originally from Chicago.").apply(t)
    new = t.segments[6].words
    kept = [w for w in new if w.text != " Dallas,"]
    assert len(new) == len(old) + 1
    assert [(w.text, w.start, w.end) for w in kept] == [(w.text, w.start, w.end) for w in old]


def test_a_line_without_word_times_stays_without_them():
    t = Transcript([Segment(1.0, 3.0, " Hello there.")])
    EditText(0, " Hello, everyone.").apply(t)
    assert t.segments[0].words == []
    assert (t.segments[0].start, t.segments[0].end) == (1.0, 3.0)
    assert t.segments[0].text == " Hello, everyone."


# --- splitting and joining ---------------------------------------------------------------------


def test_split_keeps_every_word_time_and_join_gives_back_the_line():
    t = _call()
    original = t.to_dict()
    line = t.segments[2]
    SplitSegment(2, 2).apply(t)  # before "I"
    first, second = t.segments[2:4]
    assert (first.text, second.text) == (" Oh, hello.", " I didn't know you were there.")
    assert first.words + second.words == line.words
    assert (first.start, first.end) == (line.start, line.words[1].end)
    assert (second.start, second.end) == (line.words[2].start, line.end)
    assert first.speaker == second.speaker == "S1"
    assert [s.id for s in t.segments] == list(range(len(CALL) + 1))
    JoinSegments(2).apply(t)
    assert t.to_dict() == original


def test_split_at_cursor_moves_to_the_next_word_boundary():
    text = " Oh, hello. I didn't know you were there."
    for cursor in (text.index("llo"), text.index(" I"), text.index("I")):
        t = _call()
        SplitSegmentAt(2, cursor).apply(t)
        assert t.segments[3].text == " I didn't know you were there."
    for cursor in (0, 1, text.index("ere.")):
        with pytest.raises(ValueError):
            SplitSegmentAt(2, cursor).apply(_call())


def test_split_at_cursor_without_words_shares_text_and_time_by_characters():
    t = Transcript([Segment(2.0, 4.0, " one two three four")])
    original = t.to_dict()
    SplitSegmentAt(0, 6).apply(t)  # inside "two": cut before " three"
    first, second = t.segments
    assert (first.text, second.text) == (" one two", " three four")
    assert first.end == second.start == pytest.approx(2.0 + 2.0 * 8 / 19)
    assert (first.start, second.end) == (2.0, 4.0)
    JoinSegments(0).apply(t)
    assert t.to_dict() == original


def test_join_refuses_lines_of_different_speakers_with_a_readable_message():
    t = _call()
    with pytest.raises(ValueError, match=r"different speakers \(Diane and S2\)"):
        JoinSegments(2).apply(t)
    assert t.to_dict() == _call().to_dict()
    with pytest.raises(IndexError):
        JoinSegments(len(CALL) - 1).apply(t)


def test_join_of_same_speaker_lines_concatenates_words():
    t = _call()
    a, b = copy.deepcopy(t.segments[4:6])
    JoinSegments(4).apply(t)
    joined = t.segments[4]
    assert joined.text == a.text + b.text
    assert joined.words == a.words + b.words
    assert (joined.start, joined.end, joined.tokens) == (a.start, b.end, a.tokens + b.tokens)
    assert len(t.segments) == len(CALL) - 1


# --- speakers ----------------------------------------------------------------------------------


def test_set_speaker_relabels_whole_lines_and_their_words():
    t = _call()
    SetSpeaker([3, 1], "S1").apply(t)
    for seg in t.segments[:4]:
        assert seg.speaker == "S1" and {w.speaker for w in seg.words} <= {"S1"}
    assert t.segments[6].speaker == "S2"


def test_set_words_speaker_cuts_the_words_out_as_their_own_line():
    t = _call()
    original = t.to_dict()
    line = copy.deepcopy(t.segments[6])  # And I'm Sheila in Texas, originally from Chicago.
    new_id = new_speaker_id(t)
    assert new_id == "S3"
    edit = SetWordsSpeaker(6, 2, 4, new_id)
    edit.apply(t)
    pieces = t.segments[6:9]
    assert [p.text for p in pieces] == [
        " And I'm",
        " Sheila in Texas,",
        " originally from Chicago.",
    ]
    assert [p.speaker for p in pieces] == ["S2", "S3", "S2"]
    assert [w.speaker for w in pieces[1].words] == ["S3"] * 3
    assert _times([w for p in pieces for w in p.words]) == _times(line.words)
    assert t.segments[9].text == CALL[7][3] and len(t.segments) == len(CALL) + 2
    edit.revert(t)
    assert t.to_dict() == original


def test_set_words_speaker_at_the_line_start_makes_two_lines():
    t = _call()
    SetWordsSpeaker(2, 0, 1, "S2").apply(t)
    assert [(s.text, s.speaker) for s in t.segments[2:4]] == [
        (" Oh, hello.", "S2"),
        (" I didn't know you were there.", "S1"),
    ]
    with pytest.raises(ValueError):
        SetWordsSpeaker(2, 1, 99, "S2").apply(t)


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        ([], "S1"),
        (["S1", "S2"], "S3"),
        (["S2", "S7"], "S8"),
        (["SPEAKER_00", "SPEAKER_01"], "SPEAKER_02"),
        (["You", "Others"], "S1"),
        (["You", "SPEAKER_00"], "SPEAKER_01"),
    ],
)
def test_new_speaker_id_follows_the_ids_present(ids, expected):
    t = Transcript([Segment(k, k + 1, " hi", speaker=sid) for k, sid in enumerate(ids)])
    assert new_speaker_id(t) == expected


def test_new_speaker_id_skips_ids_that_only_have_a_name():
    t = _call()
    t.speakers["S3"] = "Carol"
    assert new_speaker_id(t) == "S4"


def test_rename_speaker_undo_restores_the_names_exactly():
    t = _call()
    t.speakers = {"S1": "Diane", "S2": "Sheila"}
    rename = RenameSpeaker("S1", "")
    rename.apply(t)
    assert t.speakers == {"S2": "Sheila"}
    rename.revert(t)
    assert list(t.speakers.items()) == [("S1", "Diane"), ("S2", "Sheila")]


def test_merge_speakers_undo_restores_lines_names_and_turns():
    t = _call()
    t.speakers["S2"] = "Sheila"
    original = t.to_dict()
    merge = MergeSpeakers("S2", "S1")
    merge.apply(t)
    assert t.speaker_ids() == ["S1"] and "S2" not in t.speakers
    assert len(t.segments) < len(CALL)  # "Neither did I." touches the next line: joined
    merge.revert(t)
    assert t.to_dict() == original


# --- find and replace --------------------------------------------------------------------------


def _lines(*texts: str) -> Transcript:
    return Transcript(
        [Segment(2.0 * k, 2.0 * k + 1.5, text) for k, text in enumerate(texts)], speakers={}
    )


def test_replace_whole_word_leaves_longer_words_alone():
    t = _lines(" The cat is there.", " Then the dog sat there, by the door.")
    edit = Replace("the", "a", whole_word=True)
    edit.apply(t)
    assert edit.count == 3
    assert [s.text for s in t.segments] == [" a cat is there.", " Then a dog sat there, by a door."]


def test_replace_counts_case_and_substring_matches():
    texts = (" The cat is there.", " Then the dog sat there.")
    anywhere = Replace("the", "X")
    anywhere.apply(t := _lines(*texts))
    assert anywhere.count == 5
    assert t.segments[1].text == " Xn X dog sat Xre."
    exact = Replace("the", "X", case_sensitive=True, whole_word=True)
    exact.apply(t := _lines(*texts))
    assert exact.count == 1
    assert [s.text for s in t.segments] == [" The cat is there.", " Then X dog sat there."]


def test_replace_keeps_the_time_of_the_replaced_word_and_touches_only_matching_lines():
    t = _call()
    before = t.to_dict()["segments"]
    old = copy.deepcopy(t.segments[4].words)
    edit = Replace("of deep", "a beep")
    edit.apply(t)
    assert edit.count == 1
    after = t.to_dict()["segments"]
    assert [k for k in range(len(CALL)) if before[k] != after[k]] == [4]
    assert _times(t.segments[4].words) == _times(old)
    assert t.segments[4].text.endswith("I heard a beep.")


def test_replace_in_one_line_from_a_position_or_all_in_that_line():
    t = _call()
    first = Replace("originally", "first", index=6, position=0)
    first.apply(t)
    assert first.count == 1 and "first from Chicago" in t.segments[6].text
    assert "originally" in t.segments[7].text
    t = _lines(" no, no, no")
    Replace("no", "yes", index=0, position=3).apply(t)
    assert t.segments[0].text == " no, yes, no"
    Replace("no", "yes", index=0).apply(t)
    assert t.segments[0].text == " yes, yes, yes"


def test_replace_rejects_an_empty_search():
    with pytest.raises(ValueError):
        Replace("", "x")


# --- the undo history --------------------------------------------------------------------------


def test_history_undoes_and_redoes_in_order_with_labels():
    t = _call()
    states = [t.to_dict()]
    history = EditHistory(t)
    calls = []
    history.changed.append(lambda: calls.append(history.undo_label))
    for edit in (SplitSegment(2, 2), RenameSpeaker("S2", "Sheila"), EditText(0, " Hi?")):
        history.do(edit)
        states.append(t.to_dict())
    assert (history.undo_label, history.redo_label) == ("Edit text", None)
    assert history.undo().label == "Edit text"
    assert t.to_dict() == states[2]
    assert history.undo().label == "Rename speaker"
    assert (history.undo_label, history.redo_label) == ("Split line", "Rename speaker")
    assert history.undo().label == "Split line"
    assert t.to_dict() == states[0]
    assert history.undo() is None and not history.can_undo and history.can_redo
    for k in (1, 2, 3):
        history.redo()
        assert t.to_dict() == states[k]
    assert history.redo() is None and not history.can_redo
    assert len(calls) == 9  # three do, three undo, three redo; None-returns don't notify


def test_a_new_edit_clears_redo():
    t = _call()
    history = EditHistory(t)
    history.do(RenameSpeaker("S2", "Sheila"))
    history.undo()
    assert history.can_redo
    history.do(SetSpeaker([0], "S2"))
    assert not history.can_redo and history.redo() is None


def test_history_keeps_at_most_limit_steps():
    t = _call()
    history = EditHistory(t, limit=3)
    for name in ("A", "B", "C", "D", "E"):
        history.do(RenameSpeaker("S2", name))
    undone = 0
    while history.undo() is not None:
        undone += 1
    assert undone == 3
    assert t.speakers["S2"] == "B"
    with pytest.raises(ValueError):
        EditHistory(t, limit=0)


def test_a_failing_edit_is_not_recorded():
    t = _call()
    history = EditHistory(t)
    calls = []
    history.changed.append(lambda: calls.append(1))
    with pytest.raises(ValueError):
        history.do(JoinSegments(2))
    assert not history.can_undo and calls == []
    assert t.to_dict() == _call().to_dict()


def test_an_editing_session_undoes_back_to_the_transcript_and_redoes_to_the_end():
    t = _call()
    original = t.to_dict()
    history = EditHistory(t)
    history.do(EditText(4, " Okay, then I thought, you know, I heard a beep."))
    history.do(SetWordsSpeaker(6, 2, 4, new_speaker_id(t)))
    history.do(RenameSpeaker("S3", "Carol"))
    history.do(Replace("chicago", "Chicago, Illinois", whole_word=True))
    history.do(SplitSegmentAt(2, 12))
    history.do(SetSpeaker([1], "S1"))
    history.do(JoinSegments(0))
    history.do(MergeSpeakers("S2", "S1"))
    final = t.to_dict()
    while history.undo() is not None:
        pass
    assert t.to_dict() == original
    while history.redo() is not None:
        pass
    assert t.to_dict() == final


# --- who said it reaches the turns, so RTTM follows a speaker set by hand ----------------------


def test_a_speaker_set_by_hand_retells_the_turns_under_the_line():
    t = _call()
    original = t.to_dict()
    line = t.segments[5]  # S1: This is Diane in New Jersey.
    edit = SetSpeaker([5], "S2")
    edit.apply(t)
    covering = [x.speaker for x in t.turns if x.start < line.end and x.end > line.start]
    assert covering == ["S2"]
    rttm = [f.split() for f in str(render(t, "rttm")).splitlines()]
    said = [f[7] for f in rttm if float(f[3]) <= line.start + 0.01 < float(f[3]) + float(f[4])]
    assert said == ["S2"], rttm
    # the turns around it are untouched, and in time order
    assert [x.start for x in t.turns] == sorted(x.start for x in t.turns)
    assert t.turns[0] == SpeakerTurn(CALL[0][1], CALL[0][2], "S1")
    edit.revert(t)
    assert t.to_dict() == original


def test_words_given_to_a_speaker_cut_their_turn_out_of_the_others():
    t = _call()
    SetWordsSpeaker(6, 2, 4, "S3").apply(t)
    piece = t.segments[7]  # Sheila in Texas,
    inside = [x for x in t.turns if x.start < piece.end and x.end > piece.start]
    assert [x.speaker for x in inside] == ["S3"]
    assert (inside[0].start, inside[0].end) == (piece.start, piece.end)
    around = [x for x in t.turns if x.end == piece.start or x.start == piece.end]
    assert {x.speaker for x in around} == {"S2"}


def test_replace_with_nothing_found_says_so_and_is_not_recorded():
    t = _call()
    history = EditHistory(t)
    with pytest.raises(NothingFound, match="“Toronto” is not in the transcript"):
        history.do(Replace("Toronto", "Ottawa"))
    assert not history.can_undo


def test_together_undoes_as_one_step_and_a_failure_inside_undoes_the_rest():
    t = _call()
    original = t.to_dict()
    history = EditHistory(t)
    history.do(Together("New speaker", [RenameSpeaker("S3", "Carol"), SetSpeaker([5], "S3")]))
    assert t.speaker_name("S3") == "Carol" and t.segments[5].speaker == "S3"
    history.undo()
    assert t.to_dict() == original
    with pytest.raises(ValueError):
        history.do(Together("Both", [RenameSpeaker("S3", "Carol"), JoinSegments(2)]))
    assert t.to_dict() == original and not history.can_undo
