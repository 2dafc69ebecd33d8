"""Words to speakers: every word gets the speaker whose turn overlaps it most.

``assign_speakers(transcript, turns)`` takes a ``Diarization`` (or any sequence of turns with
``start``, ``end`` and ``speaker``) and returns a copy of the transcript in which every word
and segment carries a speaker id, with segments cut where the speaker changes, and the turns
themselves are kept as ``Transcript.turns`` (who spoke when, pauses and unrecognised speech
included: what the RTTM export and the JSON ``turns`` write). Speakers
``S1``, ``S2``, … without a name get "Speaker 1", "Speaker 2", … as display names. Given a
``Diarization`` (files, the pass at Stop of a live session, the live revisions: every caller
passes one), a change the diarization placed inside a sentence is moved to the sentence's end
or a pause unless its evidence holds (``sentence_turns.respect_sentences``; ``sentences=False``
keeps the changes where the turns put them).

``mark_overlaps(segments)``: words said while a word of another speaker was being said get
``overlap = True`` (JSON ``"overlap": true``). Only transcripts whose speakers were heard
apart can have such words: channels as speakers (``channels.py``), where double talk keeps
both parties' words; one diarized track gives each instant to one speaker.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Sequence
from typing import Protocol

from ..transcript import Segment, SpeakerTurn, Transcript, Word
from .sentence_turns import respect_sentences


class TurnLike(Protocol):
    start: float
    end: float
    speaker: str


def _speaker_for(start: float, end: float, turns: Sequence[TurnLike]) -> str | None:
    """The turn overlapping [start, end] most; the nearest turn when none overlaps."""
    if not turns:
        return None
    best, who = 0.0, None
    for t in turns:
        ov = min(t.end, end) - max(t.start, start)
        if ov > best:
            best, who = ov, t.speaker
    if who is not None:
        return who
    mid = (start + end) / 2
    return min(turns, key=lambda t: max(t.start - mid, mid - t.end, 0.0)).speaker


def assign_speakers(transcript: Transcript, turns, *, sentences: bool = True) -> Transcript:
    """A copy of ``transcript`` with a speaker on every word and segment, segments cut where
    the speaker changes (ids renumbered). A segment without words gets the speaker of its
    time span. The tokens of a cut segment stay with its first piece.

    With ``sentences`` (the default) and turns that carry the diarization's evidence
    (``Diarization.scores``), a change inside a sentence that the evidence does not hold up
    is moved to the sentence's end or a pause (``sentence_turns.respect_sentences``)."""
    turn_list = list(getattr(turns, "turns", turns))
    labelled = [
        [dataclasses.replace(w, speaker=_speaker_for(w.start, w.end, turn_list)) for w in seg.words]
        for seg in transcript.segments
    ]
    if sentences:
        labelled = _respecting_sentences(labelled, getattr(turns, "scores", None))
    out: list[Segment] = []
    for seg, words in zip(transcript.segments, labelled, strict=True):
        if not words:
            piece = _copy_segment(seg, words, seg.tokens)
            piece.speaker = _speaker_for(seg.start, seg.end, turn_list)
            out.append(piece)
            continue
        groups: list[list[Word]] = [[words[0]]]
        for w in words[1:]:
            if w.speaker != groups[-1][-1].speaker and w.text.strip():
                groups.append([w])
            else:
                groups[-1].append(w)
        pieces = [
            _copy_segment(seg, g, seg.tokens if i == 0 else [], "".join(w.text for w in g))
            for i, g in enumerate(groups)
        ]
        if len(pieces) > 1:
            pieces[0].start = seg.start
            pieces[-1].end = max(seg.end, pieces[-1].end)
            for left, right in itertools.pairwise(pieces):
                cut = (left.words[-1].end + right.words[0].start) / 2
                left.end = right.start = round(cut, 3)
        else:
            pieces[0].text = seg.text
        for p in pieces:
            p.speaker = p.words[0].speaker
        out += pieces
    for i, seg in enumerate(out):
        seg.id = i
    result = Transcript(
        segments=out,
        language=transcript.language,
        duration=transcript.duration,
        source=transcript.source,
        model=transcript.model,
        speakers=dict(transcript.speakers),
        turns=[SpeakerTurn(float(t.start), float(t.end), str(t.speaker)) for t in turn_list],
    )
    result.name_voices()
    return result


