"""The transcript of a live session as it grows: committed segments, the tentative tail, edits.

Written by the transcriber thread (``publish``), the window (``edit``) and the refinement at
Stop (``replace``); read as a copy (``snapshot``) from any thread.
"""

from __future__ import annotations

import threading

from ...transcript import Segment, SpeakerTurn, Transcript, Word
from ...whisper.languages import main_language
from ...whisper.streaming import StreamUpdate


class TranscriptStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._segments: dict[int, Segment] = {}
        self._edited: set[int] = set()
        self._speaker_names: dict[str, str] = {}
        self._turns: list[SpeakerTurn] = []  # who spoke when, from the speaker pass at Stop
        self._open_id: int | None = None
        self._tentative: list[Word] = []

    def publish(self, update: StreamUpdate) -> bool:
        """Take the transcriber's update (segments the user corrected keep the correction);
        whether anything changed that the caller should hear about."""
        with self._lock:
            for seg in update.segments:
                if seg.id not in self._edited:
                    self._segments[seg.id] = seg
            changed = update.tentative != self._tentative or update.open_id != self._open_id
            self._open_id = update.open_id
            self._tentative = update.tentative
        return bool(update.segments) or changed

    def edit(self, segment_id: int, text: str) -> None:
        """The user corrected a committed segment."""
        with self._lock:
            seg = self._segments.get(segment_id)
            if seg is None or segment_id == self._open_id:
                raise ValueError("only finished segments can be edited while recording")
            seg.text = text
            self._edited.add(segment_id)

    @property
    def edited(self) -> bool:
        return bool(self._edited)

    def __len__(self) -> int:
        return len(self._segments)

    def tentative_text(self) -> str:
        with self._lock:
            return "".join(w.text for w in self._tentative).strip()

    def snapshot(
        self,
        *,
        language: str | None,
        duration: float,
        source: str | None,
        model: str,
    ) -> Transcript:
        """The committed transcript so far (a copy; safe from any thread). ``language``: the
        session's, when the transcriber knows it; else the main language of the segments."""
        with self._lock:
            segments = [
                Segment(**{**s.__dict__, "words": list(s.words)})
                for _, s in sorted(self._segments.items())
            ]
            speakers = dict(self._speaker_names)
            turns = list(self._turns)
        transcript = Transcript(
            segments=segments,
            speakers=speakers,
            turns=turns,
            language=language or main_language((s.language, s.end - s.start) for s in segments),
            duration=duration,
            source=source,
            model=model,
        )
        transcript.name_voices()  # "S1" is "Speaker 1" in the library and the exports
        return transcript

    def replace(self, transcript: Transcript) -> None:
        """Take a relabelled transcript (the speaker pass at Stop) as the whole text."""
        with self._lock:
            self._segments = {seg.id: seg for seg in transcript.segments}
            self._speaker_names = dict(transcript.speakers)
            self._turns = list(transcript.turns)
