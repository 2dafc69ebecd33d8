"""Transcript model, JSON round-trip and exporters, checked by parsing the output back."""

from __future__ import annotations

import csv
import errno
import importlib
import io
import json
import os
import re
import stat
from pathlib import Path

import docx
import pytest

from deskscribe.transcript import (
    FORMATS,
    ExportExistsError,
    Segment,
    SpeakerTurn,
    SubtitleRules,
    Transcript,
    Word,
    export,
    format_clock,
    format_timestamp,
    render,
)
from skips import other_os

# The package re-exports the export() function under the submodule's name, so reach the module
# itself through the import system.
export_module = importlib.import_module("deskscribe.transcript.export")
CUE_TIME = r"(\d{2,}):(\d{2}):(\d{2})[,.](\d{3})"


def _transcript() -> Transcript:
    words = [Word(0.0, 0.4, " Hello,", 0.98, "S1"), Word(0.4, 1.1, ' "world"', 0.91)]
    first = Segment(0.0, 2.5, ' Hello, "world" — café', words, "S1", avg_logprob=-0.21)
    first.no_speech_prob, first.compression_ratio, first.tokens = 0.01, 1.3, [50364, 2425, 11]
    return Transcript(
        segments=[
            first,
            Segment(2.5, 4.25, " Second part, same speaker.", speaker="S1", id=1),
            Segment(59.9996, 61.1234, " 中文 réponse 🎉", speaker="S2", id=2, temperature=0.2),
            Segment(3725.5, 3727.001, ' Past an hour: a, b; "c".', speaker="S1", id=3),
            Segment(3727.001, 3730.0, " Line one\nline two", speaker="S2", id=4),
        ],
        language="en",
        duration=3731.0,
        source="/recordings/Team meeting, 2024.m4a",
        model="large-v3-turbo",
        speakers={"S1": "Alice Müller"},  # S2 has no name: shown as its id
    )


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def _parse_cues(text: str) -> list[tuple[int, int, str]]:
    """(start_ms, end_ms, text) for each cue of an SRT or VTT file."""
    cues = []
    pattern = re.compile(rf"^{CUE_TIME} --> {CUE_TIME}\n(.*?)(?:\n\n|\n?\Z)", re.M | re.S)
    for m in pattern.finditer(text):
        h1, m1, s1, f1, h2, m2, s2, f2 = (int(g) for g in m.groups()[:8])
        start = ((h1 * 60 + m1) * 60 + s1) * 1000 + f1
        end = ((h2 * 60 + m2) * 60 + s2) * 1000 + f2
        assert m1 < 60 and s1 < 60 and m2 < 60 and s2 < 60
        cues.append((start, end, m.group(9)))
    return cues


def _segment_times(t: Transcript, gap: float) -> list[tuple[int, int]]:
    """(start_ms, end_ms) of one cue per segment (each fits the subtitle rules): from the
    segment's start to its end, ended ``gap`` s before the next segment when it touches it."""
    out = []
    for seg, after in zip(t.segments, [*t.segments[1:], None], strict=True):
        end = seg.end if after is None else min(seg.end, after.start - gap)
        out.append((_ms(seg.start), _ms(end)))
    return out


# --- model ------------------------------------------------------------------------------------


def test_json_round_trip_is_exact() -> None:
    t = _transcript()
    assert Transcript.from_json(t.to_json()) == t
    assert Transcript.from_dict(json.loads(json.dumps(t.to_dict()))) == t
    assert Transcript.from_json(t.to_json(indent=None)) == t
    data = json.loads(t.to_json())
    assert data["format"] == "deskscribe-transcript"
    assert data["version"] == 1
    assert "中文" in t.to_json()  # kept readable, not \u-escaped
    assert render(t, "json") == t.to_json()


