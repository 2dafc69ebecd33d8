"""Speaker labels for live sessions, given as words are committed.

Two hints, used together:
- **the source.** In meeting mode the microphone and system audio are separate tracks. Each
  word goes to the track that was louder while it was spoken: the microphone is "You". When
  the other track held speech too (louder than ``SPEECH_FLOOR``; the microphone, which also
  hears the loudspeakers, only within ``OVERLAP_DB`` of the system audio), both sides were
  talking: the word is marked ``overlap`` (recognition runs on the mix, so double talk gives
  one word stream, not both parties' words);
- **the voice.** With a speaker encoder, system-audio words (or all words, with one source)
  are grouped into runs: words closer than ``run_gap`` seconds, cut after every sentence end
  (a turn change almost always falls there, and a commit often holds the end of one turn and
  the start of the next). Each run is embedded from the recorded audio and given the nearest
  running centroid of an :class:`OnlineClusterer`, or a new speaker ("S1", "S2", …). A short
  run is widened to ``min_window`` seconds without crossing a sentence end: back into the
  sentence it continues, or forward into the audio after it (the rest of the sentence it
  starts: live commits are often a word or two, and the first words of a new voice must be
  able to start a speaker). A short run that continues the previous sentence keeps its
  speaker; windows under ``min_update`` seconds (too little audio heard yet) are labelled
  without moving the centroids and never start a speaker (short windows embed badly).

Labels are given when words are committed; a session with a speaker encoder revises them from
time to time with an offline pass over the recording so far (``service.live.relabel``), which
hands its voices back to the labeller (``adopt``). The audio kept for embedding is the last
``keep_seconds`` of each track.
"""

from __future__ import annotations

import threading

import numpy as np

from ..audio_format import SAMPLE_RATE
from ..transcript import Word
from .cluster import OnlineClusterer, threshold_for

ENERGY_FRAME = 320  # 20 ms: resolution of the per-track loudness used to attribute words
OVERLAP_DB = 6.0  # the quieter track this close to the louder one: both were talking
SPEECH_FLOOR = 10 ** (-50 / 10)  # mean square of speech (-50 dBFS); quieter is not a voice
YOU, OTHERS = "You", "Others"


class _RecentAudio:
    """The last ``seconds`` of one track, addressed by absolute sample position."""

    def __init__(self, seconds: float) -> None:
        self.capacity = int(seconds * SAMPLE_RATE)
        self.data = np.zeros(0, dtype=np.float32)
        self.end = 0  # absolute position after the last sample

    def append(self, samples: np.ndarray) -> None:
        self.data = np.concatenate([self.data, samples])[-self.capacity :]
        self.end += samples.shape[0]

    def slice(self, start: int, stop: int) -> np.ndarray:
        first = self.end - self.data.shape[0]
        lo, hi = max(start, first) - first, min(stop, self.end) - first
        return self.data[lo:hi] if hi > lo else np.zeros(0, dtype=np.float32)


