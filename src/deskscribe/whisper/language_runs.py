"""Where a recording changes language: detection on spans of a window.

Whisper detects one language per 30 s window. A window that holds the end of an English
part and the start of a German one would be decoded in one of them, and the other part
written as a translation nobody asked for. Where a window may hold such a change (its
detection is unsure, or differs from its neighbour's), it is cut at pauses into spans of
about ``SPAN_SECONDS``, each span's language detected (one batch through the encoder), and
the window split into runs of one language. Only such windows pay for the extra encoding.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from .chunking import quiet_points
from .decoding import DecodingOptions, WindowDecoder
from .features import log_mel
from .languages import choose, settle
from .model import AudioFeatures, WhisperModel

SURE = 0.9  # a window detected less surely than this may hold a change of language
SPAN_SECONDS = 6.0


def encode_windows(model: WhisperModel, audios: Sequence[np.ndarray]) -> AudioFeatures:
    """Encoder output for a batch of windows of up to 30 s. On the CPU the windows are
    encoded one at a time: a batch costs the same CPU time per window there, and a window's
    attention matrices (n_head x 1500 x 1500) would otherwise be held for all at once."""
    mels = [log_mel(a, model.n_mels) for a in audios]
    if model.sessions.on_gpu:
        return model.encode(np.stack(mels))
    parts = [model.encode(m[None]).to_host() for m in mels]
    if len(parts) == 1:
        return parts[0]
    return AudioFeatures(
        [np.concatenate(layer) for layer in zip(*(p.cross_k for p in parts), strict=True)],
        [np.concatenate(layer) for layer in zip(*(p.cross_v for p in parts), strict=True)],
        len(parts),
    )


def language_runs(
    model: WhisperModel,
    audio: np.ndarray,
    allowed: Sequence[str] = (),
    before: str | None = None,
) -> list[tuple[int, int, str]]:
    """(first sample, end sample, language) for each run of one language in ``audio``;
    ``before`` is the language of what came just before it."""
    cuts = quiet_points(audio, SPAN_SECONDS)
    bounds = [0, *cuts, audio.shape[0]]
    spans = list(itertools.pairwise(bounds))
    features = encode_windows(model, [audio[a:b] for a, b in spans])
    probs = WindowDecoder(model, DecodingOptions()).language_probs(features)
    languages = settle([choose(p, allowed) for p in probs], before)
    runs: list[tuple[int, int, str]] = []
    for (a, b), lang in zip(spans, languages, strict=True):
        if runs and runs[-1][2] == lang:
            runs[-1] = (runs[-1][0], b, lang)
        else:
            runs.append((a, b, lang))
    return runs