def test_defaults_are_not_shared_and_round_trip() -> None:
    a, b = Segment(0, 1, " a"), Segment(1, 2, " b")
    a.words.append(Word(0, 1, " a"))
    assert b.words == [] and b.tokens == []
    t = Transcript([a, b])
    assert Transcript.from_json(t.to_json()) == t
    assert Transcript([]).speakers == {}


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"format": "something-else", "version": 1, "segments": []}, "something-else"),
        ({"version": 1, "segments": []}, "format"),
        ({"format": "deskscribe-transcript", "version": 2, "segments": []}, "newer"),
        ({"format": "deskscribe-transcript", "version": "1", "segments": []}, "version"),
        ({"format": "deskscribe-transcript", "version": 1}, "segments"),
        ({"format": "deskscribe-transcript", "version": 1, "segments": [{"start": 0}]}, "end"),
        ([1, 2], "object"),
    ],
)
def test_from_dict_rejects_bad_input(data: object, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        Transcript.from_dict(data)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="invalid JSON"):
        Transcript.from_json("{not json")


def test_speaker_name_and_text() -> None:
    t = _transcript()
    assert t.speaker_name("S1") == "Alice Müller"
    assert t.speaker_name("S2") == "S2"
    assert t.text.startswith('Hello, "world" — café Second part')
    assert t.text == t.text.strip() and "  " not in t.text


# --- timestamps -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0, "00:00:00.000"),
        (1.0005, "00:00:01.000"),  # 1000.4999.. ms in binary: rounds down
        (62.5, "00:01:02.500"),
        (59.9996, "00:01:00.000"),
        (3599.9999, "01:00:00.000"),
        (3725.5, "01:02:05.500"),
        (360000.0, "100:00:00.000"),
        (-0.2, "00:00:00.000"),
    ],
)
def test_format_timestamp(seconds: float, expected: str) -> None:
    assert format_timestamp(seconds) == expected
    assert format_timestamp(seconds, ",") == expected.replace(".", ",")


def test_format_clock() -> None:
    assert format_clock(59.9996) == "01:00"
    assert format_clock(59.4) == "00:59"
    assert format_clock(3725.5) == "1:02:05"


# --- renderers --------------------------------------------------------------------------------


def test_txt_plain_joins_speaker_turns() -> None:
    out = render(_transcript(), "txt")
    assert out.splitlines() == [
        'Alice Müller: Hello, "world" — café Second part, same speaker.',
        "S2: 中文 réponse 🎉",
        'Alice Müller: Past an hour: a, b; "c".',
        "S2: Line one line two",
    ]


def test_txt_with_timestamps_one_line_per_segment() -> None:
    lines = str(render(_transcript(), "txt", timestamps=True)).splitlines()
    assert lines[0] == '[00:00:00.000] Alice Müller: Hello, "world" — café'
    assert lines[2] == "[00:01:00.000] S2: 中文 réponse 🎉"
    assert lines[3] == '[01:02:05.500] Alice Müller: Past an hour: a, b; "c".'
    assert len(lines) == 5


def test_txt_without_speakers() -> None:
    t = Transcript([Segment(0, 1, " One."), Segment(1, 2, " Two.")])
    assert render(t, "txt") == "One.\nTwo.\n"
    assert render(t, "txt", timestamps=True) == "[00:00:00.000] One.\n[00:00:01.000] Two.\n"


def test_srt_cues_parse_back() -> None:
    t = _transcript()
    out = str(render(t, "srt"))
    blocks = out.strip("\n").split("\n\n")
    assert [int(b.split("\n")[0]) for b in blocks] == [1, 2, 3, 4, 5]
    cues = _parse_cues(out)
    assert [(s, e) for s, e, _ in cues] == _segment_times(t, SubtitleRules().min_cue_gap)
    assert _segment_times(t, 0.08)[0] == (0, 2420)  # touching segments: 80 ms apart
    exact = _parse_cues(str(render(t, "srt", subtitles=SubtitleRules(min_cue_gap=0))))
    assert [(s, e) for s, e, _ in exact] == _segment_times(t, 0)
    assert "," in out.split("\n")[1]  # SRT uses a comma before the milliseconds
    assert cues[2][2] == "S2: 中文 réponse 🎉"
    assert cues[0][2] == 'Alice Müller: Hello, "world" — café'
    assert cues[4][2] == "S2: Line one line two"  # no newline can split a cue


