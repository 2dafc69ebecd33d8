"""How good speaker labels are: DER, word-level speaker accuracy, cpWER (numpy only).

Used by the tests and by ``bench/speakers.py``. Turns are ``(start s, end s, speaker)``.

- **DER** (diarization error rate), NIST style, on a 10 ms grid: missed speech, false alarm
  and speaker confusion over the reference speech time, with frames within ``collar`` seconds
  of a reference turn boundary left out, and the one-to-one speaker mapping that maximises the
  overlap (brute force over permutations: exact, fine for the few speakers of a conversation).
- **Word accuracy**: the share of hypothesis words whose (mapped) speaker is the reference
  speaker at that time.
- **cpWER** (concatenated minimum-permutation WER, CHiME-6): each speaker's words concatenated,
  speakers paired to minimise the total word errors, errors over reference words.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

STEP = 0.01  # seconds per frame of the scoring grid
TurnLike = tuple[float, float, str]


@dataclass
class DER:
    total: float  # scored reference speech, seconds
    missed: float
    false_alarm: float
    confusion: float
    mapping: dict[str, str]  # hypothesis speaker -> reference speaker

    @property
    def error(self) -> float:
        return (self.missed + self.false_alarm + self.confusion) / max(self.total, 1e-9)

    def rate(self, part: str) -> float:
        return getattr(self, part) / max(self.total, 1e-9)


def _activity(turns: Sequence[TurnLike], n: int) -> tuple[np.ndarray, list[str]]:
    names = list(dict.fromkeys(t[2] for t in turns))
    act = np.zeros((len(names), n), dtype=bool)
    for start, end, who in turns:
        a, b = round(start / STEP), round(end / STEP)
        act[names.index(who), max(a, 0) : max(b, 0)] = True
    return act, names


def best_mapping(overlap: np.ndarray) -> list[tuple[int, int]]:
    """(row, column) pairs, one-to-one, maximising the summed ``overlap`` (exact search)."""
    rows, cols = overlap.shape
    if rows == 0 or cols == 0:
        return []
    if rows <= cols:
        best = max(
            itertools.permutations(range(cols), rows),
            key=lambda p: sum(overlap[r, p[r]] for r in range(rows)),
        )
        return [(r, best[r]) for r in range(rows)]
    return [(r, c) for c, r in best_mapping(overlap.T)]


def der(reference: Sequence[TurnLike], hypothesis: Sequence[TurnLike], collar: float = 0.25) -> DER:
    """Diarization error of ``hypothesis`` against ``reference`` (see the module docstring)."""
    end = max([t[1] for t in (*reference, *hypothesis)] or [0.0])
    n = int(np.ceil(end / STEP)) + 1
    ref, ref_names = _activity(reference, n)
    hyp, hyp_names = _activity(hypothesis, n)
    scored = np.ones(n, dtype=bool)
    c = round(collar / STEP)
    if c > 0:
        for start, stop, _ in reference:
            for edge in (round(start / STEP), round(stop / STEP)):
                scored[max(0, edge - c) : edge + c] = False
    ref, hyp = ref[:, scored], hyp[:, scored]
    overlap = ref.astype(np.int64) @ hyp.T.astype(np.int64)  # [ref, hyp] frames
    pairs = best_mapping(overlap.astype(float))
    n_ref, n_hyp = ref.sum(axis=0), hyp.sum(axis=0)
    correct = np.zeros(ref.shape[1], dtype=np.int64)
    for r, h in pairs:
        correct += ref[r] & hyp[h]
    return DER(
        total=float(n_ref.sum()) * STEP,
        missed=float(np.maximum(n_ref - n_hyp, 0).sum()) * STEP,
        false_alarm=float(np.maximum(n_hyp - n_ref, 0).sum()) * STEP,
        confusion=float((np.minimum(n_ref, n_hyp) - correct).sum()) * STEP,
        mapping={hyp_names[h]: ref_names[r] for r, h in pairs},
    )


def speaker_at(turns: Sequence[TurnLike], start: float, end: float) -> str | None:
    """The speaker whose turns overlap ``[start, end]`` most (None when none does)."""
    best, who = 0.0, None
    for a, b, name in turns:
        ov = min(b, end) - max(a, start)
        if ov > best:
            best, who = ov, name
    return who


def word_accuracy(
    reference: Sequence[TurnLike], words: Iterable[tuple[float, float, str | None]]
) -> float:
    """Share of hypothesis words ``(start, end, speaker)`` given the right speaker.

    Hypothesis speakers are mapped to reference speakers by the overlap of their words' times
    with the reference turns (one-to-one, best total); words outside every reference turn are
    not counted.
    """
    pairs = [(speaker_at(reference, s, e), h) for s, e, h in words]
    pairs = [(r, h) for r, h in pairs if r is not None]
    if not pairs:
        return 0.0
    refs = list(dict.fromkeys(r for r, _ in pairs))
    hyps = list(dict.fromkeys(h for _, h in pairs))
    counts = np.zeros((len(refs), len(hyps)))
    for r, h in pairs:
        counts[refs.index(r), hyps.index(h)] += 1
    mapped = best_mapping(counts)
    return float(sum(counts[r, h] for r, h in mapped)) / len(pairs)


def normalize_words(text: str) -> list[str]:
    """Lower case, punctuation (hyphens too) to spaces, split into words."""
    return re.sub(r"[^\w' ]+", " ", text.lower().replace("’", "'")).split()


def edit_distance(ref: Sequence[str], hyp: Sequence[str]) -> int:
    """Word-level Levenshtein distance (substitutions, deletions, insertions)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def cpwer(reference: dict[str, str], hypothesis: dict[str, str]) -> float:
    """Concatenated minimum-permutation WER: ``{speaker: all their text}`` on both sides."""
    ref = {k: normalize_words(v) for k, v in reference.items()}
    hyp = {k: normalize_words(v) for k, v in hypothesis.items()}
    rk, hk = list(ref), list(hyp)
    size = max(len(rk), len(hk))
    rk += [None] * (size - len(rk))
    hk += [None] * (size - len(hk))
    cost = np.array(
        [[edit_distance(ref.get(r, []), hyp.get(h, [])) for h in hk] for r in rk], dtype=float
    )
    pairs = best_mapping(-cost)
    total = sum(len(v) for v in ref.values())
    return float(sum(cost[r, h] for r, h in pairs)) / max(total, 1)