class LiveSpeakerLabeller:
    def __init__(
        self,
        tracks: list[str],
        encoder=None,
        *,
        threshold: float | None = None,
        run_gap: float = 0.35,
        min_window: float = 1.6,
        min_update: float = 1.0,
        keep_seconds: float = 60.0,
    ) -> None:
        self.tracks = tracks
        self.encoder = encoder
        if threshold is None and encoder is not None:
            threshold = threshold_for(
                encoder.kind, online=True, stored=getattr(encoder, "thresholds", None)
            )
        self.clusterer = OnlineClusterer() if threshold is None else OnlineClusterer(threshold)
        self.run_gap, self.min_window, self.min_update = run_gap, min_window, min_update
        self._lock = threading.Lock()
        self._audio = {t: _RecentAudio(keep_seconds) for t in tracks}
        self._energy: dict[str, list[np.ndarray]] = {t: [] for t in tracks}
        self._tail = {t: np.zeros(0, np.float32) for t in tracks}
        self._last: Word | None = None  # the last labelled word

    @property
    def active(self) -> bool:
        """Whether there is anything to label with (two sources, or an encoder)."""
        return len(self.tracks) > 1 or self.encoder is not None

    def add_audio(self, tracks: dict[str, np.ndarray]) -> None:
        """Aligned new samples of every track (called by the recorder thread)."""
        with self._lock:
            for track, samples in tracks.items():
                if self.encoder is not None:
                    self._audio[track].append(samples)
                if len(self.tracks) > 1:
                    data = np.concatenate([self._tail[track], samples])
                    energy = frame_energy(data)
                    self._energy[track].append(energy)
                    self._tail[track] = data[energy.shape[0] * ENERGY_FRAME :]

    def label(self, words: list[Word]) -> None:
        """Set ``speaker`` on newly committed words (called by the transcriber thread)."""
        sources = self._sources(words)
        runs: list[tuple[str, list[Word]]] = []
        for w, source in zip(words, sources, strict=True):
            if (
                runs
                and runs[-1][0] == source
                and w.start - runs[-1][1][-1].end <= self.run_gap
                and not ends_sentence(runs[-1][1][-1])
            ):
                runs[-1][1].append(w)
            else:
                runs.append((source, [w]))
        for source, run in runs:
            if source == "mic":
                speaker = YOU
            elif self.encoder is None:
                speaker = OTHERS
            else:
                speaker = self._voice(source, run)
            for w in run:
                w.speaker = speaker
            self._last = run[-1]

    def _sources(self, words: list[Word]) -> list[str]:
        if len(self.tracks) == 1:
            return [self.tracks[0]] * len(words)
        with self._lock:
            energy = {t: np.concatenate(self._energy[t] or [np.zeros(0)]) for t in self.tracks}
            for t in self.tracks:
                self._energy[t] = [energy[t]]
        out = []
        for w in words:
            loudness = {t: span_energy(energy[t], w.start, w.end) for t in self.tracks}
            loudest = max(loudness, key=loudness.__getitem__)
            out.append(loudest)
            w.overlap = self._both_talking(loudness, loudest, w.end - w.start)
        return out

    def _both_talking(self, loudness: dict[str, float], loudest: str, seconds: float) -> bool:
        """Whether the track a word was not given to held speech of its own meanwhile. The
        system-audio track carries only the remote side, so any speech there while the user
        speaks is double talk; the microphone also hears the loudspeakers (quieter), so it
        counts only within ``OVERLAP_DB`` of the system audio."""
        frames = max(1.0, seconds * SAMPLE_RATE / ENERGY_FRAME)
        for track, energy in loudness.items():
            if track == loudest or energy / frames < SPEECH_FLOOR:
                continue
            if loudest == "mic" or energy >= loudness[loudest] * 10 ** (-OVERLAP_DB / 10):
                return True
        return False

    def _voice(self, track: str, run: list[Word]) -> str:
        start, end = run[0].start, run[-1].end
        spoken = end - start
        last = self._last
        continues = (
            last is not None
            and last.speaker not in (None, YOU)
            and start - last.end <= self.run_gap
            and not ends_sentence(last)
        )
        if continues and spoken < self.min_update:
            return last.speaker  # a few more words of the same sentence
        # The run's own audio, widened to ``min_window`` when short: back into its own
        # sentence when it continues one, otherwise forward into the audio heard after it
        # (most likely the rest of the sentence it starts). Never back across a sentence end:
        # the voice there may be another speaker's.
        short = max(0.0, self.min_window - spoken)
        if continues:
            lo, hi = start - short, end
        elif ends_sentence(run[-1]):
            lo, hi = start, end  # a whole short sentence: its own audio only
        else:
            lo, hi = start, end + short
        with self._lock:
            audio = self._audio[track].slice(max(0, int(lo * SAMPLE_RATE)), int(hi * SAMPLE_RATE))
        if audio.shape[0] < SAMPLE_RATE // 4:
            return last.speaker if last is not None and last.speaker not in (None, YOU) else "S1"
        embedding = self.encoder.embed(audio)
        with self._lock:  # ``adopt`` may change the centroids from another thread
            # Sure enough to move the centroids or start a speaker: a window of min_update
            # seconds or more (widened windows count: commits are often a word or two).
            sure = audio.shape[0] >= self.min_update * SAMPLE_RATE or len(self.clusterer) == 0
            index = self.clusterer.assign(embedding, update=sure)
            if index >= len(self.clusterer):  # too short to start a new speaker: nearest known
                index = int(np.argmax(self.clusterer.similarities(embedding)))
        return f"S{index + 1}"

    def adopt(self, centroids: dict[str, np.ndarray], renamed: dict[str, str], weight: int) -> None:
        """Take the voices an offline pass found (``centroids`` by the names now shown, "S1"
        ...; ``renamed``: old live name -> the name its words now carry), so that the words
        committed from now on get the same labels as the revised ones."""
        with self._lock:
            for name, centroid in centroids.items():
                if name.startswith("S") and name[1:].isdigit():
                    self.clusterer.seed(int(name[1:]) - 1, centroid, weight)
            last = self._last
            if last is not None and last.speaker in renamed:
                last.speaker = renamed[last.speaker]


def frame_energy(samples: np.ndarray) -> np.ndarray:
    """Mean square of each whole 20 ms frame of 16 kHz ``samples`` (a partial last frame is
    left out: callers carry it over to the next call)."""
    n = samples.shape[0] // ENERGY_FRAME
    frames = samples[: n * ENERGY_FRAME].reshape(n, ENERGY_FRAME)
    return np.mean(frames.astype(np.float64) ** 2, axis=1)


def span_energy(energy: np.ndarray, start: float, end: float) -> float:
    """How loud a track was from ``start`` to ``end`` seconds: the sum of its frame energies
    over that span (at least one frame). Comparing it across tracks says which one a word
    was spoken into, the others hearing it only as crosstalk."""
    lo = int(start * SAMPLE_RATE) // ENERGY_FRAME
    hi = max(lo + 1, int(np.ceil(end * SAMPLE_RATE / ENERGY_FRAME)))
    return float(np.sum(energy[lo:hi]))


def ends_sentence(word: Word) -> bool:
    """Whether ``word`` closes a sentence (turns change there far more often than within)."""
    return word.text.rstrip().rstrip("\"')»”").endswith((".", "?", "!"))