def test_vtt_cues_and_voice_tags() -> None:
    t = _transcript()
    t.segments.append(Segment(3731, 3732, " a <b> & c --> d", speaker="S2"))
    out = str(render(t, "vtt"))
    assert out.startswith("WEBVTT\n\n")
    cues = _parse_cues(out)
    assert [(s, e) for s, e, _ in cues] == _segment_times(t, SubtitleRules().min_cue_gap)
    exact = _parse_cues(str(render(t, "vtt", subtitles=SubtitleRules(min_cue_gap=0))))
    assert [(s, e) for s, e, _ in exact] == _segment_times(t, 0)
    assert cues[0][2] == '<v Alice Müller>Hello, "world" — café'
    assert cues[2][2] == "<v S2>中文 réponse 🎉"
    assert cues[-1][2] == "<v S2>a &lt;b&gt; &amp; c --&gt; d"


def test_empty_segments_are_skipped_in_subtitles() -> None:
    t = Transcript([Segment(0, 1, " "), Segment(1, 2, " kept")])
    srt = str(render(t, "srt"))
    assert srt.startswith("1\n00:00:01,000 --> 00:00:02,000\nkept")
    assert len(_parse_cues(str(render(t, "vtt")))) == 1


def test_markdown() -> None:
    lines = [line for line in str(render(_transcript(), "md")).splitlines() if line]
    assert lines[0] == "# Team meeting, 2024.m4a"
    assert lines[1] == '[00:00] **Alice Müller:** Hello, "world" — café'
    assert lines[3] == "[01:00] **S2:** 中文 réponse 🎉"
    assert lines[4] == '[1:02:05] **Alice Müller:** Past an hour: a, b; "c".'
    escaped = render(Transcript([Segment(0, 1, " *not* <b>")]), "md")
    assert "\\*not\\* \\<b\\>" in escaped
    assert str(escaped).startswith("# Transcript\n")


def test_csv_reads_back_exactly() -> None:
    t = _transcript()
    rows = list(csv.reader(io.StringIO(str(render(t, "csv")), newline="")))
    assert rows[0] == ["start", "end", "speaker", "text", "language"]
    assert rows[1:] == [
        [
            f"{_ms(s.start) / 1000:.3f}",
            f"{_ms(s.end) / 1000:.3f}",
            t.speaker_name(s.speaker) if s.speaker else "",
            s.text.strip(),
            s.language or t.language or "",
        ]
        for s in t.segments
    ]
    assert rows[3][0] == "60.000"
    assert rows[5][3] == "Line one\nline two"  # embedded newline survives quoting


def test_docx_reopens_with_text_and_speakers() -> None:
    t = _transcript()
    t.segments.append(Segment(3731, 3732, " bad\x00char\x0b here", speaker="S1"))
    data = render(t, "docx")
    assert isinstance(data, bytes)
    doc = docx.Document(io.BytesIO(data))
    paragraphs = doc.paragraphs
    assert paragraphs[0].text == "Team meeting, 2024.m4a"
    assert paragraphs[0].style.name.startswith("Heading")
    body = paragraphs[1:]
    assert len(body) == len(t.segments)
    for para, seg in zip(body[:-1], t.segments[:-1], strict=True):
        assert seg.text.strip() in para.text
        name = t.speaker_name(seg.speaker or "")
        assert para.text.startswith(f"[{format_clock(seg.start)}] {name}: ")
        assert para.runs[1].text == f"{name}:" and para.runs[1].bold
    assert "badchar here" in body[-1].text
    assert doc.core_properties.title == "Team meeting, 2024.m4a"


def test_unknown_format_lists_supported() -> None:
    with pytest.raises(ValueError) as info:
        render(_transcript(), "pdf")
    message = str(info.value)
    assert "'pdf'" in message
    for fmt in FORMATS:
        assert fmt in message
    t = _transcript()  # but names are lenient about case, dots and common aliases
    assert render(t, ".SRT") == render(t, "srt")
    assert render(t, "markdown") == render(t, "md")


# --- writing ----------------------------------------------------------------------------------


def _leftovers(directory: Path, keep: set[str]) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


@pytest.mark.parametrize("fmt", FORMATS)
def test_export_every_format_by_suffix(tmp_path: Path, fmt: str) -> None:
    t = _transcript()
    path = export(t, tmp_path / f"out.{fmt}")
    assert path == tmp_path / f"out.{fmt}"
    expected = render(t, fmt)
    if isinstance(expected, bytes):  # zip entries carry write times: compare the documents
        docs = (docx.Document(str(path)), docx.Document(io.BytesIO(expected)))
        assert [p.text for p in docs[0].paragraphs] == [p.text for p in docs[1].paragraphs]
    else:
        encoding = "utf-8-sig" if fmt == "csv" else "utf-8"
        assert path.read_bytes().decode(encoding) == expected
    assert _leftovers(tmp_path, {path.name}) == []


