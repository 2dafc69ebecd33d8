"""Word timestamps from the alignment heads' cross-attention (DTW), as openai/whisper does.

The decoder is run once over ``sot sequence + <|notimestamps|> + text tokens + <|endoftext|>``;
the alignment heads' attention over the window's audio frames is normalised, median-filtered
and averaged, and dynamic time warping finds the monotonic path from tokens to frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import AudioFeatures, WhisperModel

TOKENS_PER_SECOND = 50  # encoder frames per second
_PREPEND = "\"'“¿([{-"
_APPEND = "\"'.。,，!！?？:：”)]}、"


@dataclass
class WordTiming:
    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost monotonic path through ``cost [N, M]``; returns (row indices, col indices)."""
    n, m = cost.shape
    # Anti-diagonal d holds the cells (i, d - i): each is one vectorised step, reading its
    # three predecessors as slices of the two diagonals before it (indexed by i), and its
    # costs as a diagonal view of the column-flipped matrix (no copies, no fancy indexing).
    prev2 = np.full(n + 1, np.inf)
    prev1 = np.full(n + 1, np.inf)
    prev2[0] = 0.0  # diagonal 0: the cell (0, 0)
    trace = np.zeros((n + m + 1, n + 1), dtype=np.int8)  # trace[i + j, i]
    flipped = cost[:, ::-1]
    for d in range(2, n + m + 1):
        lo, hi = max(1, d - m), min(n, d - 1)
        cur = np.full(n + 1, np.inf)
        diag, up, left = prev2[lo - 1 : hi], prev1[lo - 1 : hi], prev1[lo : hi + 1]
        offset = m - d + 1
        first = max(0, -offset)
        step_cost = np.diagonal(flipped, offset=offset)[lo - 1 - first : hi - first]
        cur[lo : hi + 1] = step_cost + np.minimum(np.minimum(diag, up), left)
        # The first of (diagonal, up, left) that is smallest, as argmin would pick it.
        trace[d, lo : hi + 1] = np.where(
            (diag <= up) & (diag <= left), 0, np.where(up <= left, 1, 2)
        )
        prev2, prev1 = prev1, cur
    i, j = n, m
    rows, cols = [], []
    while i > 0 or j > 0:
        rows.append(i - 1)
        cols.append(j - 1)
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        else:
            step = trace[i + j, i]
            if step == 0:
                i, j = i - 1, j - 1
            elif step == 1:
                i -= 1
            else:
                j -= 1
    return np.array(rows[::-1]), np.array(cols[::-1])


# A sorting network for 7 values (16 compare-exchanges, the fewest possible): applied to the
# 7 shifted copies of an array, its middle output is the median of every window of 7.
_SORT7 = (
    (0, 6), (2, 3), (4, 5), (0, 2), (1, 4), (3, 6), (0, 1), (2, 5),
    (3, 4), (1, 2), (4, 6), (2, 3), (4, 5), (1, 2), (3, 4), (5, 6),
)  # fmt: skip


def _median_filter(x: np.ndarray, width: int) -> np.ndarray:
    """Median over the last axis with reflect padding (width odd), as np.median of each
    window. Width 7 (what alignment uses) goes through a sorting network on whole arrays,
    4x faster than sorting the windows; other widths sort them."""
    if x.shape[-1] <= width // 2:
        return x
    pad = width // 2
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(pad, pad)], mode="reflect")
    if width == 7:
        n = x.shape[-1]
        v = [padded[..., i : i + n] for i in range(width)]
        for i, j in _SORT7:
            v[i], v[j] = np.minimum(v[i], v[j]), np.maximum(v[i], v[j])
        return v[pad]
    windows = np.lib.stride_tricks.sliding_window_view(padded, width, axis=-1)
    return np.sort(windows, axis=-1)[..., pad]


def find_alignment(
    model: WhisperModel,
    audio: AudioFeatures,
    sot_sequence: list[int],
    text_tokens: list[int],
    num_frames: int,
    token_logprobs: list[float] | None = None,
    medfilt_width: int = 7,
) -> list[WordTiming]:
    """Word timings (seconds from the window start) for ``text_tokens`` of one window."""
    tk = model.tokenizer
    if not text_tokens:
        return []
    tokens = [*sot_sequence, tk.no_timestamps, *text_tokens, tk.eot]
    state = model.start(audio, 1)
    _, weights = state.step(np.array([tokens]))
    weights = weights[0][:, :, : max(1, num_frames // 2)].astype(np.float32)  # [A, T, frames]
    weights = weights / np.maximum(weights.sum(axis=-1, keepdims=True), 1e-12)
    mean = weights.mean(axis=-2, keepdims=True)
    std = weights.std(axis=-2, keepdims=True)
    weights = (weights - mean) / np.maximum(std, 1e-12)
    weights = _median_filter(weights, medfilt_width)
    # Row i is the position that predicts text token i (the first is <|notimestamps|>).
    matrix = weights.mean(axis=0, dtype=np.float64)[len(sot_sequence) : -1]
    text_idx, time_idx = dtw(-matrix)

    words, word_tokens = tk.split_to_word_tokens([*text_tokens, tk.eot])
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(t) for t in word_tokens[:-1]]), (1, 0))
    jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
    jump_times = time_idx[jumps] / TOKENS_PER_SECOND
    starts = jump_times[boundaries[:-1]]
    ends = jump_times[boundaries[1:]]
    probs = np.exp(np.asarray(token_logprobs, dtype=np.float64)) if token_logprobs else None
    timings = []
    for k, (word, toks, start, end) in enumerate(
        zip(words[:-1], word_tokens[:-1], starts, ends, strict=True)
    ):
        if probs is not None and boundaries[k + 1] <= len(probs):
            p = float(np.mean(probs[boundaries[k] : boundaries[k + 1]]))
        else:
            p = 1.0
        timings.append(WordTiming(word, toks, float(start), float(end), p))
    _clamp_long_words(timings)
    _merge_punctuation(timings)
    return [w for w in timings if w.word]


def _clamp_long_words(words: list[WordTiming]) -> None:
    """DTW stretches the first word of a window, and words after a pause, over the silence
    before them; cap those at twice the median word duration (openai/whisper does the same)."""
    durations = np.array([w.end - w.start for w in words if w.end > w.start])
    if len(durations) == 0:
        return
    max_duration = 2 * min(0.7, float(np.median(durations)))
    for i, w in enumerate(words):
        after_pause = i == 0 or words[i - 1].word.rstrip().endswith(
            (".", "?", "!", "。", "？", "！")
        )
        if after_pause and w.end - w.start > max_duration:
            w.start = w.end - max_duration


def _merge_punctuation(words: list[WordTiming]) -> None:
    """Attach opening punctuation to the next word and closing punctuation to the previous
    (``j``/``i`` track the word that absorbs, so runs of marks merge into one word)."""
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        prev, following = words[i], words[j]
        if prev.word.startswith(" ") and prev.word.strip() and prev.word.strip() in _PREPEND:
            following.word = prev.word + following.word
            following.tokens = prev.tokens + following.tokens
            prev.word, prev.tokens = "", []
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        prev, following = words[i], words[j]
        if prev.word and not prev.word.endswith(" ") and following.word in _APPEND:
            prev.word += following.word
            prev.tokens += following.tokens
            following.word, following.tokens = "", []
        else:
            i = j
        j += 1
