"""Speaker changes that respect sentences.

Diarization places a speaker change from window embeddings (1.6 s windows every 0.8 s for
Resemblyzer) and knows nothing of words, so a change can fall inside a sentence: "Speaker 1:
Okay, I" / "Speaker 2: thought, you know, I heard a beep." People rarely hand the turn over
in the middle of a sentence; when they do (an interruption), the new voice goes on long
enough, and clearly enough, for the windows to show it.

``respect_sentences(words, scores)`` takes the words in time order with the speakers the
turns gave them and returns them with every *weak* change inside a sentence moved to the
sentence's edge.

- **Units.** A sentence is the words from the start (or a word closing a sentence: ``.``
  ``?`` ``!`` ``…``, quotes and brackets after the mark allowed) to the next word closing
  one; a pause of at least ``PAUSE_SECONDS`` between two words cuts it into units, since a
  turn may change at a pause. Words after the last sentence end form no unit: an
  unfinished sentence (a live session's newest words), or text the recogniser did not
  punctuate (tiny.en often writes a whole phone call without a mark, and Whisper's word
  times rarely show a pause: the silence goes into the word before). There a "unit" could
  hold many sentences and several real turns, so the rule stays out.
- **Pieces.** Inside a unit the words fall into pieces of one speaker. A piece is *strong*
  when both
  - it lasts at least one window hop (``WindowScores.hop``, 0.8 s for Resemblyzer): frames
    take their speaker from the nearest window centre and window centres are a hop apart,
    so a change point is known only to within a hop; a shorter piece lies inside the
    uncertainty of the change that made it, and no window is mostly its own; and
  - its windows lie nearer its own voice than the neighbouring piece's by at least
    ``MIN_MARGIN`` of the distance between the two voices (``WindowScores.margin``: 0 half
    way between the two centroids, 1 at the piece's own, windows weighted by their overlap
    with the piece). A share of the distance, not a cosine, because how far apart voices
    lie depends on the recording and the encoder (Resemblyzer: the real call's two voices
    0.12 apart, 1 - cosine of the centroids; AMI's 0.13-0.35; the synthetic voices
    0.33-0.45): a fixed cosine would be no test on one and an impossible one on another.
    0.25, a quarter of the way, comes from the synthetic espeak-ng conversations (not the
    real dev recordings), where every change is real: a voice's windows sit at 0.91 on
    average there (their mean similarity to their centroid; 0.88 on the real ones), but
    the correctly labelled pieces of one to two hops only at 0.44-0.59 (five pieces), as
    their edge windows straddle the change. A threshold near a voice's average would move
    real short interruptions; about half the lowest of those pieces, rounded to a quarter,
    keeps them with room for noisier real recordings, and what lies below it is windows
    hardly nearer one voice than the other.
- **Moves.** Weak pieces join a neighbouring piece of the same unit, the weakest first
  (least margin, taken as 0 when negative, x seconds), each the neighbour whose voice it is
  nearer to, until every piece left is strong or the unit has one speaker. A piece at a
  unit's edge that joins its neighbour moves the change to the sentence end or pause; a
  weak piece between two pieces of one speaker takes both changes away. A change at a
  unit's edge is never touched, and a unit whose pieces are all strong keeps its changes (a
  real interruption).

No word is added, dropped or moved and no time changes: only speakers, and only of words
that had one. Without ``scores`` (turns given by hand, a reference) nothing changes: the rule
weighs the diarization's own evidence and has none then.

``mid_sentence_changes(words)``: the speaker changes not at a sentence end or a pause (the
bench's "mid-sentence cuts"; it counts changes in unpunctuated text too).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..transcript import Word

# Pauses of this length end a unit. The diarization's VAD splits speech regions at pauses of
# 0.3 s (``DiarizeOptions.vad.min_silence_ms``): where it would itself see two stretches of
# speech, a change of speaker is as plausible as anywhere, so a change there is left alone.
PAUSE_SECONDS = 0.3
MIN_MARGIN = 0.25  # share of the distance between the two voices (see the module docstring)
_CLOSERS = "\"'»”’)]}"
_ENDS = (".", "?", "!", "…", "。", "？", "！")


@dataclass
class WindowScores:
    """What diarization saw, kept for the word assignment: each speaker-model window's span
    (seconds), its cosine similarity to every speaker's centroid (columns in the order of
    ``speakers``), the similarity of the centroids to each other and the window hop (s)."""

    starts: np.ndarray  # [n] seconds
    ends: np.ndarray  # [n] seconds
    speakers: list[str]
    similarity: np.ndarray  # [n, len(speakers)]
    centroid_similarity: np.ndarray  # [len(speakers), len(speakers)]
    hop: float

    def margin(self, start: float, end: float, own: str, other: str) -> float:
        """Where the windows over ``[start, end]`` sit between the voices ``own`` and
        ``other``: their similarity to ``own`` less that to ``other`` (weighted by their
        overlap with the span), as a share of the distance between the two centroids (1: at
        ``own``'s centroid, 0: half way, negative: nearer ``other``). 0 without evidence (no
        window overlaps the span, or a voice without a column)."""
        if own not in self.speakers or other not in self.speakers or own == other:
            return 0.0
        a, b = self.speakers.index(own), self.speakers.index(other)
        overlap = np.minimum(self.ends, end) - np.maximum(self.starts, start)
        if end <= start:  # a word without duration: the windows holding that instant
            overlap = np.where((self.starts <= start) & (self.ends >= end), 1.0, 0.0)
        weight = np.clip(overlap, 0.0, None)
        if weight.sum() <= 0:
            return 0.0
        diff = float(weight @ (self.similarity[:, a] - self.similarity[:, b]) / weight.sum())
        distance = 1.0 - float(self.centroid_similarity[a, b])
        return diff / max(distance, 1e-6)


def ends_sentence(word: Word) -> bool:
    """Whether ``word`` closes a sentence (quotes and brackets after the mark allowed)."""
    return word.text.rstrip().rstrip(_CLOSERS).endswith(_ENDS)


def is_boundary(before: Word, after: Word, pause: float = PAUSE_SECONDS) -> bool:
    """Whether a speaker change between ``before`` and ``after`` (neighbours in time) falls
    where turns change: after a sentence end, or at a pause of ``pause`` seconds or more."""
    return ends_sentence(before) or after.start - before.end >= pause


def mid_sentence_changes(words: Sequence[Word], pause: float = PAUSE_SECONDS) -> int:
    """Speaker changes between neighbouring words (time order) that are not at a boundary
    (``is_boundary``); words without a speaker are skipped."""
    said = [w for w in words if w.speaker is not None]
    return sum(
        a.speaker != b.speaker and not is_boundary(a, b, pause) for a, b in itertools.pairwise(said)
    )


def units(words: Sequence[Word], pause: float = PAUSE_SECONDS) -> list[tuple[int, int]]:
    """(first, end) indices of the units of ``words``: the closed sentences (from the start
    or a sentence end to the next sentence end; words after the last one are an unfinished
    sentence, or text the recogniser did not punctuate, and form no unit) cut at pauses."""
    out: list[tuple[int, int]] = []
    first = 0
    for i, word in enumerate(words):
        if not ends_sentence(word):
            continue
        cuts = [j for j in range(first + 1, i + 1) if words[j].start - words[j - 1].end >= pause]
        out += [(a, b) for a, b in itertools.pairwise([first, *cuts, i + 1]) if b > a]
        first = i + 1
    return out


def respect_sentences(
    words: Sequence[Word],
    scores: WindowScores | None,
    *,
    pause: float = PAUSE_SECONDS,
    min_margin: float = MIN_MARGIN,
) -> list[Word]:
    """``words`` (time order, speakers from the turns) with weak changes inside a unit moved
    to its edge (see the module docstring). New ``Word`` objects where a speaker changed; the
    same words, order and times otherwise."""
    out = list(words)
    if scores is None or len(out) < 2:
        return out
    for a, b in units(out, pause):
        labels = [w.speaker for w in out[a:b]]
        if None in labels or len(set(labels)) < 2:
            continue
        fixed = _settle(out[a:b], labels, scores, min_margin)
        for i, who in enumerate(fixed):
            if who != out[a + i].speaker:
                out[a + i] = dataclasses.replace(out[a + i], speaker=who)
    return out


def _pieces(labels: list[str]) -> list[tuple[int, int, str]]:
    bounds = [0, *(i for i in range(1, len(labels)) if labels[i] != labels[i - 1]), len(labels)]
    return [(p, q, labels[p]) for p, q in itertools.pairwise(bounds)]


def _settle(
    words: Sequence[Word], labels: list[str], scores: WindowScores, min_margin: float
) -> list[str]:
    """The labels of one unit once its weak pieces have joined a neighbour."""
    labels = list(labels)
    while True:
        pieces = _pieces(labels)
        if len(pieces) < 2:
            return labels
        weak = []
        for k, (p, q, who) in enumerate(pieces):
            start, end = words[p].start, words[q - 1].end
            seconds = end - start
            nbrs = {pieces[j][2] for j in (k - 1, k + 1) if 0 <= j < len(pieces)}
            # The neighbour whose voice the piece is nearest to (smallest margin against it).
            margin, nbr = min((scores.margin(start, end, who, n), n) for n in nbrs)
            if seconds < scores.hop or margin < min_margin:
                weak.append((max(margin, 0.0) * seconds, seconds, k, nbr))
        if not weak:
            return labels
        _, _, k, nbr = min(weak)
        p, q, _ = pieces[k]
        labels[p:q] = [nbr] * (q - p)
