"""Who spoke when in a file, and which words each speaker said.

``diarize``:
1. Silero VAD speech regions (pauses of 0.3 s split them), at a speech threshold of 0.25,
   not the transcriber's 0.5: far-field meeting speech scores low (AMI missed speech 31.7
   -> 26.8 %), and a word the recogniser skips is still someone speaking; frames 20 dB over
   the room's floor count as speech at a Silero score of 0.05 (``level_cue``: AMI missed
   26.8 -> 24.5 %, DER 34.1 -> 32.5 %). Options measured and left off: a lenient
   ``extend_threshold`` that only adds frames to label, and ``vad_level`` (the audio raised
   before the VAD);
2. sliding windows over each region (the encoder's window, 1.6 s for Resemblyzer, half of it
   as hop) and one embedding per window; for the clustering only, windows at a quarter of it
   too (``cluster_hop_ratio``, an option, off), clustered on their own: a voice only they
   find (a quiet participant's few seconds give it enough windows there) is added to the
   voices of the usual clustering, which keep their centroids (AMI: count within one on 7
   of 11 clips, from 5; DER 34.1 -> 33.2 %; but the real call played twice in one session
   got a third voice, so it is off); frames still take their speaker from the half-window
   grid (a 0.4 s hop throughout found the same voices but gave short replies to the turn
   before);
3. clustering of the reliable windows only: at least ``min_window`` long and without a pause
   inside (a pause is where one voice may stop and another start; windows mixing two voices
   formed clusters of their own). Agglomerative by default, with clusters of fewer than
   ``min_speaker_windows`` windows folded into the nearest real one; then every window,
   reliable or not, takes the speaker of its nearest centroid; a label that is only the
   change between two others (``_fold_bridges``) is folded into them;
4. a speaker per VAD frame from the window whose centre is nearest; each change moved to the
   quietest frame within ``snap_seconds`` (people pause or breathe when they take over);
   pieces shorter than ``min_turn`` inside a region given to a neighbour;
5. turns, with ids ``S1``, ``S2``, … by first appearance, and each speaker's centroid.

A fixed count or a minimum (``--speakers 5``) never splits clusters closer than
``same_voice`` x the threshold: asked for more voices than there are, it labels the voices
found (the caller says so), not noise. ``center`` (mean embedding out) and ``resegment``
(Viterbi over the windows, ``resegment.py``) are options, off: measured, they did not help
on both the meetings and the call (docs/architecture.md "Speakers").

``assign_speakers`` (in ``assign.py``, re-exported): every word gets the speaker whose turn
overlaps it most (the nearest turn when none does), a change inside a sentence that the
windows do not clearly hold up moved to the sentence's end or a pause (``sentence_turns.py``;
the ``Diarization`` carries each window's similarity to every voice for it), segments cut
where the speaker changes.

``diarize_file``: transcribe with word timestamps, diarize, assign: what the CLI and the GUI
call.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

import numpy as np

from ..audio.vad import (
    FRAME,
    SAMPLE_RATE,
    SileroVAD,
    VadOptions,
    regions_from_probabilities,
    speech_probabilities,
)
from ..errors import Cancelled, Progress
from ..transcript import Transcript
from . import cluster, resegment
from . import turns as frames
from .assign import assign_speakers
from .sentence_turns import WindowScores

__all__ = [
    "Diarization",
    "DiarizationCancelled",
    "DiarizeOptions",
    "DiarizedFile",
    "Turn",
    "assign_speakers",
    "diarize",
    "diarize_file",
    "parse_speakers",
    "sliding_windows",
    "transcribe_words",
]


class Encoder(Protocol):
    """What diarization needs of a speaker encoder (``speakers.encoder.SpeakerEncoder``)."""

    window_seconds: float

    def embed_windows(
        self, audio: np.ndarray, windows: Sequence[tuple[int, int]]
    ) -> np.ndarray: ...


class DiarizationCancelled(Cancelled):
    pass


class Turn(NamedTuple):
    start: float
    end: float
    speaker: str


@dataclass
class DiarizeOptions:
    num_speakers: int | None = None  # fixed count (overrides the threshold and the bounds)
    min_speakers: int | None = None
    max_speakers: int | None = None
    threshold: float | None = None  # cosine distance where merging stops (None: the model's)
    method: str = "agglomerative"  # or "spectral"
    hop_ratio: float = 0.5  # window hop as a share of the encoder's window
    # The hop of extra windows that only the clustering sees (None: none): more windows per
    # quiet participant, while frames keep taking their speaker from the ``hop_ratio`` windows.
    # Off by default: on AMI it finds quiet participants (0.25: count within one on 7 of 11,
    # DER 34.1 -> 33.2 %), but the real call twice in a 21-minute session got a third voice.
    cluster_hop_ratio: float | None = None
    # A voice only that clustering finds must be at least this share of the threshold away
    # from every voice found without it (AMI: 0 -> 8 of 11 counts within one but DER 35.4 %,
    # 0.5 -> 7 of 11 and 33.2 %, 0.65 -> 6 of 11; the call and espeak-ng unchanged).
    new_voice: float = 0.5
    min_turn: float = 0.5  # seconds; shorter pieces inside a region go to a neighbour
    min_window: float = 1.0  # seconds; shorter windows are labelled after clustering
    min_speaker_windows: int = 3  # a cluster of fewer clustered windows is not a speaker
    pause_ms: float = 100  # windows with a pause this long inside are labelled afterwards (0: off)
    refine: bool = True  # relabel every window by its nearest centroid after clustering
    max_cluster_items: int = 2000  # beyond this, an evenly spread subset is clustered
    snap_seconds: float = 0.5  # move a change point to the quietest VAD frame this close
    # An asked-for count never splits clusters closer than this share of the threshold: they
    # are one voice (``--speakers 5`` on a two-person call labels two, and says so).
    same_voice: float = 0.95
    # Speech detection on quiet recordings: the VAD hears the audio raised so that its loud
    # frames reach this level (dBFS; never lowered, at most +30 dB; None: as recorded).
    vad_level: float | None = None
    center: bool = False  # take the recording's mean embedding out before clustering
    resegment: bool = False  # Viterbi re-segmentation over the windows after clustering
    switch_cost: float = 3.0  # its penalty (nats) for a speaker change between windows
    temperature: float = 0.05  # its softmax temperature on cosine similarity
    vad: VadOptions = field(
        default_factory=lambda: VadOptions(threshold=0.25, min_silence_ms=300, speech_pad_ms=120)
    )
    # Speech heard only at this lower VAD threshold is labelled too (None: off): far-field
    # meeting speech scores low. Windows and turn cuts still come from ``vad``'s regions,
    # where pauses between turns stay pauses.
    extend_threshold: float | None = None
    # A "voice" made only of windows that straddle the change between two others is folded
    # into them (``_fold_bridges``): a turn taken without a pause the VAD hears.
    fold_bridges: bool = True
    # Level cue: a frame this many dB above the recording's noise floor (the 10th percentile
    # of 32 ms frame levels, digital silence left out) counts as speech when the VAD gives it
    # at least ``level_cue_prob``: far-field voices that Silero scores near zero are still
    # much louder than the room (None: off).
    level_cue_db: float | None = 20.0
    level_cue_prob: float = 0.05
    # A loud breath or click in the pause between two stretches of speech would join them
    # (windows then straddle the change of speaker): the cue only adds speech beside them.
    level_cue_bridges: bool = False


@dataclass
class Diarization:
    """Turns in time order, and each speaker's centroid (unit vector) for voice profiles.
    ``scores``: each window's span and similarity to every centroid, the evidence the word
    assignment weighs before cutting a sentence between two speakers (``sentence_turns``)."""

    turns: list[Turn]
    centroids: dict[str, np.ndarray]
    scores: WindowScores | None = None

    @property
    def speakers(self) -> list[str]:
        return list(self.centroids)


def parse_speakers(value: str) -> DiarizeOptions:
    """``auto``, ``3`` or ``2-4`` (the CLI's ``--speakers``) as options; ValueError otherwise."""
    text = value.strip().lower()
    if text in ("", "auto"):
        return DiarizeOptions()
    try:
        if "-" in text:
            lo, hi = (int(p) for p in text.split("-", 1))
            if 1 <= lo <= hi:
                return DiarizeOptions(min_speakers=lo, max_speakers=hi)
        elif int(text) >= 1:
            return DiarizeOptions(num_speakers=int(text))
    except ValueError:
        pass
    raise ValueError(f"--speakers {value!r}: use auto, a count such as 2, or a range such as 2-4")


# --------------------------------------------------------------------------- diarize


def sliding_windows(
    regions: Sequence[tuple[int, int]], window: int, hop: int
) -> list[tuple[int, int]]:
    """Windows of ``window`` samples every ``hop`` over each region; a region shorter than a
    window is one window; the last window of a region ends at the region's end."""
    out: list[tuple[int, int]] = []
    for a, b in regions:
        if b - a <= window:
            out.append((a, b))
            continue
        starts = list(range(a, b - window + 1, hop))
        if starts[-1] + window < b:
            starts.append(b - window)
        out += [(s, s + window) for s in starts]
    return out


def diarize(
    audio: np.ndarray,
    encoder: Encoder,
    options: DiarizeOptions | None = None,
    *,
    vad: SileroVAD | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Diarization:
    """Speaker turns of 16 kHz mono ``audio`` (see the module docstring)."""
    opt = options or DiarizeOptions()
    audio = np.asarray(audio, dtype=np.float32).reshape(-1)
    heard = _raised(audio, opt.vad_level)
    probs = vad.probabilities(heard) if vad is not None else speech_probabilities(heard)
    probs = level_cue(audio, probs, opt)
    regions = regions_from_probabilities(probs, audio.shape[0], opt.vad)
    loose = _loose_regions(probs, audio.shape[0], opt, regions)
    window = round(encoder.window_seconds * SAMPLE_RATE)
    hop = max(FRAME, int(window * opt.hop_ratio))
    windows = sliding_windows(regions, window, hop)
    if loose:  # speech only the lenient threshold hears gets windows of its own
        windows = sorted(windows + sliding_windows(_unseen(loose, regions), window, hop))
    if not windows:
        return Diarization([], {})
    shown = len(windows)  # the windows frames take their speaker from; extra ones follow
    # The extra windows only look for voices beyond the usual clustering's: an asked-for count
    # is met by that clustering alone, so they are not embedded then.
    if (
        opt.cluster_hop_ratio is not None
        and opt.cluster_hop_ratio < opt.hop_ratio
        and opt.num_speakers is None
    ):
        fine = sliding_windows(regions, window, max(FRAME, int(window * opt.cluster_hop_ratio)))
        have = set(windows)
        windows = windows + [w for w in fine if w not in have]
    emb = _embed(audio, encoder, windows, progress, cancel)
    if opt.threshold is None:
        opt = dataclasses.replace(
            opt,
            threshold=cluster.threshold_for(
                getattr(encoder, "kind", None), stored=getattr(encoder, "thresholds", None)
            ),
        )
    x = resegment.center(emb) if opt.center else emb  # centroids below stay uncentred
    paused = _pause_inside(windows, probs, opt)
    labels, centroids = _cluster(x[:shown], windows[:shown], opt, paused[:shown])
    if shown < len(windows):
        labels = _add_voices(x, windows, opt, paused, shown, labels, centroids)
    windows, x, emb = windows[:shown], x[:shown], emb[:shown]
    if opt.fold_bridges and opt.num_speakers is None:
        labels = _fold_bridges(x, windows, labels)
    if opt.resegment:
        gap = int(opt.vad.min_silence_ms * SAMPLE_RATE / 1000) + 2 * FRAME
        labels = cluster.renumber(
            resegment.viterbi(
                x, labels, windows, temperature=opt.temperature, switch=opt.switch_cost, gap=gap
            )
        )
    frame_labels = frames.frame_labels(loose, windows, labels, probs.shape[0], by_centre=True)
    frames.frame_labels(regions, windows, labels, probs.shape[0], out=frame_labels)
    if opt.snap_seconds > 0:
        frames.snap_changes(frame_labels, probs, int(opt.snap_seconds * SAMPLE_RATE / FRAME))
    frames.absorb_short(frame_labels, x, labels, int(opt.min_turn * SAMPLE_RATE / FRAME))
    turns = frames.to_turns(frame_labels, audio.shape[0])
    # Ids by first appearance of the final turns; centroids from the windows of each label.
    order = list(dict.fromkeys(int(t[2]) for t in turns))
    ids = {lab: f"S{i + 1}" for i, lab in enumerate(order)}
    centroids = {
        ids[lab]: cluster.normalize(emb[labels == lab].mean(axis=0))
        for lab in order
        if np.any(labels == lab)
    }
    spans = np.array(windows, dtype=np.float64).reshape(-1, 2) / SAMPLE_RATE
    voices = np.array(list(centroids.values())).reshape(len(centroids), emb.shape[1])
    scores = WindowScores(
        starts=spans[:, 0],
        ends=spans[:, 1],
        speakers=list(centroids),
        similarity=emb @ voices.T,
        centroid_similarity=voices @ voices.T,
        hop=hop / SAMPLE_RATE,
    )
    return Diarization([Turn(a, b, ids[int(lab)]) for a, b, lab in turns], centroids, scores)


def _loose_regions(probs, n_samples: int, opt: DiarizeOptions, strict) -> list[tuple[int, int]]:
    """Speech regions at the lenient ``opt.extend_threshold`` ([] when off or not lower than
    the VAD's own): they only add speech to label, the strict regions keep cutting windows."""
    if opt.extend_threshold is None or opt.extend_threshold >= opt.vad.threshold:
        return []
    lenient = dataclasses.replace(opt.vad, threshold=opt.extend_threshold, neg_threshold=None)
    return regions_from_probabilities(probs, n_samples, lenient)


def _unseen(loose, strict) -> list[tuple[int, int]]:
    """The lenient regions that overlap no strict region (both sorted, non-overlapping: the
    one strict region that could overlap is the last one starting before the end)."""
    starts = np.array([a for a, _ in strict])
    ends = np.array([b for _, b in strict])
    out = []
    for a, b in loose:
        i = int(np.searchsorted(starts, b)) - 1
        if i < 0 or ends[i] <= a:
            out.append((a, b))
    return out


def frame_levels(audio: np.ndarray, n_frames: int) -> np.ndarray:
    """The level (dBFS, floored at -120) of each 32 ms VAD frame; frames past the audio's end
    read -120."""
    n = min(audio.shape[0] // FRAME, n_frames)
    out = np.full(n_frames, -120.0)
    block = 4096  # frames at a time: no float64 copy of a long recording
    for i in range(0, n, block):
        j = min(n, i + block)
        x = audio[i * FRAME : j * FRAME].reshape(j - i, FRAME).astype(np.float64)
        out[i:j] = 10 * np.log10(np.maximum(np.mean(x * x, axis=1), 1e-12))
    return out


def level_cue(audio: np.ndarray, probs: np.ndarray, opt: DiarizeOptions) -> np.ndarray:
    """``probs`` with the frames the level cue calls speech raised to the VAD threshold
    (see ``DiarizeOptions.level_cue_db``); a copy, or ``probs`` itself when nothing moves."""
    if opt.level_cue_db is None or probs.shape[0] == 0:
        return probs
    db = frame_levels(audio, probs.shape[0])
    heard = db > -100.0  # digital silence (padding, muted stretches) is not the room
    if heard.sum() < 10:
        return probs
    floor = float(np.percentile(db[heard], 10))
    cue = heard & (db >= floor + opt.level_cue_db) & (probs >= opt.level_cue_prob)
    cue &= probs < opt.vad.threshold
    if not opt.level_cue_bridges:
        pause = opt.vad.min_silence_ms * SAMPLE_RATE // (1000 * FRAME) + 1  # in frames
        cue &= ~_between(probs >= opt.vad.threshold, pause)
    if not cue.any():
        return probs
    out = probs.copy()
    out[cue] = opt.vad.threshold
    return out


def _between(mask: np.ndarray, w: int) -> np.ndarray:
    """Frames with a True frame of ``mask`` within ``w`` frames before and within ``w``
    after (a pause between two stretches of speech)."""
    idx = np.nonzero(mask)[0]
    n = mask.shape[0]
    if idx.size == 0:
        return np.zeros(n, bool)
    pos = np.arange(n)
    k = np.searchsorted(idx, pos)  # first True at or after each frame
    after = np.where(k < idx.size, idx[np.minimum(k, idx.size - 1)] - pos, n)
    kb = np.searchsorted(idx, pos, side="right") - 1  # last True at or before
    before = np.where(kb >= 0, pos - idx[np.maximum(kb, 0)], n)
    return (after <= w) & (before <= w) & ~mask


def _raised(audio: np.ndarray, level: float | None, max_gain_db: float = 30.0) -> np.ndarray:
    """``audio`` with a gain that brings its loud frames (the 95th percentile of 32 ms frame
    RMS) to ``level`` dBFS, never lowered and at most ``max_gain_db``; clipped to [-1, 1]."""
    if level is None or audio.shape[0] < FRAME:
        return audio
    rms = 10 ** (frame_levels(audio, audio.shape[0] // FRAME) / 20)
    loud = float(np.percentile(rms, 95))
    if loud <= 1e-6:
        return audio
    gain_db = min(max(level - 20 * np.log10(loud), 0.0), max_gain_db)
    if gain_db <= 0.0:
        return audio
    return np.clip(audio * np.float32(10 ** (gain_db / 20)), -1.0, 1.0).astype(np.float32)


def _embed(audio, encoder, windows, progress, cancel, batch: int = 64) -> np.ndarray:
    parts = []
    for i in range(0, len(windows), batch):
        if cancel is not None and cancel.is_set():
            raise DiarizationCancelled("diarization cancelled")
        parts.append(np.asarray(encoder.embed_windows(audio, windows[i : i + batch])))
        if progress is not None:
            progress(min(i + batch, len(windows)), len(windows), "speakers")
    return cluster.normalize(np.concatenate(parts))


def _pause_inside(windows, probs: np.ndarray, opt: DiarizeOptions) -> np.ndarray:
    """Windows holding a pause of at least ``opt.pause_ms`` (VAD frames below the off
    threshold): where one voice may end and another begin."""
    run = max(1, round(opt.pause_ms * SAMPLE_RATE / 1000 / FRAME))
    quiet = (probs < opt.vad.off_threshold).astype(np.int64)
    out = np.zeros(len(windows), dtype=bool)
    if run > len(quiet):
        return out
    runs = np.convolve(quiet, np.ones(run, dtype=np.int64), mode="valid") >= run  # run starts
    for i, (a, b) in enumerate(windows):
        fa, fb = a // FRAME + 1, b // FRAME - run  # keep off the window's own edges
        out[i] = fb > fa and bool(runs[fa:fb].any())
    return out


def _add_voices(x, windows, opt: DiarizeOptions, paused, shown: int, labels, centroids):
    """Labels of the first ``shown`` windows with the voices that only a clustering of all
    windows (the extra ones at ``cluster_hop_ratio`` too) finds: a centroid of that
    clustering that is no known voice's nearest and lies ``new_voice`` x the threshold or
    farther from every known one is a voice of its own, and the windows nearest to it take it. Voices found before keep their centroids, so
    their windows keep their labels (with the extra windows' centroids instead, the call's
    0.9 s "Neither did I." went to the turn before)."""
    _, more = _cluster(x, windows, opt, paused)
    far = np.ones(len(more), dtype=bool)
    far[np.argmax(centroids @ more.T, axis=1)] = False  # each known voice's own match
    far &= (more @ centroids.T).max(axis=1) < 1.0 - opt.new_voice * float(opt.threshold)
    if not far.any():
        return labels
    both = np.concatenate([centroids, more[far]])
    return cluster.renumber(np.argmax(x[:shown] @ both.T, axis=1))


def _fold_bridges(
    x: np.ndarray, windows: list[tuple[int, int]], labels: np.ndarray, mix: float = 0.85
) -> np.ndarray:
    """``labels`` without the voices that are only the change between two others.

    Where one speaker takes over from another without a pause the VAD hears (a quick reply,
    a recording with a noise floor in its gaps), the windows that hold the end of one turn
    and the start of the next are not left out of the clustering, and in a conversation of
    three or more they can gather into a voice of their own: a few seconds that sit only at
    changes, whose centroid is close to both neighbours' (0.80 and 0.81 against 0.56 between
    them, a synthetic three-voice conversation with a -80 dBFS noise floor). A label is
    such a bridge when every run of its windows is at most three windows long, lies inside
    speech with a window of one other voice just before it and of yet another just after,
    and its centroid is nearer to the mean of those two (cosine at least ``mix``) than to
    either alone. Its windows then go to the nearest remaining voice."""
    labels = labels.copy()
    while True:
        k = int(labels.max()) + 1 if labels.size else 0
        if k < 3:
            return labels
        cents = np.array([cluster.normalize(x[labels == j].mean(axis=0)) for j in range(k)])
        bridge = next((j for j in range(k) if _is_bridge(j, labels, windows, cents, mix)), None)
        if bridge is None:
            return labels
        rest = [j for j in range(k) if j != bridge]
        mine = labels == bridge
        labels[mine] = np.array(rest)[np.argmax(x[mine] @ cents[rest].T, axis=1)]
        labels = cluster.renumber(labels)


def _is_bridge(j: int, labels, windows, cents: np.ndarray, mix: float) -> bool:
    n = len(labels)
    i = 0
    runs = 0
    while i < n:
        if labels[i] != j:
            i += 1
            continue
        end = i
        while end + 1 < n and labels[end + 1] == j and windows[end + 1][0] < windows[end][1]:
            end += 1
        if end - i + 1 > 3 or i == 0 or end == n - 1:
            return False
        if not (windows[i][0] < windows[i - 1][1] and windows[end + 1][0] < windows[end][1]):
            return False  # a run at the edge of a speech region: a turn of its own
        a, b = int(labels[i - 1]), int(labels[end + 1])
        if a == b:
            return False
        sim = float(cents[j] @ cluster.normalize(cents[a] + cents[b]))
        if sim < mix or sim <= max(float(cents[j] @ cents[a]), float(cents[j] @ cents[b])):
            return False
        runs += 1
        i = end + 1
    return runs > 0


def _cluster(
    emb: np.ndarray, windows: list[tuple[int, int]], opt: DiarizeOptions, paused: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Labels of all windows: clustering on the windows of at least ``min_window`` seconds
    (short ones carry little voice and stray), then every short window joins the speaker
    whose centroid is nearest.

    Windows with a pause inside may hold the end of one turn and the start of the next, so
    they are left out of the clustering, unless that leaves one voice: in a short recording
    every window of a voice can hold a pause, and leaving them all out would merge two voices
    into one label. Then they are clustered too (8-12 s clips of the real phone call: two
    voices kept in 36 of 72, from 18; one voice in 8 of 8 clips of one speaker, as before)."""
    lengths = np.array([b - a for a, b in windows], dtype=np.float64) / SAMPLE_RATE
    full = lengths >= opt.min_window
    if full.sum() < 2:
        full = np.ones(len(windows), dtype=bool)
    chosen = full
    if opt.pause_ms > 0 and (full & ~paused).sum() >= 2:
        chosen = full & ~paused
    core, clustered = _cluster_some(emb, chosen, opt)
    if int(core.max()) == 0 and chosen.sum() < full.sum() and opt.num_speakers != 1:
        core, clustered = _cluster_some(emb, full, opt)
    x = emb[clustered]
    k = int(core.max()) + 1
    centroids = np.array([cluster.normalize(x[core == j].mean(axis=0)) for j in range(k)])
    labels = np.argmax(emb @ centroids.T, axis=1)
    if not opt.refine:
        labels[clustered] = core
    return cluster.renumber(labels), centroids


def _cluster_some(emb: np.ndarray, chosen: np.ndarray, opt: DiarizeOptions):
    """Cluster labels of the ``chosen`` windows, and which windows (indices) were clustered.

    Long files (more than ``max_cluster_items`` windows; the clustering's memory is O(n²)):
    an evenly spread subset of them, each a single window, so the threshold means what it was
    measured for; every window is then labelled by its nearest centroid. Clustering averages
    of neighbouring windows instead, as before, collapsed an hour of eleven reappearing real
    voices into 4 speakers (2553 windows, pairs averaged): averages of a voice lie closer
    together than its windows do, so the threshold merged voices. A subset of 800 of the
    2553 windows found 10 (bench/README.md, ``speakers.py --long``).
    """
    idx = np.flatnonzero(chosen)
    if idx.shape[0] > opt.max_cluster_items:
        spread = np.linspace(0, idx.shape[0] - 1, opt.max_cluster_items).round().astype(np.int64)
        idx = idx[np.unique(spread)]
    x = emb[idx]
    if opt.method == "spectral":
        core = cluster.spectral(x, opt.num_speakers, opt.min_speakers, opt.max_speakers)
    elif opt.method == "agglomerative":
        core = cluster.agglomerative(
            x,
            threshold=opt.threshold if opt.threshold is not None else cluster.DEFAULT_THRESHOLD,
            num=opt.num_speakers,
            min_count=opt.min_speakers,
            max_count=opt.max_speakers,
            min_size=opt.min_speaker_windows,
            floor=None if opt.threshold is None else opt.threshold * opt.same_voice,
        )
    else:
        raise ValueError(f"unknown clustering method {opt.method!r}")
    return core, idx


# --------------------------------------------------------------------------- files


class DiarizedFile(NamedTuple):
    transcript: Transcript
    diarization: Diarization


def diarize_file(
    model,
    path: str | Path,
    encoder: Encoder,
    options: DiarizeOptions | None = None,
    transcribe_options=None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> DiarizedFile:
    """Transcribe ``path`` with word timestamps, diarize it and label every word.

    ``model`` is a ``WhisperModel``; ``transcribe_options`` a ``TranscribeOptions`` (word
    timestamps are switched on). ``progress(done, total, stage)`` reports ``"transcribe"``
    in seconds of audio, then ``"speakers"`` in windows embedded.
    """
    transcript, audio = transcribe_words(
        model, path, transcribe_options, progress=progress, cancel=cancel
    )
    result = diarize(audio, encoder, options, progress=progress, cancel=cancel)
    return DiarizedFile(assign_speakers(transcript, result), result)


def transcribe_words(
    model,
    path: str | Path,
    transcribe_options=None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    shared=None,
) -> tuple[Transcript, np.ndarray]:
    """The transcript of ``path`` with word timestamps, and its 16 kHz audio (the first half
    of :func:`diarize_file`, for callers that keep the words when the speaker step fails;
    ``shared``: see ``transcribe_blocks``)."""
    from ..audio.decode import decode_audio
    from ..whisper.transcribe import TranscribeOptions, TranscriptionInfo, transcribe_blocks

    audio = decode_audio(path)
    duration = audio.shape[0] / SAMPLE_RATE
    topt = dataclasses.replace(transcribe_options or TranscribeOptions(), word_timestamps=True)
    info = TranscriptionInfo(language=None, duration=duration)
    block = 30 * SAMPLE_RATE
    blocks = (audio[i : i + block] for i in range(0, audio.shape[0], block))

    def report(done: float, total: float, stage: str = "") -> None:
        if progress is not None:
            progress(done, total, "transcribe")

    segments = list(
        transcribe_blocks(
            model,
            blocks,
            topt,
            total_seconds=duration,
            progress=report,
            cancel=cancel,
            info=info,
            shared=shared,
        )
    )
    transcript = Transcript(
        segments=segments,
        language=info.language,
        duration=duration,
        source=str(path),
        model=model.name,
    )
    return transcript, audio