def _respecting_sentences(labelled: list[list[Word]], scores) -> list[list[Word]]:
    """``labelled`` (each segment's words with their speakers) after
    ``respect_sentences`` over all the words at once (a sentence may span segments)."""
    flat = [w for words in labelled for w in words]
    moved = respect_sentences(flat, scores)
    if all(a is b for a, b in zip(flat, moved, strict=True)):
        return labelled
    out, i = [], 0
    for words in labelled:
        out.append(moved[i : i + len(words)])
        i += len(words)
    return out


def _copy_segment(seg: Segment, words, tokens, text: str | None = None) -> Segment:
    return Segment(
        start=words[0].start if words else seg.start,
        end=max(words[-1].end, words[0].start) if words else seg.end,
        text=seg.text if text is None else text,
        words=list(words),
        speaker=seg.speaker,
        id=seg.id,
        avg_logprob=seg.avg_logprob,
        no_speech_prob=seg.no_speech_prob,
        compression_ratio=seg.compression_ratio,
        temperature=seg.temperature,
        tokens=list(tokens),
    )


MIN_OVERLAP_S = 0.1  # less is two words touching at a turn change, not two people at once


def mark_overlaps(segments: Sequence[Segment], min_seconds: float = MIN_OVERLAP_S) -> int:
    """Set ``overlap`` on every word that shares at least ``min_seconds`` with a word of
    another speaker; returns how many words were marked. One pass in time order, keeping
    the words still being said (a few at any instant): linear in the words."""
    words = sorted(
        (w for seg in segments for w in seg.words if w.speaker is not None),
        key=lambda w: w.start,
    )
    open_words: list[Word] = []
    for word in words:
        open_words = [w for w in open_words if w.end - word.start >= min_seconds]
        for other in open_words:
            if (
                other.speaker != word.speaker
                and min(other.end, word.end) - word.start >= min_seconds
            ):
                other.overlap = word.overlap = True
        open_words.append(word)
    return sum(w.overlap for w in words)


def overlap_regions(turns: Sequence[TurnLike]) -> list[tuple[float, float]]:
    """The stretches during which turns of two or more different speakers are on (turns
    with overlap, as the segmentation pipeline gives them), in time order."""
    events = sorted(
        [(t.start, 1, t.speaker) for t in turns if t.end > t.start]
        + [(t.end, -1, t.speaker) for t in turns if t.end > t.start],
        key=lambda e: (e[0], e[1]),  # ends before starts at the same instant
    )
    on: dict[str, int] = {}
    regions: list[tuple[float, float]] = []
    since: float | None = None
    for at, step, who in events:
        on[who] = on.get(who, 0) + step
        several = sum(1 for n in on.values() if n > 0) >= 2
        if several and since is None:
            since = at
        elif not several and since is not None:
            if at > since:
                regions.append((since, at))
            since = None
    return regions


def mark_overlapped_speech(
    segments: Sequence[Segment], turns: Sequence[TurnLike], min_seconds: float = MIN_OVERLAP_S
) -> int:
    """Set ``overlap`` on every word said while two or more speakers were on (``turns`` with
    overlap): at least ``min_seconds`` of it, or half of a shorter word. Returns how many
    words were marked. For one diarized track, where each word has one speaker but the
    segmentation model heard a second voice under it."""
    regions = overlap_regions(turns)
    starts = [a for a, _ in regions]
    marked = 0
    for word in (w for seg in segments for w in seg.words):
        i = max(0, bisect.bisect_right(starts, word.start) - 1)
        shared = 0.0
        while i < len(regions) and regions[i][0] < word.end:
            shared += max(0.0, min(regions[i][1], word.end) - max(regions[i][0], word.start))
            i += 1
        if shared > 0 and shared >= min(min_seconds, (word.end - word.start) / 2):
            word.overlap = True
            marked += 1
    return marked
