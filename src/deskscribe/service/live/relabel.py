"""While recording, the speaker labels are revised from time to time by an offline pass.

Live labels are given as words are committed, from a few seconds of audio each; on a real
phone call the shipped encoder cannot tell two voices apart from that little (word accuracy
0.57-0.73 live, 0.93 after the pass at Stop). So every so often, on its own thread, the
session runs the offline speaker pass (``diarize``) over the track recorded so far and gives
the committed words its labels: the live window shows them, the labels already on screen
keep their names where the voice is the same (each offline voice takes the live name most of
its words had), and the live labeller takes the offline voices as its centroids so the words
committed next get the same labels. Meeting mode: the system-audio track's voices among
themselves; "You" stays.

The passes cost: a pass from scratch took 0.45-1.2 s per audio minute on 2 cores, so with
passes held to a share of the time (``share``) they drifted apart as a session grew (7.7 s
at 20 minutes: one every 77 s). Each pass now keeps the VAD state and window embeddings of
the ones before (``speakers.growing``) and pays for the new audio: 0.45 s at 20 minutes, the
same speakers (``bench/speakers.py --growing``); the pass at Stop uses them too. Reading the
track back decodes only the chunks finished since the last pass (0.02 s instead of 0.5 s at
20 minutes). There is no
pass while the session has stepped down to deferring labels (it is behind), nor past
``REFINE_MAX_SECONDS``. Stop cancels a pass in progress; the pass at Stop (``refine``) has the
last word.

With the overlap-aware models installed (``service.speakers.segmentation_pipeline``), the
passes label with them while they keep up: each pass runs the new windows only
(``SegmentationCache``, which the pass at Stop then reuses) and the live labeller adopts each
voice measured in its own encoder's space (``voice_of`` over up to ``VOICE_SECONDS`` of their
words). A pass after the first that costs more than ``share`` of the new audio's duration
hands the revisions to the voice pipeline for the rest of the session; the pass at Stop
still tries the overlap-aware one within its time. On 2 CPU cores a pass costs 0.55-0.83 s
per new second of an AMI clip (the WeSpeaker ResNet34 on every window), so there the
revisions go back to voices after the second.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...audio.sessions import read_track
from ...audio_format import SAMPLE_RATE
from ...speakers.assign import assign_speakers
from ...speakers.diarize import DiarizeOptions
from ...speakers.growing import GrowingTrack, diarize_track
from ...speakers.online import YOU, LiveSpeakerLabeller
from ...transcript import Segment, Transcript
from ..speakers import label_with_segmentation, segmentation_pipeline
from .refine import REFINE_MAX_SECONDS, voices_track
from .store import TranscriptStore, word_key

log = logging.getLogger(__name__)


@dataclass
class ReviseOptions:
    first_seconds: float = 6.0  # the first pass once this much has been recorded
    every_seconds: float = 3.0  # at least this long between passes (with new words)
    share: float = 0.1  # ... and passes take at most this share of the time
    weight: int = 20  # the offline centroids count as this many live windows


def match_names(
    shown: dict[tuple, str], found: dict[tuple, str], taken: set[str]
) -> dict[str, str]:
    """A name for each offline voice (``found``: word -> offline label): the live name
    (``shown``: word -> label on screen) most of its words have, each live name given once,
    most words first; the rest get new names "S<n>" past every name in ``taken``."""
    pairs = Counter((found[k], shown[k]) for k in found if shown.get(k) not in (None, YOU))
    names: dict[str, str] = {}
    used: set[str] = set()
    for (voice, name), _ in pairs.most_common():
        if voice not in names and name not in used:
            names[voice] = name
            used.add(name)
    numbers = [int(n[1:]) for n in taken | used if n.startswith("S") and n[1:].isdigit()]
    next_number = max(numbers, default=0) + 1
    for voice in dict.fromkeys(found.values()):
        if voice not in names:
            names[voice] = f"S{next_number}"
            next_number += 1
    return names


def revise_labels(
    store: TranscriptStore,
    transcript: Transcript,
    audio,
    labeller: LiveSpeakerLabeller,
    weight: int,
    cancel: threading.Event | None = None,
    growing: GrowingTrack | None = None,
    share: float = ReviseOptions.share,
) -> list[Segment]:
    """One revision: the offline pass over ``audio`` (the voices' track so far) labels the
    words of ``transcript`` (the store's snapshot); the store and the labeller take it. The
    segments whose labels changed. ``growing``: what earlier passes over the same track
    computed (``speakers.growing``), with which the overlap-aware pipeline labels while it
    keeps up (a pass may cost ``share`` of the new audio's duration)."""
    others = [s for s in transcript.segments if s.speaker != YOU]
    if not others or audio.shape[0] < SAMPLE_RATE:
        return []
    voices: dict = {}
    relabelled = by_segmentation(others, audio, labeller, growing, cancel, share, voices)
    if relabelled is None:
        diarization = diarize_track(audio, labeller.encoder, growing, cancel=cancel)
        if not diarization.turns:
            return []
        relabelled = assign_speakers(Transcript(segments=others), diarization)
        voices = diarization.centroids
    found = {word_key(w): w.speaker for s in relabelled.segments for w in s.words if w.speaker}
    shown = {word_key(w): w.speaker for s in others for w in s.words}
    names = match_names(shown, found, {n for n in shown.values() if n})
    renamed = {}  # live name -> the name its words mostly carry now
    pairs = Counter((shown[k], names[v]) for k, v in found.items() if k in shown)
    for (old, new), _ in pairs.most_common():
        renamed.setdefault(old, new)
    if cancel is not None and cancel.is_set():
        return []  # stopped meanwhile: the pass at Stop labels everything
    changed = store.relabel({k: names[v] for k, v in found.items()})
    centroids = {names[v]: c for v, c in voices.items() if v in names}
    labeller.adopt(centroids, renamed, weight)
    return changed


VOICE_SECONDS = 20.0  # of each voice's words, measured for the live labeller each pass


def by_segmentation(
    others: list[Segment],
    audio,
    labeller: LiveSpeakerLabeller,
    growing: GrowingTrack | None,
    cancel: threading.Event | None,
    share: float,
    voices: dict,
) -> Transcript | None:
    """``others`` labelled by the overlap-aware pipeline, each voice in the labeller's space
    put in ``voices``; None when it is not installed, does not keep up or failed (the voice
    pipeline labels instead)."""
    cache = None if growing is None else growing.segmentation
    if cache is None or not cache.keeps_up or labeller.encoder is None:
        return None
    pipeline = segmentation_pipeline()
    if pipeline is None:  # not installed, or cannot load (said once): not asked again
        cache.keeps_up = False
        return None
    first, seen = cache.seen == 0, cache.seen
    began = time.perf_counter()
    labelled = label_with_segmentation(
        pipeline, Transcript(segments=others), audio, labeller.encoder, growing.options, None,
        cancel, None, cache=cache, voices=voices, voice_seconds=VOICE_SECONDS,
    )  # fmt: skip
    took = time.perf_counter() - began
    new_seconds = max(audio.shape[0] - seen, 1) / SAMPLE_RATE
    if labelled is None or (not first and took > share * new_seconds):
        cache.keeps_up = False
        log.info(
            "live speaker revisions go on by voice: the overlap-aware pass %s",
            "failed" if labelled is None else f"took {took:.1f} s for {new_seconds:.1f} s of audio",
        )
    return labelled


class LabelReviser:
    """The thread that revises the labels while a session records (``run`` is its body)."""

    def __init__(
        self,
        store: TranscriptStore,
        snapshot: Callable[[], Transcript],
        labeller: LiveSpeakerLabeller,
        tracks: list[str],
        recorded: Callable[[], int],
        allowed: Callable[[], bool],
        on_revised: Callable[[list[Segment]], None],
        options: ReviseOptions | None = None,
        diarize_options: DiarizeOptions | None = None,
    ) -> None:
        self.store, self.snapshot, self.labeller = store, snapshot, labeller
        self.track = voices_track(tracks)
        self.recorded, self.allowed, self.on_revised = recorded, allowed, on_revised
        self.options = options or ReviseOptions()
        self.passes: list[tuple[float, float]] = []  # (seconds recorded, seconds it took)
        # The VAD and window embeddings of earlier passes (the pass at Stop uses them too).
        self.growing = GrowingTrack(labeller.encoder, diarize_options) if self.active else None
        # The track's finished chunks, decoded once (``read_track``; the pass at Stop too).
        self.decoded: dict = {}
        self._newest = 0.0  # end of the newest committed segment the last pass saw

    @property
    def active(self) -> bool:
        return self.labeller.encoder is not None and self.track is not None

    def _due(self, seconds: float) -> bool:
        opt = self.options
        if not self.passes:
            return seconds >= opt.first_seconds
        at, took = self.passes[-1]
        return seconds >= at + max(opt.every_seconds, took / opt.share)

    def run(self, folder: Path, stop: threading.Event) -> None:
        while not stop.wait(0.5):
            seconds = self.recorded() / SAMPLE_RATE
            if seconds > REFINE_MAX_SECONDS:
                self.decoded = {}  # not read again: no pass at Stop either
                return  # a track too long to read into memory (as at Stop)
            if not self._due(seconds) or not self.allowed() or not len(self.store):
                continue
            transcript = self.snapshot()
            newest = max((s.end for s in transcript.segments), default=0.0)
            if newest <= self._newest:
                continue  # nothing committed since the last pass
            self._newest = newest
            began = time.perf_counter()
            try:
                audio = read_track(folder, self.track, self.decoded)
                changed = revise_labels(
                    self.store, transcript, audio, self.labeller, self.options.weight, stop,
                    self.growing, self.options.share,
                )  # fmt: skip
            except Exception:  # cancelled at Stop, or failed: the live labels stay
                if not stop.is_set():
                    log.exception("revising the live speaker labels failed")
                changed = []
            self.passes.append((seconds, time.perf_counter() - began))
            if changed and not stop.is_set():
                self.on_revised(changed)
