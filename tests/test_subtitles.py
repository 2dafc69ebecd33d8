"""Subtitle cues (transcript/subtitles.py) and the SRT/VTT exports built on them.

Every rule is checked twice: it holds on real speech (a phone call and an AMI meeting clip
transcribed by the real Whisper base model, the call with its reference speakers, the call as
one long segment), and the same input with that rule off breaks it, so each check is shown to
be able to fail. Where no real input breaks a rule once it is off (no real cue lasts 7 s),
the input is built from words with real-looking times.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
from pathlib import Path

import pytest

from conftest import EVAL, normalize
from deskscribe.speakers.assign import assign_speakers
from deskscribe.transcript import (
    Segment,
    SpeakerTurn,
    SubtitleRules,
    Transcript,
    Word,
    cues,
    export,
    format_timestamp,
    render,
)
from deskscribe.transcript.subtitles import Cue

DEFAULT = SubtitleRules()
OLD = SubtitleRules(max_line_chars=None, max_lines=None, max_cue_seconds=None, min_cue_gap=0,
                    min_cue_seconds=0)  # fmt: skip


def _words(text: str, start: float = 0.0, each: float = 0.3, pauses=None, who=None) -> list[Word]:
    """Words of ``text`` said one after another, ``each`` seconds apiece, with ``pauses``
    (word index: seconds of silence after it)."""
    out, at = [], start
    for i, w in enumerate(text.split()):
        out.append(Word(at, at + each, " " + w, speaker=who))
        at += each + (pauses or {}).get(i, 0.0)
    return out


def _seg(words: list[Word], speaker: str | None = None) -> Segment:
    return Segment(words[0].start, words[-1].end, "".join(w.text for w in words), words, speaker)


def _one_segment(t: Transcript) -> Transcript:
    """All of ``t``'s words in one segment, as a long sequential Whisper window gives them."""
    words = [w for s in t.segments for w in s.words]
    return Transcript([_seg(words)], language=t.language, duration=t.duration)


def _spoken(cs: list[Cue]) -> list[str]:
    return " ".join(" ".join(c.lines) for c in cs).split()


def _shown(c: Cue) -> list[str]:
    """The lines as SRT shows them (the name before the first)."""
    return [f"{c.label}: {c.lines[0]}", *c.lines[1:]] if c.label else c.lines


def _broken(t: Transcript, cs: list[Cue], rules: SubtitleRules) -> set[str]:
    """The rules of ``rules`` that ``cs`` breaks, plus "order" and "words"."""
    broken, gap = set(), rules.min_cue_gap or 0.0
    for c, after in itertools.zip_longest(cs, cs[1:]):
        width, lines = rules.max_line_chars, _shown(c)
        if width and any(len(a) > width and " " in b for a, b in zip(lines, c.lines, strict=True)):
            broken.add("max_line_chars")
        if rules.max_lines and len(c.lines) > rules.max_lines:
            broken.add("max_lines")
        many_words = len(" ".join(c.lines).split()) > 1
        if rules.max_cue_seconds and c.end - c.start > rules.max_cue_seconds and many_words:
            broken.add("max_cue_seconds")
        limit = after.start - gap if after else (t.duration or math.inf)
        if c.end - c.start < (rules.min_cue_seconds or 0) - 1e-9 and c.end < limit - 1e-9:
            broken.add("min_cue_seconds")  # too short, though silence was left to show it
        if after and after.start - c.end < gap - 1e-9:
            broken.add("min_cue_gap")
        if c.end <= c.start or (after and (after.start <= c.start or after.start < c.end)):
            broken.add("order")
    if _spoken(cs) != t.text.split():
        broken.add("words")
    return broken


def _cue_words(t: Transcript, cs: list[Cue]) -> list[list[Word]]:
    """Each cue's words, found by spelling (the transcript's words must spell its text)."""
    words = iter(w for s in t.segments for w in s.words if w.text.strip())
    out = []
    for c in cs:
        left, mine = len("".join(" ".join(c.lines).split())), []
        while left > 0:
            mine.append(next(words))
            left -= len("".join(mine[-1].text.split()))
        assert left == 0, c
        out.append(mine)
    return out


