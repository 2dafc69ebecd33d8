"""Speaker names: renaming, merging, word-level assignment and voice profiles, through JSON and
every export format (parsed back where the format allows)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import docx
import numpy as np
import pytest

from deskscribe.speakers.diarize import Turn, assign_speakers, parse_speakers
from deskscribe.speakers.profiles import (
    ProfileError,
    apply_profiles,
    delete_profile,
    list_profiles,
    match,
    profiles_path,
    save_profile,
    save_speaker,
)
from deskscribe.transcript import Segment, Transcript, Word, render


def _words(start: float, text: str, step: float = 0.4) -> list[Word]:
    return [
        Word(round(start + i * step, 3), round(start + i * step + step * 0.8, 3), " " + w, 0.9)
        for i, w in enumerate(text.split())
    ]


def _whisper_like() -> Transcript:
    """Two Whisper segments; the first holds a speaker change in its middle."""
    first = _words(0.0, "Hello there, how are you today? I am fine thanks.")
    second = _words(5.0, "Shall we start the meeting now?")
    return Transcript(
        segments=[
            Segment(0.0, first[-1].end, "".join(w.text for w in first), first, tokens=[1, 2, 3]),
            Segment(5.0, second[-1].end, "".join(w.text for w in second), second, id=1),
        ],
        language="en",
        duration=8.0,
        source="call.wav",
    )


# "Hello there, how are you today?" = words 0-5 (0.0-2.32 s), "I am fine thanks." = 6-9.
TURNS = [Turn(0.0, 2.3, "S1"), Turn(2.35, 4.0, "S2"), Turn(4.9, 8.0, "S1")]


def test_assign_speakers_splits_segments_at_speaker_changes() -> None:
    t = assign_speakers(_whisper_like(), TURNS)
    assert [(s.speaker, s.text) for s in t.segments] == [
        ("S1", " Hello there, how are you today?"),
        ("S2", " I am fine thanks."),
        ("S1", " Shall we start the meeting now?"),
    ]
    assert [s.id for s in t.segments] == [0, 1, 2]
    a, b, c = t.segments
    assert a.start == 0.0 and a.end == b.start and b.start < b.words[0].start + 0.2
    assert b.end == pytest.approx(3.92) and c.start == 5.0
    assert all(w.speaker == s.speaker for s in t.segments for w in s.words)
    assert a.tokens == [1, 2, 3] and b.tokens == []  # tokens stay with the first piece
    assert t.speakers == {"S1": "Speaker 1", "S2": "Speaker 2"}
    assert render(t, "txt") == (
        "Speaker 1: Hello there, how are you today?\n"
        "Speaker 2: I am fine thanks.\n"
        "Speaker 1: Shall we start the meeting now?\n"
    )


def test_word_outside_every_turn_gets_the_nearest_and_wordless_segments_the_span() -> None:
    t = _whisper_like()
    t.segments.append(Segment(9.0, 9.8, " [music]", []))
    out = assign_speakers(t, [Turn(0.0, 1.0, "S1"), Turn(3.0, 3.5, "S2"), Turn(8.5, 10, "S3")])
    # " how" (0.8-1.12) overlaps S1 most; " you" (1.6-1.92) overlaps nothing, S1 is nearest.
    speakers = [w.speaker for w in out.segments[0].words]
    assert speakers[:4] == ["S1", "S1", "S1", "S1"]
    assert out.segments[-1].speaker == "S3" and out.segments[-1].text == " [music]"


def test_rename_round_trips_through_json_and_every_export(tmp_path: Path) -> None:
    t = assign_speakers(_whisper_like(), TURNS)
    t.rename_speaker("S1", "  Alice Müller ")
    t.rename_speaker("S2", "Bob <Dev>")
    back = Transcript.from_json(t.to_json())
    assert back == t and back.speakers == {"S1": "Alice Müller", "S2": "Bob <Dev>"}
    data = json.loads(render(back, "json"))
    assert [s["speaker"] for s in data["segments"]] == ["S1", "S2", "S1"]
    assert data["segments"][1]["words"][0]["speaker"] == "S2"
    assert render(back, "txt").splitlines()[1] == "Bob <Dev>: I am fine thanks."
    srt = render(back, "srt")
    # The name and text are wider than a subtitle line (42): two lines, the name on the first.
    assert "\nAlice Müller: Hello there,\nhow are you today?\n" in srt
    assert "\nBob <Dev>: I am fine thanks.\n" in srt
    vtt = render(back, "vtt")
    assert "<v Alice Müller>Hello there,\nhow are you today?\n" in vtt
    assert "<v Bob &lt;Dev&gt;>I am fine thanks." in vtt
    assert "[00:00] **Alice Müller:** Hello there" in render(back, "md")
    assert ",Bob <Dev>,I am fine thanks." in render(back, "csv")
    paras = [p.text for p in docx.Document(io.BytesIO(render(back, "docx"))).paragraphs]
    assert "[00:02] Bob <Dev>: I am fine thanks." in paras
    # An empty name goes back to the id, everywhere.
    back.rename_speaker("S2", "")
    assert "S2" not in back.speakers and "S2: I am fine thanks." in render(back, "txt")


def test_merge_speakers_relabels_words_and_joins_the_cut_segment() -> None:
    t = assign_speakers(_whisper_like(), TURNS)
    t.rename_speaker("S2", "Bob")
    t.merge_speakers("S2", "S1")
    assert t.speaker_ids() == ["S1"]
    assert t.speakers == {"S1": "Speaker 1"}
    # The two pieces of the first Whisper segment are one again; the separate one stays.
    assert [s.text for s in t.segments] == [
        " Hello there, how are you today? I am fine thanks.",
        " Shall we start the meeting now?",
    ]
    assert [s.id for s in t.segments] == [0, 1]
    assert t.segments[0].tokens == [1, 2, 3]
    assert all(w.speaker == "S1" for s in t.segments for w in s.words)
    assert Transcript.from_json(t.to_json()) == t
    assert render(t, "txt") == (
        "Speaker 1: Hello there, how are you today? I am fine thanks. Shall we start the "
        "meeting now?\n"
    )
    assert "Bob" not in render(t, "srt") and "S2" not in render(t, "json")


def test_merge_into_unnamed_speaker_takes_the_name() -> None:
    t = assign_speakers(_whisper_like(), TURNS)
    t.speakers = {"S2": "Carol"}
    t.merge_speakers("S2", "S1", join=False)
    assert t.speakers == {"S1": "Carol"} and len(t.segments) == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [("auto", (None, None, None)), ("3", (3, None, None)), ("2-4", (None, 2, 4))],
)
def test_parse_speakers(value: str, expected: tuple) -> None:
    o = parse_speakers(value)
    assert (o.num_speakers, o.min_speakers, o.max_speakers) == expected


@pytest.mark.parametrize("value", ["0", "4-2", "two", "-1", "2-"])
def test_parse_speakers_rejects(value: str) -> None:
    with pytest.raises(ValueError, match="auto, a count"):
        parse_speakers(value)


# --------------------------------------------------------------------------- profiles


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def _unit(seed: int, dim: int = 256) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=dim)
    return v / np.linalg.norm(v)


def _near(v: np.ndarray, seed: int, noise: float = 0.1) -> np.ndarray:
    w = v + noise * _unit(seed, v.shape[0])
    return w / np.linalg.norm(w)


def test_profiles_save_list_match_and_delete(data_dir: Path) -> None:
    alice, bob = _unit(1), _unit(2)
    save_profile("Alice", [_near(alice, 10), _near(alice, 11)], model="resemblyzer")
    save_profile("Bob", bob, model="resemblyzer")
    save_profile("alice", _near(alice, 12), model="resemblyzer")  # same person, learns more
    profiles = list_profiles()
    assert [(p.name, p.embeddings.shape) for p in profiles] == [
        ("alice", (3, 256)),
        ("Bob", (1, 256)),
    ]
    assert match(_near(alice, 13), model="resemblyzer") == "alice"
    assert match(_near(bob, 14), model="resemblyzer") == "Bob"
    assert match(_unit(3), model="resemblyzer") is None  # an unknown voice
    assert match(alice, model="wespeaker") is None  # another model's vectors never match
    # The file holds names, model ids and numbers only: no audio, no paths.
    stored = json.loads(profiles_path().read_text(encoding="utf-8"))
    assert stored["format"] == "deskscribe-voice-profiles"
    assert set(stored["profiles"][0]) == {"name", "model", "created", "updated", "embeddings"}
    assert delete_profile("ALICE") is True and delete_profile("Alice") is False
    assert [p.name for p in list_profiles()] == ["Bob"]


def test_apply_profiles_names_known_voices_once_and_keeps_user_names(data_dir: Path) -> None:
    alice, bob = _unit(1), _unit(2)
    save_profile("Alice", alice, model="m")
    save_profile("Bob", bob, model="m")
    t = _whisper_like()
    t.segments.append(Segment(8.2, 8.8, " Yes.", [Word(8.2, 8.8, " Yes.")]))
    t = assign_speakers(t, [*TURNS, Turn(8.0, 9.0, "S3")])
    t.rename_speaker("S2", "Bobby")  # the user's own choice wins over a profile
    centroids = {"S1": _near(alice, 5), "S2": _near(bob, 6), "S3": _near(alice, 7, 0.3)}
    named = apply_profiles(t, centroids, model="m")
    assert named == {"S1": "Alice"}  # S3 is less like Alice than S1; a profile names one speaker
    assert t.speakers == {"S1": "Alice", "S2": "Bobby", "S3": "Speaker 3"}
    assert render(t, "txt").startswith("Alice: Hello there")
    # Saving a transcript speaker uses their display name.
    save_speaker(t, "S2", centroids, model="m")
    assert match(_near(bob, 8), model="m") in ("Bob", "Bobby")
    with pytest.raises(ProfileError, match="no voice embedding"):
        save_speaker(t, "S9", centroids, model="m")


def test_broken_profile_file_is_reported_not_overwritten(data_dir: Path) -> None:
    profiles_path().parent.mkdir(parents=True, exist_ok=True)
    profiles_path().write_text("{not json", encoding="utf-8")
    with pytest.raises(ProfileError, match="move the file away"):
        list_profiles()
    with pytest.raises(ProfileError):
        save_profile("Alice", _unit(1))
    assert profiles_path().read_text(encoding="utf-8") == "{not json"
    with pytest.raises(ProfileError, match="needs a name"):
        save_profile("  ", _unit(1))
