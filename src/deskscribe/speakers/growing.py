"""Diarization passes over a recording that only grows, each paying for the new audio only.

A live session revises its speaker labels every few seconds with an offline pass over the
track recorded so far (``service.live.relabel``), and once more at Stop. Run from scratch,
a pass costs the VAD over the whole track and an embedding of every window of it: about a
second per audio minute here, so passes drifted apart as a session grew (they may take a
tenth of the time) and the words between them kept their less reliable live labels.
``GrowingTrack`` keeps what earlier passes computed for the same samples:

- **the VAD** (``vad``, what ``diarize(vad=...)`` takes): its state after the last whole
  frame fed, so a pass runs it over the new frames only; the last partial frame is judged
  on a copy of the state, as ``speech_probabilities`` judges a file's;
- **window embeddings** (``encoder``, what ``diarize`` takes as its encoder): by the window's
  sample range. Resemblyzer normalises the volume of the whole recording first, so the
  embeddings of one pass all use one gain: the gain of the track when they were first
  computed, kept while the track's own stays within ``gain_db`` of it, everything embedded
  again otherwise (a session that starts quietly and then gets loud). Resemblyzer hears
  gain: the same windows at +1 dB have cosine 0.995-0.998 with themselves, at +3 dB
  0.96-0.99, at +6 dB 0.90-0.95 (the real call and an AMI clip). The track's gain settles
  as it grows, so this happens early, while passes are cheap.

Clustering and what follows run on every pass as before: they are cheap next to the
embeddings and their result may change anywhere. The cache holds one embedding per window
(1 KiB each for Resemblyzer: about 4.6 MiB per recorded hour of speech).
"""

from __future__ import annotations

import copy
import math
import threading

import numpy as np

from ..audio.vad import FRAME, SequenceVAD
from .diarize import Diarization, diarize


class GrowingVAD:
    """Speech probabilities of a growing track, computed once per frame."""

    def __init__(self) -> None:
        self._vad = SequenceVAD()
        self._parts: list[np.ndarray] = []
        self._fed = 0  # samples fed (whole frames)
        self._head = np.zeros(0, np.float32)  # the first samples fed, to tell another track

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.shape[0] < self._fed or not np.array_equal(
            audio[: self._head.shape[0]], self._head
        ):
            self.__init__()  # not the track fed so far: start again
        if not self._fed:
            self._head = audio[: 16 * FRAME].copy()
        whole = (audio.shape[0] - self._fed) // FRAME * FRAME
        step = SequenceVAD.BATCH * FRAME  # a minute at a time, as speech_probabilities
        for lo in range(self._fed, self._fed + whole, step):
            self._parts.append(self._vad.feed(audio[lo : min(lo + step, self._fed + whole)]))
        self._fed += whole
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        tail = copy.copy(self._vad)  # the partial last frame, judged without keeping its state
        tail.feed(audio[self._fed :])
        return np.concatenate([*self._parts, tail.finish()])


class CachedEmbeddings:
    """``encoder`` (a ``SpeakerEncoder``) whose window embeddings are kept between passes
    over one growing track. Everything but ``embed_windows`` is the encoder's."""

    def __init__(self, encoder, gain_db: float = 1.0) -> None:
        self._encoder = encoder
        self.gain_db = gain_db
        self._gain: float | None = None
        self._kept: dict[tuple[int, int], np.ndarray] = {}
        self.embedded = 0  # windows embedded, all passes together
        self.reused = 0  # windows taken from earlier passes
        self.regained = 0  # times the track's gain moved too far: everything embedded again

    def __getattr__(self, name: str):
        return getattr(self._encoder, name)

    def embed_windows(self, audio: np.ndarray, windows, batch_size: int = 32) -> np.ndarray:
        gain = self._encoder.volume_gain(audio)
        if self._gain is None or abs(_db(gain) - _db(self._gain)) > self.gain_db:
            self.regained += self._gain is not None
            self._gain, self._kept = gain, {}
        n = np.asarray(audio).shape[-1]
        keys = [(int(a), min(int(b), n)) for a, b in windows]
        missing = list(dict.fromkeys(k for k in keys if k not in self._kept))
        if missing:
            new = self._encoder.embed_windows(audio, missing, batch_size, gain=self._gain)
            self._kept.update(zip(missing, new, strict=True))
        self.embedded += len(missing)
        self.reused += len(keys) - len(missing)
        if not keys:
            return np.zeros((0, self._encoder.dim), np.float32)
        return np.stack([self._kept[k] for k in keys])


def _db(gain: float) -> float:
    return 20 * math.log10(max(gain, 1e-12))


class GrowingTrack:
    """What passes over one growing track share (its VAD state, its window embeddings)."""

    def __init__(self, encoder) -> None:
        self.vad = GrowingVAD()
        self.encoder = CachedEmbeddings(encoder)
        self._lock = threading.Lock()  # one pass at a time

    def diarize(self, audio: np.ndarray, options=None, *, cancel=None) -> Diarization:
        """``diarize(audio, ...)`` of the track recorded so far (``audio`` starts where the
        earlier passes' did)."""
        with self._lock:
            return diarize(audio, self.encoder, options, vad=self.vad, cancel=cancel)