def _reference_turns() -> list[SpeakerTurn]:
    rows = [line.split() for line in (EVAL / "two-speakers.rttm").read_text().splitlines()]
    return [SpeakerTurn(float(r[3]), float(r[3]) + float(r[4]), r[7]) for r in rows if r]


@pytest.fixture(scope="module")
def recordings(base_model) -> dict[str, Transcript]:
    """Real speech (the call, the first AMI clip, the call with its reference speakers, the
    call as one long segment) and one synthetic case: slow speech with pauses."""
    from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_file

    options = TranscribeOptions(word_timestamps=True, batched=True)
    call = transcribe_file(base_model, EVAL / "two-speakers.wav", options)
    ami = sorted((EVAL / "ami").glob("*.wav"))[0]  # the first clip
    speakers = assign_speakers(call, _reference_turns())
    speakers.rename_speaker("speaker91", "Sheila Fitzgerald")
    slow = _words("so what I was going to say is this one", 1.0, 0.4, {i: 0.5 for i in range(9)})
    return {"call": call, "ami": transcribe_file(base_model, ami, options), "speakers": speakers,
            "one segment": _one_segment(call), "slow": Transcript([_seg(slow)])}  # fmt: skip


# --- real speech -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["call", "ami", "speakers", "one segment"])
def test_real_speech_keeps_every_rule_and_every_word(recordings, name: str) -> None:
    t = recordings[name]
    cs = cues(t)
    assert len(cs) >= max(4, len(t.segments)) and _broken(t, cs, DEFAULT) == set()
    said = "".join(w.text for s in t.segments for w in s.words)
    assert normalize(" ".join(_spoken(cs))) == normalize(said) and len(said.split()) > 40
    for (c, after), mine in zip(itertools.zip_longest(cs, cs[1:]), _cue_words(t, cs), strict=True):
        assert c.start == mine[0].start  # no cue starts before its words
        limit = after.start - DEFAULT.min_cue_gap if after else math.inf
        assert min(mine[-1].end, limit) <= c.end <= max(mine[-1].end, c.start + 0.8)
        whose = {w.speaker for w in mine}
        assert len(whose) == 1 and c.speaker == (t.speaker_name(*whose) if None not in whose
                                                 else None)  # fmt: skip


@pytest.mark.parametrize(
    ("rule", "name", "off"),
    [
        ("max_line_chars", "call", {"max_line_chars": None}),
        ("max_lines", "one segment", {"max_lines": None}),
        ("max_cue_seconds", "slow", {"max_cue_seconds": None}),
        ("min_cue_gap", "ami", {"min_cue_gap": 0}),
        ("min_cue_gap", "ami", {"min_cue_gap": None}),
        ("min_cue_seconds", "call", {"min_cue_seconds": 0}),
    ],
)
def test_each_rule_off_breaks_it(recordings, rule: str, name: str, off: dict) -> None:
    t = recordings[name]
    assert rule not in _broken(t, cues(t, DEFAULT), DEFAULT)
    assert rule in _broken(t, cues(t, dataclasses.replace(DEFAULT, **off)), DEFAULT)


def test_speaker_names_at_each_change_and_off(recordings) -> None:
    t = recordings["speakers"]
    srt, vtt = str(render(t, "srt")), str(render(t, "vtt"))
    assert "\nSheila Fitzgerald: " in srt and "\nspeaker90: " in srt
    named = [c for c in cues(t) if c.label]
    assert {c.label for c in named} == {"Sheila Fitzgerald", "speaker90"}
    assert "<v Sheila Fitzgerald>" in vtt and "<v speaker90>" in vtt
    quiet = SubtitleRules(speaker_names=False)
    assert "Sheila Fitzgerald" not in str(render(t, "srt", subtitles=quiet))
    assert "<v " not in str(render(t, "vtt", subtitles=quiet))


def test_old_rules_give_todays_one_cue_per_segment(recordings) -> None:
    for t in (recordings["call"], recordings["ami"], _mixed()):
        assert render(t, "srt", subtitles=OLD) == _old_srt(t)
        assert render(t, "vtt", subtitles=OLD) == _old_vtt(t)
    t = recordings["call"]
    over = [len([c for c in cues(t, rules) if max(map(len, c.lines)) > 42]) for rules in (OLD, DEFAULT)]  # fmt: skip
    assert over[0] > 0 and over[1] == 0


