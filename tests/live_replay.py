"""Live speaker labels replayed without a sound device: a conversation's words fed to the live
labeller in the batches a live session commits, with the label revisions at the session's
spacing (without its limit on the share of time passes take). Shared by ``tests/test_live_speakers.py`` and ``bench/speakers.py --live-replay``."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conversations import commit_batches
from deskscribe.service.live.relabel import ReviseOptions, revise_labels
from deskscribe.service.live.store import TranscriptStore, word_key
from deskscribe.speakers.growing import GrowingTrack
from deskscribe.speakers.online import LiveSpeakerLabeller
from deskscribe.transcript import Segment, Word
from deskscribe.whisper.streaming import StreamUpdate
from speaker_metrics import word_accuracy

SR = 16000
BATCHINGS = [("regions", 0), ("prefixes", 1), ("words", 1), ("words", 2)]


@dataclass
class Replayed:
    at_commit: float  # word accuracy of the labels given at commit
    while_recording: float  # of the shown labels after each batch, averaged
    at_end: float  # of the shown labels after the last batch (before the pass at Stop)
    labels: int  # labels shown at the end
    relabelled: int  # shown words whose label a revision changed
    passes: int  # revisions run


def replay_labels(encoder, audio, turns, words, how: str, seed: int, revise: bool) -> Replayed:
    """``words``: ``(start, end, text)`` of the conversation (Whisper word timestamps);
    ``turns``: the reference. Each batch (``commit_batches(how, seed)``) is labelled with the
    audio heard up to 1 s past it; with ``revise``, ``revise_labels`` runs over the audio so
    far (a ``GrowingTrack`` and a ``TranscriptStore``, as ``LabelReviser`` does) once
    ``first_seconds`` are heard and then every ``every_seconds``."""
    opt = ReviseOptions()
    labeller, store = LiveSpeakerLabeller(["system"], encoder), TranscriptStore()
    growing = GrowingTrack(encoder)
    fed, committed, moments, before, changed, last, passes = 0, [], [], {}, 0, None, 0
    for i, batch in enumerate(commit_batches([Word(a, b, t) for a, b, t in words], how, seed)):
        heard = min(len(audio), int((batch[-1].end + 1.0) * SR))
        if heard > fed:
            labeller.add_audio({"system": audio[fed:heard]})
            fed = heard
        labeller.label(batch)
        committed += [(w.start, w.end, w.speaker) for w in batch]
        text = "".join(w.text for w in batch)
        segment = Segment(batch[0].start, batch[-1].end, text, words=list(batch), id=i,
                          speaker=batch[0].speaker)  # fmt: skip
        store.publish(StreamUpdate(segments=[segment]))
        at = fed / SR
        if revise and at >= (opt.first_seconds if last is None else last + opt.every_seconds):
            last, passes = at, passes + 1
            snap = store.snapshot(language="en", duration=at, source=None, model="")
            revise_labels(store, snap, audio[:fed], labeller, opt.weight, None, growing)
        shown = store.snapshot(language="en", duration=at, source=None, model="")
        now = {word_key(w): w.speaker for s in shown.segments for w in s.words}
        changed += sum(1 for k, v in now.items() if k in before and before[k] != v)
        before = now
        moments.append(word_accuracy(turns, _spans(now)))
    return Replayed(
        at_commit=word_accuracy(turns, committed),
        while_recording=float(np.mean(moments)),
        at_end=word_accuracy(turns, _spans(before)),
        labels=len(set(before.values())),
        relabelled=changed,
        passes=passes,
    )


def _spans(labels: dict[tuple, str]) -> list[tuple[float, float, str]]:
    """``(start, end, speaker)`` of words labelled by ``word_key``."""
    return [(start, end, speaker) for (start, end, _), speaker in labels.items()]