def test_export_json_and_csv_files_read_back(tmp_path: Path) -> None:
    t = _transcript()
    path = export(t, tmp_path / "t.json")
    assert Transcript.from_json(path.read_text(encoding="utf-8")) == t
    with open(export(t, tmp_path / "t.csv"), encoding="utf-8-sig", newline="") as f:
        assert [r[3] for r in list(csv.reader(f))[1:]] == [s.text.strip() for s in t.segments]


def test_export_without_hard_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """File systems without os.link fall back to check-then-rename, still never overwriting."""

    def no_link(src: object, dst: object) -> None:
        raise OSError(errno.EPERM, "no hard links here")

    monkeypatch.setattr(export_module.os, "link", no_link)
    path = export(_transcript(), tmp_path / "a.txt")
    assert path.read_text(encoding="utf-8") == render(_transcript(), "txt")
    with pytest.raises(ExportExistsError):
        export(_transcript(), path)
    assert _leftovers(tmp_path, {"a.txt"}) == []


def test_export_explicit_format_and_missing_suffix(tmp_path: Path) -> None:
    t = _transcript()
    path = export(t, tmp_path / "notes", "md")
    assert path.read_text(encoding="utf-8") == render(t, "md")
    with pytest.raises(ValueError, match="suffix"):
        export(t, tmp_path / "nosuffix")
    with pytest.raises(ValueError, match="txt, srt, vtt"):
        export(t, tmp_path / "x.pdf")
    assert not (tmp_path / "x.pdf").exists()