# --- where cues and lines are cut ------------------------------------------------------------


def _cut_texts(text: str, pauses=None) -> list[str]:
    t = Transcript([_seg(_words(text, 0.0, 0.25, pauses))])
    cs = cues(t)
    assert _broken(t, cs, DEFAULT) == set()
    return [" ".join(c.lines) for c in cs]


def test_cut_at_sentence_end_first_then_pause_then_comma_then_evenly() -> None:
    said = "We met at ten, talked about the plan for the launch, and then we agreed on it"
    sentence = f"{said}. Then we wrote it all down"
    after_plan = {7: 0.7}  # a pause after "plan"
    assert _cut_texts(sentence, after_plan)[0].endswith("agreed on it.")  # not the pause
    clauses = f"{said} then we wrote it all down"
    assert _cut_texts(clauses, after_plan)[0].endswith("plan")  # not a comma
    assert _cut_texts(clauses)[0].endswith("launch,")  # the comma nearer the middle
    even = _cut_texts("one two three four five six seven eight nine ten eleven twelve " * 3)
    assert len(even) == 3 and max(map(len, even)) - min(map(len, even)) <= 8


def test_lines_are_balanced_and_break_after_punctuation() -> None:
    def lines(text: str) -> list[str]:
        (cue,) = cues(Transcript([_seg(_words(text))]))
        return cue.lines

    said = "We can do it on Monday if the others agree to that plan"
    assert lines(said) == ["We can do it on Monday if", "the others agree to that plan"]
    comma = said.replace("Monday", "Monday,")
    assert lines(comma) == ["We can do it on Monday,", "if the others agree to that plan"]
    assert lines("Fine by me.") == ["Fine by me."]  # one line when it fits


def test_speaker_change_inside_a_segment_starts_a_new_cue() -> None:
    words = _words("are you there", 0, who="S1") + _words("yes I am here now", 0.9, who="S2")
    t = Transcript([_seg(words, "S1")], speakers={"S1": "Ann", "S2": "Bo"})
    cs = cues(t)
    assert [(c.lines, c.label) for c in cs] == [(["are you there"], "Ann"),
                                                (["yes I am here now"], "Bo")]  # fmt: skip
    assert cs[0].end == pytest.approx(0.9 - 0.08) and cs[1].start == 0.9
    assert "Ann: are you there\n" in str(render(t, "srt")) and "<v Bo>yes" in str(render(t, "vtt"))


def test_a_word_wider_than_a_line_stays_whole_on_its_own_line() -> None:
    long = "x" * 60
    t = Transcript([_seg(_words(f"look at this {long} and then the rest of it goes on"))])
    cs = cues(t)
    assert _broken(t, cs, DEFAULT) == set()
    assert [line for c in cs for line in c.lines if long in line] == [long]


def test_segments_without_words_share_their_time_by_characters() -> None:
    text = " One short line. Then a much longer sentence that goes on and on for a while longer."
    t = Transcript([Segment(10.0, 20.0, text), Segment(20.0, 21.0, " "), Segment(21, 22, " End.")])
    cs = cues(t)
    assert cs[0].lines == ["One short line."] and len(cs) == 4
    assert _broken(t, cs, DEFAULT) == set() and cs[0].start == 10.0
    chars = [len(" ".join(c.lines)) + 1 for c in cs[:3]]
    starts = [10.0 + 10.0 * sum(chars[:i]) / sum(chars) for i in range(3)]
    assert [c.start for c in cs[:3]] == pytest.approx(starts)


def test_edited_text_wins_over_words_that_no_longer_spell_it() -> None:
    seg = _seg(_words("the wrong words"))
    seg.text = " the right words, corrected by hand"
    (c,) = cues(Transcript([seg]))
    assert c.lines == ["the right words, corrected by hand"]
    assert (c.start, c.end) == (0, pytest.approx(0.9))


