"""The transcript of a live session as it grows: committed segments, the tentative tail, edits.

Written by the transcriber thread (``publish``), the window (``edit``), the label revisions
while recording (``relabel``) and the refinement at Stop (``replace``); read as a copy
(``snapshot``) from any thread.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter

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
        # The segment still growing when labels were revised: its revised labels, by word,
        # applied again to the transcriber's next copy of it.
        self._revised_open: tuple[int, dict[tuple, str]] | None = None

    def publish(self, update: StreamUpdate) -> bool:
        """Take the transcriber's update (segments the user corrected keep the correction; a
        growing segment whose labels were revised keeps the revision, in ``update`` too);
        whether anything changed that the caller should hear about."""
        with self._lock:
            for i, seg in enumerate(update.segments):
                if seg.id not in self._edited:
                    if self._revised_open and self._revised_open[0] == seg.id:
                        seg = update.segments[i] = _relabelled(seg, self._revised_open[1]) or seg
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

    def relabel(self, speakers: dict[tuple, str]) -> list[Segment]:
        """Give words new speakers (``speakers``: by ``word_key``; words not in it keep
        theirs); the segments that changed, as copies. Segments the user corrected are left
        alone. A segment's speaker is its words' most common one."""
        changed = []
        with self._lock:
            for sid, seg in self._segments.items():
                if sid in self._edited:
                    continue
                new = _relabelled(seg, speakers)
                if new is not None:
                    self._segments[sid] = new
                    changed.append(dataclasses.replace(new, words=list(new.words)))
            if self._open_id is not None:
                self._revised_open = (self._open_id, speakers)
        return changed

    def replace(self, transcript: Transcript) -> None:
        """Take a relabelled transcript (the speaker pass at Stop) as the whole text."""
        with self._lock:
            self._segments = {seg.id: seg for seg in transcript.segments}
            self._speaker_names = dict(transcript.speakers)
            self._turns = list(transcript.turns)


def word_key(w: Word) -> tuple:
    return (round(w.start, 3), round(w.end, 3), w.text)


def _relabelled(seg: Segment, speakers: dict[tuple, str]) -> Segment | None:
    """A copy of ``seg`` with its words' speakers from ``speakers``; None if none changed."""
    words = [
        dataclasses.replace(w, speaker=speakers.get(word_key(w), w.speaker)) for w in seg.words
    ]
    if all(a.speaker == b.speaker for a, b in zip(words, seg.words, strict=True)):
        return None
    by_time = Counter()
    for w in words:
        by_time[w.speaker] += w.end - w.start + 0.01
    return dataclasses.replace(seg, words=words, speaker=by_time.most_common(1)[0][0])
