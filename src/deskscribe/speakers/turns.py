"""From window labels to speaker turns: a label per VAD frame, changes snapped to pauses,
short pieces given to a neighbour, then turns (used by ``diarize.diarize``; numpy only).

Every step is linear in the frames (or in the runs of equal labels): nothing compares all
windows with all windows, so an hour of audio costs an hour's worth.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..audio.vad import FRAME, SAMPLE_RATE
from . import cluster


def frame_labels(
    regions, windows, labels, n_frames: int, *, out: np.ndarray | None = None, by_centre=False
) -> np.ndarray:
    """Label of every VAD frame of ``regions`` (-1 elsewhere, or what ``out`` held): the window
    whose centre is nearest among the region's windows: those inside it, or with
    ``by_centre`` those whose centre lies in it (a region without any keeps its frames)."""
    if out is None:
        out = np.full(n_frames, -1, dtype=np.int64)
    centres = np.array([(a + b) / 2 for a, b in windows])
    starts = np.array([a for a, _ in windows])
    ends = np.array([b for _, b in windows])
    for a, b in regions:
        if by_centre:
            inside = np.flatnonzero((centres >= a) & (centres <= b))
        else:
            inside = np.flatnonzero((starts >= a) & (ends <= b))
        if inside.size == 0:
            continue
        fa, fb = a // FRAME, min(n_frames, -(-b // FRAME))
        mids = (np.arange(fa, fb) + 0.5) * FRAME
        c = centres[inside]  # in time order: the nearest is one of the two around each frame
        right = np.clip(np.searchsorted(c, mids), 0, len(c) - 1)
        left = np.maximum(right - 1, 0)
        pick = np.where(np.abs(mids - c[left]) <= np.abs(c[right] - mids), left, right)
        out[fa:fb] = labels[inside[pick]]
    return out


def snap_changes(frame_labels: np.ndarray, probs: np.ndarray, reach: int) -> None:
    """Move each speaker change inside a speech region to the least speech-like frame within
    ``reach`` frames: people leave a short pause (or a breath) when they take over."""
    changes = np.flatnonzero(
        (frame_labels[1:] != frame_labels[:-1]) & (frame_labels[1:] >= 0) & (frame_labels[:-1] >= 0)
    )
    for c in changes + 1:
        left, right = int(frame_labels[c - 1]), int(frame_labels[c])
        lo, hi = max(0, c - reach), min(len(frame_labels), c + reach)
        # Stay within the two speakers' stretch around this change.
        while lo < c and frame_labels[lo] != left:
            lo += 1
        while hi > c and frame_labels[hi - 1] != right:
            hi -= 1
        if hi - lo < 2:
            continue
        cut = lo + 1 + int(np.argmin(probs[lo + 1 : hi]))
        frame_labels[lo:cut] = left
        frame_labels[cut:hi] = right


def _runs(frame_labels: np.ndarray) -> list[tuple[int, int, int]]:
    """(first frame, end frame, label) of each run of equal labels, speech only."""
    edges = np.flatnonzero(np.diff(frame_labels)) + 1
    bounds = [0, *edges.tolist(), len(frame_labels)]
    return [
        (a, b, int(frame_labels[a])) for a, b in itertools.pairwise(bounds) if frame_labels[a] >= 0
    ]


def absorb_short(frame_labels, emb, labels, min_frames: int) -> None:
    """Runs shorter than ``min_frames`` between two speech neighbours join the neighbour whose
    speaker is closer to the run's own windows (a speaker change needs time to show)."""
    if min_frames <= 1:
        return
    centroids = {
        int(lab): cluster.normalize(emb[labels == lab].mean(axis=0)) for lab in np.unique(labels)
    }
    for _ in range(3):
        changed = False
        for a, b, lab in sorted(_runs(frame_labels), key=lambda r: r[1] - r[0]):
            if b - a >= min_frames or frame_labels[a] != lab:
                continue
            nbrs = []
            if a > 0 and frame_labels[a - 1] >= 0:
                nbrs.append(int(frame_labels[a - 1]))
            if b < len(frame_labels) and frame_labels[b] >= 0:
                nbrs.append(int(frame_labels[b]))
            nbrs = [n for n in nbrs if n != lab]
            if not nbrs:
                continue  # a whole short utterance on its own: keep it
            own = centroids[lab]
            best = max(nbrs, key=lambda n: float(centroids[n] @ own))
            frame_labels[a:b] = best
            changed = True
        if not changed:
            break


def to_turns(frame_labels: np.ndarray, n_samples: int) -> list[tuple[float, float, int]]:
    return [
        (a * FRAME / SAMPLE_RATE, min(b * FRAME, n_samples) / SAMPLE_RATE, lab)
        for a, b, lab in _runs(frame_labels)
    ]