def test_a_short_cue_is_shown_longer_only_within_the_silence_after_it() -> None:
    alone = _words("okay", 1.0, 0.2)
    close = _words("right", 1.5, 0.2)
    t = Transcript([_seg(alone), _seg(close), _seg(_words("so", 4.0, 0.2))], duration=4.5)
    first, second, last = cues(t)
    assert (first.start, first.end) == (1.0, pytest.approx(1.5 - 0.08))  # up to the next word
    assert second.end == pytest.approx(2.3) and last.end == 4.5  # up to the transcript's end
    assert cues(t, dataclasses.replace(DEFAULT, min_cue_seconds=0))[0].end == 1.2


# --- files -----------------------------------------------------------------------------------


def _stamp_seconds(stamp: str, sep: str) -> float:
    match = re.fullmatch(rf"(\d{{2}}):([0-5]\d):([0-5]\d){re.escape(sep)}(\d{{3}})", stamp)
    assert match, stamp
    h, m, s, ms = map(int, match.groups())
    return h * 3600 + m * 60 + s + ms / 1000


def test_srt_and_vtt_files(recordings, tmp_path: Path) -> None:
    t = recordings["speakers"]
    srt = export(t, tmp_path / "call.srt").read_text(encoding="utf-8")
    blocks = [b.split("\n") for b in srt.strip("\n").split("\n\n")]
    assert [int(b[0]) for b in blocks] == list(range(1, len(blocks) + 1))
    assert all(3 <= len(b) <= 4 for b in blocks)  # number, times, one or two lines
    times = [[_stamp_seconds(x, ",") for x in b[1].split(" --> ")] for b in blocks]
    for (start, end), (after, _) in itertools.pairwise(times):
        assert start < end and after - end >= 0.08 - 0.0015  # the gap, to the millisecond
    vtt = export(t, tmp_path / "call.vtt", subtitles=DEFAULT).read_text(encoding="utf-8")
    assert vtt.startswith("WEBVTT\n\n")
    stamps = re.findall(r"^(\S+) --> (\S+)$", vtt, re.M)
    assert [[_stamp_seconds(x, ".") for x in pair] for pair in stamps] == times
    call = recordings["call"]
    old = export(call, tmp_path / "old.srt", subtitles=OLD).read_text(encoding="utf-8")
    assert old == _old_srt(call) != render(call, "srt")


def test_rules_read_back_from_json_are_checked() -> None:
    from deskscribe.transcript.subtitles import rule_value

    for rules in (DEFAULT, OLD, SubtitleRules(max_line_chars=20, max_lines=1, speaker_names=False)):
        assert SubtitleRules.from_dict(json.loads(json.dumps(rules.to_dict()))) == rules
    assert SubtitleRules.from_dict({"max_lines": "3", "newer": 1}) == SubtitleRules(max_lines=3)
    for bad in ({"max_lines": 0}, {"max_line_chars": 1.5}, {"min_cue_gap": "a"},
                {"max_cue_seconds": float("inf")}, {"min_cue_seconds": -1}):  # fmt: skip
        with pytest.raises(ValueError, match="must be"):
            SubtitleRules.from_dict(bad)
    assert rule_value("max_line_chars", " 32 ") == 32 and rule_value("min_cue_gap", "0") == 0.0
    with pytest.raises(ValueError, match="whole number from 1 to 10, not True"):
        rule_value("max_lines", True)


# --- through the product: the file queue and watched folders ---------------------------------


def _srt_lines(path: Path) -> list[list[str]]:
    """The text lines of each cue of an SRT or VTT file."""
    text = path.read_text(encoding="utf-8").removeprefix("WEBVTT\n\n")
    return [[x for x in b.split("\n") if " --> " not in x and not x.isdigit()]
            for b in text.strip("\n").split("\n\n")]  # fmt: skip


