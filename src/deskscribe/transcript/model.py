"""The transcript data model: words, segments, a whole transcript, and its JSON form.

Plain dataclasses, no Qt and no heavy imports, so every layer (engine, speakers, library, GUI,
CLI) can share them. Times are seconds from the start of the audio as floats.

The JSON form is versioned (``{"format": "deskscribe-transcript", "version": 1, ...}``) and round-
trips exactly: floats are written with Python's shortest exact repr, so
``Transcript.from_json(t.to_json()) == t`` for any transcript of finite numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

FORMAT_NAME = "deskscribe-transcript"
FORMAT_VERSION = 1
# merge_speakers joins same-speaker neighbours at most this far apart (seconds): pieces that
# diarization cut out of one Whisper segment touch (0 s); separate utterances are further apart.
JOIN_GAP = 0.05


@dataclass
class Word:
    """One word with its times. ``text`` keeps Whisper's leading space (``" hello"``)."""

    start: float
    end: float
    text: str
    probability: float = 1.0
    speaker: str | None = None
    # Said while another speaker was speaking (double talk); written to JSON only when true.
    overlap: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = {
            "start": float(self.start),
            "end": float(self.end),
            "text": self.text,
            "probability": self.probability,
            "speaker": self.speaker,
        }
        if self.overlap:
            out["overlap"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Word:
        return cls(
            start=float(data["start"]),
            end=float(data["end"]),
            text=str(data["text"]),
            probability=float(data.get("probability", 1.0)),
            speaker=_opt_str(data.get("speaker")),
            overlap=bool(data.get("overlap", False)),
        )


@dataclass
class Segment:
    """A run of speech Whisper decoded as one unit, with optional word times and speaker id."""

    start: float
    end: float
    text: str
    words: list[Word] = field(default_factory=list)
    speaker: str | None = None
    id: int = 0
    avg_logprob: float = 0.0
    no_speech_prob: float = 0.0
    compression_ratio: float = 0.0
    temperature: float = 0.0
    tokens: list[int] = field(default_factory=list)
    language: str | None = None  # the language it was transcribed in ("en", "de", …)
    # The segment in other languages ("fr" -> text), from `deskscribe translate` or the app's
    # Translate: a second track beside the original, which stays. An edit of the text drops
    # them (they would no longer say the same).
    translations: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "start": float(self.start),
            "end": float(self.end),
            "text": self.text,
            "speaker": self.speaker,
            "language": self.language,
            "avg_logprob": self.avg_logprob,
            "no_speech_prob": self.no_speech_prob,
            "compression_ratio": self.compression_ratio,
            "temperature": self.temperature,
            "tokens": list(self.tokens),
            "words": [w.to_dict() for w in self.words],
        }
        if self.translations:
            out["translations"] = dict(self.translations)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Segment:
        return cls(
            start=float(data["start"]),
            end=float(data["end"]),
            text=str(data["text"]),
            words=[Word.from_dict(w) for w in data.get("words") or []],
            speaker=_opt_str(data.get("speaker")),
            id=int(data.get("id", 0)),
            avg_logprob=float(data.get("avg_logprob", 0.0)),
            no_speech_prob=float(data.get("no_speech_prob", 0.0)),
            compression_ratio=float(data.get("compression_ratio", 0.0)),
            temperature=float(data.get("temperature", 0.0)),
            tokens=[int(t) for t in data.get("tokens") or []],
            language=_opt_str(data.get("language")),
            translations={str(k): str(v) for k, v in (data.get("translations") or {}).items()},
        )


def default_speaker_name(speaker_id: str) -> str:
    """What a voice found by clustering ("S1", "S2", …) is called until the user names it:
    "Speaker 1", …; other ids ("You", "Others", a profile's name) are their own name."""
    if speaker_id.startswith("S") and speaker_id[1:].isdigit():
        return f"Speaker {speaker_id[1:]}"
    return speaker_id


@dataclass
class SpeakerTurn:
    """Who spoke when, as diarization found it: a span of speech and its speaker id. Unlike
    word spans, turns cover the pauses inside a turn and speech the recogniser skipped."""

    start: float
    end: float
    speaker: str

    def to_dict(self) -> dict[str, Any]:
        return {"start": float(self.start), "end": float(self.end), "speaker": self.speaker}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SpeakerTurn:
        return cls(start=float(data["start"]), end=float(data["end"]), speaker=str(data["speaker"]))


