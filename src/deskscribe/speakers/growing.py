"""Diarization passes over a recording that only grows, each paying for the new audio only.

A live session revises its speaker labels every few seconds with an offline pass over the
track recorded so far (``service.live.relabel``), and once more at Stop. Run from scratch,
a pass costs the VAD over the whole track and an embedding of every window of it: about a
second per audio minute here, so passes drifted apart as a session grew (they may take a
tenth of the time) and the words between them kept their less reliable live labels.
``GrowingTrack`` keeps what earlier passes computed for the same samples:

- **the VAD** (``GrowingVAD``, what ``diarize(vad=...)`` takes): its state after the last
  whole frame fed, so a pass runs it over the new frames only; the last partial frame is
  judged on a copy of the state, as ``speech_probabilities`` judges a file's;
- **window embeddings** (``CachedEmbeddings``, what ``diarize`` takes as its encoder): by the
  window's sample range. Resemblyzer normalises the volume of the whole recording first, so
  the embeddings of one pass all use one gain: the gain of the track when they were first
  computed, kept while the track's own stays within ``gain_db`` of it, everything embedded
  again otherwise (a session that starts quietly and then gets loud). Resemblyzer hears
  gain: the same windows at +1 dB have cosine 0.995-0.998 with themselves, at +3 dB
  0.96-0.99, at +6 dB 0.90-0.95 (the real call and an AMI clip). The track's gain settles
  as it grows, so this happens early, while passes are cheap. A window that ends near the
  end of the track is not kept (the encoder's frames read a little past a window's end).

Each pass first checks that the track is the one seen so far (not shorter, the same samples
where it looked: a strided sample of the whole and the last samples seen); otherwise both
start again. Clustering and what follows run on every pass as before: they are cheap next to
the embeddings and their result may change anywhere. The cache holds one embedding per
window (1 KiB each for Resemblyzer: a few MiB per recorded hour).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import threading

import numpy as np

from ..audio.vad import FRAME, SequenceVAD
from .diarize import Diarization, DiarizeOptions, diarize
from .segmentation import SegmentationCache

STRIDE = 997  # every this many samples of the track are compared with the last pass's
END_MARGIN = 400  # samples: windows ending this close to the track's end are not kept


class GrowingVAD:
    """Speech probabilities of a growing track, computed once per frame."""

    def __init__(self) -> None:
        self._vad = SequenceVAD()
        self._probs = np.zeros(0, np.float32)
        self.fed = 0  # samples fed (whole frames)

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        if audio.shape[0] < self.fed:
            self.__init__()  # a shorter track is another one: start again
        whole = self.fed + (audio.shape[0] - self.fed) // FRAME * FRAME
        step = SequenceVAD.BATCH * FRAME  # a minute at a time, as speech_probabilities
        vad = copy.copy(self._vad)  # the state moves on only once every new frame is judged
        parts = [self._probs]
        for lo in range(self.fed, whole, step):
            parts.append(vad.feed(audio[lo : min(lo + step, whole)]))
        self._vad, self._probs, self.fed = vad, np.concatenate(parts), whole
        tail = copy.copy(self._vad)  # the partial last frame, judged without keeping its state
        tail.feed(audio[self.fed :])
        return np.concatenate([self._probs, tail.finish()])


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
        self.new: list[tuple[int, int]] = []  # the windows the current pass embedded

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._encoder, name)

    def forget(self) -> None:
        self._gain, self._kept = None, {}

    def begin(self, audio: np.ndarray) -> None:
        """A pass over ``audio`` starts: the gain its embeddings use (one pass over the
        samples, once per pass)."""
        gain = self._encoder.volume_gain(audio)
        if self._gain is None or abs(_db(gain) - _db(self._gain)) > self.gain_db:
            self.regained += self._gain is not None
            self._gain, self._kept = gain, {}
        self.new = []

    def embed_windows(self, audio: np.ndarray, windows, batch_size: int = 32) -> np.ndarray:
        if self._gain is None:
            self.begin(audio)
        n = np.asarray(audio).shape[-1]
        keys = [(int(a), min(int(b), n)) for a, b in windows]
        found = {k: self._kept[k] for k in keys if k in self._kept}
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            new = self._encoder.embed_windows(audio, missing, batch_size, gain=self._gain)
            found.update(zip(missing, new, strict=True))
            self._kept.update((k, e) for k, e in zip(missing, new, strict=True)
                              if k[1] <= n - END_MARGIN)  # fmt: skip
        self.embedded += len(missing)
        self.reused += len(keys) - len(missing)
        self.new += missing
        if not keys:
            return np.zeros((0, self._encoder.dim), np.float32)
        return np.stack([found[k] for k in keys])


def _db(gain: float) -> float:
    return 20 * math.log10(max(gain, 1e-12))


def live_options(options: DiarizeOptions | None = None) -> DiarizeOptions:
    """``options`` (default: the defaults) as passes over a growing track take them: without
    the level cue (``DiarizeOptions.level_cue_db``), whose noise floor moves as the track
    grows, so that regions already seen would move from pass to pass; on the real call its
    30 ms earlier onset of the first turn took the live labels at commit from 0.79 to 0.63
    in one batching (tests/test_live_speakers.py)."""
    return dataclasses.replace(options or DiarizeOptions(), level_cue_db=None)


class GrowingTrack:
    """What passes over one growing track share (its VAD state, its window embeddings)."""

    def __init__(self, encoder, options: DiarizeOptions | None = None) -> None:
        self.options = live_options(options)  # the passes' diarization options
        self.vad = GrowingVAD()
        self.encoder = CachedEmbeddings(encoder)
        self.restarts = 0  # times a track other than the one seen so far came
        self._probe = np.zeros(0, np.float32)  # every STRIDE-th sample seen so far
        self._last = np.zeros(0, np.float32)  # the last samples seen
        self.seen = 0  # samples of the track the last pass saw
        self._lock = threading.Lock()  # one pass at a time
        # The overlap-aware pipeline's windows, when it is installed and labels the passes.
        self.segmentation = SegmentationCache()

    def diarize(
        self, audio: np.ndarray, options: DiarizeOptions | None = None, *, cancel=None
    ) -> Diarization:
        """``diarize(audio, ...)`` of the track recorded so far."""
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)
        with self._lock:
            if not self._same_track(audio):
                self.restarts += 1
                self.vad = GrowingVAD()
                self.encoder.forget()
            self.encoder.begin(audio)
            opt = options or self.options
            # Audio raised before the VAD (``vad_level``) differs from pass to pass.
            vad = self.vad if opt.vad_level is None else None
            result = diarize(audio, self.encoder, opt, vad=vad, cancel=cancel)
            self.seen = audio.shape[0]
            self._probe = audio[::STRIDE].copy()
            self._last = audio[max(0, self.seen - 8192) :].copy()
            return result

    def _same_track(self, audio: np.ndarray) -> bool:
        seen = self.seen
        if audio.shape[0] < seen:
            return False
        return np.array_equal(audio[:seen:STRIDE], self._probe) and np.array_equal(
            audio[seen - self._last.shape[0] : seen], self._last
        )


def diarize_track(
    audio: np.ndarray,
    encoder,
    growing: GrowingTrack | None,
    *,
    options: DiarizeOptions | None = None,
    cancel=None,
):
    """``diarize`` of a recording, through ``growing`` (what earlier passes over the same
    growing track computed) when there is one; ``options``: None takes ``growing``'s."""
    if growing is not None:
        return growing.diarize(audio, options, cancel=cancel)
    return diarize(audio, encoder, options, cancel=cancel)