def test_file_queue_exports_by_the_settings_or_a_folders_own_rules(
    tiny_model, tmp_path: Path, monkeypatch
) -> None:
    """The file queue (the window's Files page, watched folders, `deskscribe watch`): its
    transcripts have word times (the transcript view and subtitles need them) whatever the
    formats; its automatic exports follow the rules in the settings, a watched folder's files
    the folder's own rules when it has them."""
    from deskscribe import settings
    from deskscribe.library import Library
    from deskscribe.service.files import local_runner
    from deskscribe.service.queue import ExportOptions, job_options, run_queued_item
    from deskscribe.service.watch import WatchFolder

    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    settings.set_value("subtitle_max_line_chars", "20")
    settings.set_value("subtitle_max_lines", "1")
    jfk, run = EVAL / "jfk.flac", local_runner(lambda *_: tiny_model)
    library = Library(tmp_path / "library.sqlite3")
    try:
        plain = library.add_file(jfk, job_options("tiny.en", None, "off"))
        outcome = run_queued_item(library, plain, run, export_options=ExportOptions(
            ["txt"], str(tmp_path / "txt"), automatic=True))  # fmt: skip
        assert outcome.status == "done" and all(s.words for s in outcome.transcript.segments)

        queued = library.add_file(jfk, job_options("tiny.en", None, "off"))
        outcome = run_queued_item(library, queued, run, export_options=ExportOptions(
            ["srt", "txt"], str(tmp_path / "queue"), automatic=True))  # fmt: skip
        t = outcome.transcript
        assert outcome.status == "done" and all(s.words for s in t.segments)
        assert library.load_transcript(queued).segments[0].words  # kept with the words
        cues = _srt_lines(tmp_path / "queue" / "jfk.srt")
        assert all(len(c) == 1 and len(c[0]) <= 20 for c in cues) and len(cues) >= 6
        assert " ".join(line for c in cues for line in c).split() == t.text.split()

        folder = WatchFolder(jfk.parent, formats=("vtt",), output_dir=str(tmp_path / "watched"),
                             subtitles=SubtitleRules(max_line_chars=32))  # fmt: skip
        watched = library.add_file(jfk, folder.options())
        outcome = run_queued_item(library, watched, run)  # its exports are its own
        assert outcome.status == "done", outcome.error
        assert all(s.words for s in outcome.transcript.segments)
        cues = _srt_lines(tmp_path / "watched" / "jfk.vtt")
        widths = [len(line) for c in cues for line in c]
        assert max(widths) <= 32 and max(widths) > 20 and max(map(len, cues)) == 2
    finally:
        library.close()


# --- today's exporters, for the one-cue-per-segment comparison --------------------------------


def _mixed() -> Transcript:
    segments = [Segment(0.0, 2.5, ' Hello, "world" — café', [Word(0, 0.4, " Hello,")], "S1"),
                Segment(2.5, 4.25, " Second part, same speaker.", speaker="S1"),
                Segment(4.5, 5.0, " "), Segment(5.0, 9.0, " Guten Tag <b> & c --> d", speaker="S2"),
                Segment(9.0, 12.0, " Line one\nline two")]  # fmt: skip
    segments[3].language = "de"
    return Transcript(segments, language="en", speakers={"S1": "Alice Müller"})


def _old_label(t: Transcript, seg: Segment) -> str | None:
    return None if seg.speaker is None else t.speaker_name(seg.speaker)


def _old_srt(t: Transcript) -> str:
    out = []
    for seg in (s for s in t.segments if s.text.strip()):
        label, text = _old_label(t, seg), " ".join(seg.text.split())
        text = (f"{label}: {text}" if label else text).replace("-->", "->")
        stamps = f"{format_timestamp(seg.start, ',')} --> {format_timestamp(max(seg.start, seg.end), ',')}"  # fmt: skip
        out.append(f"{len(out) + 1}\n{stamps}\n{text}\n")
    return "\n".join(out)


def _old_vtt(t: Transcript) -> str:
    def esc(text: str) -> str:
        return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    out = ["WEBVTT\n"]
    for seg in (s for s in t.segments if s.text.strip()):
        text = esc(" ".join(seg.text.split()))
        if seg.language and t.language and seg.language != t.language:
            text = f"<lang {seg.language}>{text}</lang>"
        if label := _old_label(t, seg):
            text = f"<v {esc(label)}>{text}"
        stamps = f"{format_timestamp(seg.start)} --> {format_timestamp(max(seg.start, seg.end))}"
        out.append(f"{stamps}\n{text}\n")
    return "\n".join(out)