def test_export_never_overwrites_by_default(tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    target.write_text("precious", encoding="utf-8")
    with pytest.raises(ExportExistsError) as info:
        export(_transcript(), target)
    assert isinstance(info.value, FileExistsError)
    assert info.value.errno == errno.EEXIST
    assert "overwrite" in str(info.value) and "another" in str(info.value)
    assert info.value.filename == str(target)
    assert target.read_text(encoding="utf-8") == "precious"
    assert _leftovers(tmp_path, {"keep.txt"}) == []


def test_export_overwrite_replaces(tmp_path: Path) -> None:
    target = tmp_path / "keep.txt"
    target.write_text("old", encoding="utf-8")
    export(_transcript(), target, overwrite=True)
    assert target.read_text(encoding="utf-8") == render(_transcript(), "txt")
    assert _leftovers(tmp_path, {"keep.txt"}) == []


def test_export_loses_race_safely(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that appears after the existence check is still not overwritten."""
    target = tmp_path / "race.txt"
    real_render = export_module.render

    def render_then_someone_writes(*args: object, **kwargs: object) -> str | bytes:
        target.write_text("theirs", encoding="utf-8")
        return real_render(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(export_module, "render", render_then_someone_writes)
    with pytest.raises(ExportExistsError):
        export(_transcript(), target)
    assert target.read_text(encoding="utf-8") == "theirs"
    assert _leftovers(tmp_path, {"race.txt"}) == []


def test_export_failure_leaves_no_temp_and_keeps_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "keep.srt"
    target.write_text("old", encoding="utf-8")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(export_module.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk on fire"):
        export(_transcript(), target, overwrite=True)
    assert target.read_text(encoding="utf-8") == "old"
    assert _leftovers(tmp_path, {"keep.srt"}) == []


def test_export_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        export(_transcript(), tmp_path / "nope" / "out.txt")


@pytest.mark.skipif(os.name != "posix", reason=other_os("POSIX", "file modes"))
def test_export_file_mode_follows_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = export(_transcript(), tmp_path / "mode.txt")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    path.chmod(0o604)
    export(_transcript(), path, overwrite=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o604


def test_csv_cells_that_a_spreadsheet_would_run_are_plain_text() -> None:
    t = Transcript(
        [
            Segment(0, 1, ' =HYPERLINK("http://x","click")', speaker="S1"),
            Segment(1, 2, " -2+3", speaker="S2"),
            Segment(2, 3, " an equals sign = inside is fine", speaker="S1"),
            # The language comes from a server's client or a transcript file too.
            Segment(3, 4, " hola", speaker="S2", language="=cmd|'/c calc'!A1"),
        ],
        speakers={"S1": "@admin", "S2": "Bob"},
    )
    rows = list(csv.reader(io.StringIO(str(render(t, "csv")), newline="")))
    assert rows[1][2:4] == ["'@admin", '\'=HYPERLINK("http://x","click")']
    assert rows[2][2:4] == ["Bob", "'-2+3"]
    assert rows[3][3] == "an equals sign = inside is fine"
    assert rows[4][4] == "'=cmd|'/c calc'!A1"


# --- who spoke when: turns and RTTM -----------------------------------------------------------


def _with_turns() -> Transcript:
    t = _transcript()
    t.turns = [
        SpeakerTurn(0.0, 4.3, "S1"),  # covers the pause between the first two segments
        SpeakerTurn(59.9, 61.2, "S2"),
        SpeakerTurn(3725.4, 3727.0, "S1"),
        SpeakerTurn(3727.0, 3730.0, "S2"),
    ]
    return t


def test_turns_round_trip_and_stay_out_of_json_without_them() -> None:
    t = _with_turns()
    data = json.loads(t.to_json())
    assert data["turns"][1] == {"start": 59.9, "end": 61.2, "speaker": "S2"}
    assert Transcript.from_json(t.to_json()) == t
    assert "turns" not in _transcript().to_dict()  # older readers see what they saw before
    assert Transcript.from_json(_transcript().to_json()).turns == []


def test_merge_speakers_relabels_turns() -> None:
    t = _with_turns()
    t.merge_speakers("S2", "S1")
    # the last two turns touch and now share a speaker: one turn
    assert [(x.start, x.end, x.speaker) for x in t.turns] == [
        (0.0, 4.3, "S1"),
        (59.9, 61.2, "S1"),
        (3725.4, 3730.0, "S1"),
    ]


def test_rttm_reads_back_with_pyannote_and_scores() -> None:
    """Our RTTM is what standard tools read: pyannote.database parses it, and
    pyannote.metrics scores it against the same turns with zero error."""
    from pyannote.core import Annotation, Timeline
    from pyannote.core import Segment as PSegment
    from pyannote.database.util import load_rttm
    from pyannote.metrics.diarization import DiarizationErrorRate

    t = _with_turns()
    text = render(t, "rttm")
    assert text.splitlines()[0].split() == [
        "SPEAKER", "Team_meeting,_2024", "1", "0.000", "4.300", "<NA>", "<NA>", "Alice_Müller",
        "<NA>", "<NA>",
    ]  # fmt: skip
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"deskscribe-{os.getpid()}.rttm"
    path.write_text(text, encoding="utf-8")
    try:
        loaded = load_rttm(path)
    finally:
        path.unlink()
    ann = loaded["Team_meeting,_2024"]
    assert sorted(ann.labels()) == ["Alice_Müller", "S2"]  # S2 has no name: its id
    ref = Annotation()
    for i, turn in enumerate(t.turns):
        ref[PSegment(turn.start, turn.end), i] = turn.speaker
    uem = Timeline([PSegment(0.0, 3731.0)])
    assert DiarizationErrorRate(collar=0.0)(ref, ann, uem=uem) == pytest.approx(0.0, abs=1e-9)
    assert ann.get_timeline().duration() == pytest.approx(1.3 + 4.3 + 1.6 + 3.0, abs=1e-6)


def test_rttm_without_turns_uses_segments_and_without_speakers_is_empty() -> None:
    t = _transcript()  # no diarization turns (channels mode, older files): segment runs
    lines = [line.split() for line in render(t, "rttm").splitlines()]
    assert [(x[3], x[4], x[7]) for x in lines] == [
        ("0.000", "4.250", "Alice_Müller"),
        ("60.000", "1.123", "S2"),  # 59.9996 s rounds to the millisecond first
        ("3725.500", "1.501", "Alice_Müller"),
        ("3727.001", "2.999", "S2"),
    ]
    bare = Transcript(segments=[Segment(0.0, 1.0, " hi")])
    assert render(bare, "rttm") == ""