@dataclass
class Transcript:
    """A whole transcript: segments plus what it came from.

    ``speakers`` maps speaker ids used in segments/words (``"S1"``) to display names
    (``"Alice"``); ids without an entry are shown as the id itself. ``turns`` holds the
    diarization itself (who spoke when, in time order) when speakers were labelled by voice;
    it is empty otherwise. The JSON form writes ``turns`` only when there are some, so
    transcripts without them read and write as before.
    """

    segments: list[Segment]
    language: str | None = None
    duration: float | None = None
    source: str | None = None
    model: str | None = None
    speakers: dict[str, str] = field(default_factory=dict)
    turns: list[SpeakerTurn] = field(default_factory=list)
    # Meeting notes written by a language model (`llm.notes.Notes.to_dict`), kept with the
    # transcript they cite; None until notes are made.
    notes: dict[str, Any] | None = None

    def name_voices(self) -> None:
        """Give voice speakers without a name ("S1", "S2", …) their default ("Speaker 1", …)."""
        for sid in self.speaker_ids():
            name = default_speaker_name(sid)
            if sid not in self.speakers and name != sid:
                self.speakers[sid] = name

    def speaker_name(self, speaker_id: str) -> str:
        """The display name for ``speaker_id``, or the id itself when it has none."""
        return self.speakers.get(speaker_id) or speaker_id

    @property
    def text(self) -> str:
        """All segment texts joined by single spaces, without leading/trailing whitespace."""
        return " ".join(t for t in (s.text.strip() for s in self.segments) if t)

    def translation_languages(self) -> list[str]:
        """The languages some segment has a translation in, in order of first appearance."""
        seen: dict[str, None] = {}
        for seg in self.segments:
            for lang in seg.translations:
                seen.setdefault(lang, None)
        return list(seen)

    def translated(self, language: str) -> Transcript:
        """A copy in ``language``: each segment's text is its translation (times and speakers
        kept, words dropped: their times belong to the original words). A segment without a
        translation keeps its original text. For subtitles and exports in that language."""
        segments = [
            Segment(s.start, s.end, s.translations.get(language, s.text), speaker=s.speaker,
                    id=s.id, language=language if language in s.translations else s.language)
            for s in self.segments
        ]  # fmt: skip
        return Transcript(segments, language=language, duration=self.duration,
                          source=self.source, model=self.model, speakers=dict(self.speakers),
                          turns=list(self.turns), notes=self.notes)  # fmt: skip

    # --- speakers ----------------------------------------------------------------------------

    def speaker_ids(self) -> list[str]:
        """Speaker ids used by segments or words, in order of first appearance."""
        seen: dict[str, None] = {}
        for seg in self.segments:
            for who in (seg.speaker, *(w.speaker for w in seg.words)):
                if who is not None:
                    seen.setdefault(who, None)
        return list(seen)

    def rename_speaker(self, speaker_id: str, name: str | None) -> None:
        """Show ``speaker_id`` as ``name`` everywhere (exports included); ``None`` or an empty
        name goes back to the default. Ids in segments and words stay as they are."""
        name = (name or "").strip()
        if name:
            self.speakers[speaker_id] = name
        else:
            self.speakers.pop(speaker_id, None)

    def merge_speakers(self, from_id: str, into_id: str, *, join: bool = True) -> None:
        """Relabel every segment and word of ``from_id`` as ``into_id`` (one person detected as
        two). ``into_id`` keeps its name (or takes ``from_id``'s when it has none).

        With ``join``, neighbouring segments that now share the speaker and that diarization
        had cut out of one Whisper segment (their times touch) are joined again; segment ids
        are renumbered.
        """
        if from_id == into_id:
            return
        touched: set[int] = set()
        for i, seg in enumerate(self.segments):
            if seg.speaker == from_id:
                seg.speaker = into_id
                touched.add(i)
            for w in seg.words:
                if w.speaker == from_id:
                    w.speaker = into_id
        if into_id not in self.speakers and from_id in self.speakers:
            self.speakers[into_id] = self.speakers[from_id]
        self.speakers.pop(from_id, None)
        self.turns = _merged_turns(self.turns, from_id, into_id)
        if join and touched:
            self.segments = _join_touching(self.segments, touched)

    # --- serialization ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "language": self.language,
            "duration": self.duration,
            "source": self.source,
            "model": self.model,
            "speakers": dict(self.speakers),
            "segments": [s.to_dict() for s in self.segments],
        }
        if self.turns:
            out["turns"] = [t.to_dict() for t in self.turns]
        if self.notes is not None:
            out["notes"] = self.notes
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Transcript:
        """Rebuild a transcript from :meth:`to_dict` output.

        Raises ``ValueError`` for anything that is not a DeskScribe transcript of a version this
        code understands, or that is missing required fields.
        """
        if not isinstance(data, dict):
            raise ValueError(
                f"not a DeskScribe transcript: expected an object, got {type(data).__name__}"
            )
        fmt = data.get("format")
        if fmt != FORMAT_NAME:
            raise ValueError(
                f"not a DeskScribe transcript: format is {fmt!r}, expected {FORMAT_NAME!r}"
            )
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ValueError(f"DeskScribe transcript has an invalid version: {version!r}")
        if version > FORMAT_VERSION:
            raise ValueError(
                f"DeskScribe transcript version {version} is newer than this app supports "
                f"(up to {FORMAT_VERSION}); update DeskScribe to open it"
            )
        try:
            duration = data.get("duration")
            speakers = data.get("speakers") or {}
            return cls(
                segments=[Segment.from_dict(s) for s in data["segments"]],
                language=_opt_str(data.get("language")),
                duration=None if duration is None else float(duration),
                source=_opt_str(data.get("source")),
                model=_opt_str(data.get("model")),
                speakers={str(k): str(v) for k, v in speakers.items()},
                turns=[SpeakerTurn.from_dict(t) for t in data.get("turns") or []],
                notes=_opt_dict(data.get("notes")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            detail = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            raise ValueError(f"malformed DeskScribe transcript: {detail}") from e

    def to_json(self, *, indent: int | None = 2) -> str:
        """JSON text (UTF-8 friendly: non-ASCII characters are kept, not escaped)."""
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=indent)

    @classmethod
    def from_json(cls, text: str | bytes) -> Transcript:
        """Parse :meth:`to_json` output; ``ValueError`` for invalid JSON or another format."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"not a DeskScribe transcript: invalid JSON ({e})") from e
        return cls.from_dict(data)


def _merged_turns(turns: list[SpeakerTurn], from_id: str, into_id: str) -> list[SpeakerTurn]:
    """``turns`` with ``from_id`` relabelled ``into_id``, touching turns of one speaker joined."""
    out: list[SpeakerTurn] = []
    for t in turns:
        who = into_id if t.speaker == from_id else t.speaker
        if out and out[-1].speaker == who and t.start - out[-1].end <= JOIN_GAP:
            out[-1] = SpeakerTurn(out[-1].start, max(out[-1].end, t.end), who)
        else:
            out.append(SpeakerTurn(t.start, t.end, who))
    return out


def _join_touching(segments: list[Segment], touched: set[int]) -> list[Segment]:
    """Join consecutive same-speaker segments whose times touch when one of them is in
    ``touched``; renumber ids."""
    out: list[Segment] = []
    out_touched: list[bool] = []
    for i, seg in enumerate(segments):
        prev = out[-1] if out else None
        if (
            prev is not None
            and seg.speaker is not None
            and seg.speaker == prev.speaker
            and (i in touched or out_touched[-1])
            and seg.start - prev.end <= JOIN_GAP
        ):
            out[-1] = _joined(prev, seg)
            out_touched[-1] = True
            continue
        out.append(seg)
        out_touched.append(i in touched)
    for k, seg in enumerate(out):
        seg.id = k
    return out


def _joined(a: Segment, b: Segment) -> Segment:
    na, nb = max(len(a.tokens), 1), max(len(b.tokens), 1)
    return Segment(
        start=a.start,
        end=max(a.end, b.end),
        text=a.text + b.text,
        words=a.words + b.words,
        speaker=a.speaker,
        id=a.id,
        avg_logprob=(a.avg_logprob * na + b.avg_logprob * nb) / (na + nb),
        no_speech_prob=max(a.no_speech_prob, b.no_speech_prob),
        compression_ratio=max(a.compression_ratio, b.compression_ratio),
        temperature=max(a.temperature, b.temperature),
        tokens=a.tokens + b.tokens,
    )


def _opt_dict(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"notes must be an object, not {type(value).__name__}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)
