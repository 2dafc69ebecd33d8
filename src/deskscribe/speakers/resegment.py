"""Passes over the window embeddings around clustering (numpy only, linear in the windows).

- :func:`center`: the recording's mean embedding taken out of every window (then unit length
  again). What all voices of one recording share (the room, the microphone, the line) is
  removed, so the voices stand further apart: far-field meeting audio packs every voice into
  a narrow cone that one threshold cannot cut.
- :func:`viterbi`: re-segmentation after clustering. An HMM whose states are the speakers,
  emissions the windows' cosine similarity to each speaker's centroid (a softmax at
  ``temperature``), and a ``switch`` penalty (log-probability) for changing speaker between
  neighbouring windows of one speech region. It replaces the window-by-window nearest
  centroid, which flips on single noisy windows, with the most likely speaker sequence;
  O(windows x speakers²).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .cluster import normalize


def center(emb: np.ndarray, min_windows: int = 8) -> np.ndarray:
    """``emb`` (unit rows) with their mean removed and renormalised; unchanged when there are
    fewer than ``min_windows`` rows (a mean of a few windows is mostly one voice)."""
    if emb.shape[0] < min_windows:
        return emb
    return normalize(emb - emb.mean(axis=0, keepdims=True))


def viterbi(
    emb: np.ndarray,
    labels: np.ndarray,
    windows: Sequence[tuple[int, int]],
    *,
    temperature: float = 0.05,
    switch: float = 3.0,
    gap: int = 0,
) -> np.ndarray:
    """Labels of all windows (time order) as the most likely speaker path: emissions from the
    similarity to the centroids of ``labels``, ``switch`` nats to change speaker between two
    windows less than ``gap`` samples apart (a new path starts after a longer gap)."""
    k = int(labels.max()) + 1 if labels.size else 0
    if k < 2:
        return labels.copy()
    centroids = normalize(np.array([emb[labels == j].mean(axis=0) for j in range(k)]))
    scores = emb @ centroids.T / temperature
    logp = scores - np.logaddexp.reduce(scores, axis=1, keepdims=True)
    out = np.empty_like(labels)
    n = len(windows)
    start = 0
    while start < n:
        end = start + 1
        while end < n and windows[end][0] - windows[end - 1][1] <= gap:
            end += 1
        out[start:end] = _path(logp[start:end], switch)
        start = end
    return out


def _path(logp: np.ndarray, switch: float) -> np.ndarray:
    n, k = logp.shape
    cost = logp[0].copy()
    back = np.zeros((n, k), dtype=np.int64)
    stay = np.eye(k, dtype=bool)
    for t in range(1, n):
        trans = cost[:, None] - np.where(stay, 0.0, switch)  # from row to column
        back[t] = np.argmax(trans, axis=0)
        cost = trans[back[t], np.arange(k)] + logp[t]
    path = np.empty(n, dtype=np.int64)
    path[-1] = int(np.argmax(cost))
    for t in range(n - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path
