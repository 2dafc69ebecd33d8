"""At Stop, one offline speaker pass over the whole recording refines the live labels.

The live labels had to be given from a few seconds of speech each; with the whole recording
at hand the voices are clustered again and the ones saved as profiles named. One source: its
track. Meeting mode: the system-audio track, whose voices are told apart among themselves;
what the microphone said stays "You". Never when the user has corrected text meanwhile (a
correction must not be relabelled away). The pass is bounded in time: one that runs past
``REFINE_BUDGET_SECONDS`` is cancelled and the live labels stay (from scratch the offline
pass measured 0.45-1.2 s per audio minute on 2 cores, so an hour takes 27-70 s; quitting the
app waits for it). When the revisions ran while recording, it starts from their VAD state
and window embeddings (``growing``) and pays for the audio since the last one: 0.45 s
instead of 7.7 s at 20 minutes. Sessions longer than ``REFINE_MAX_SECONDS`` are not read
back into memory at all.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path

from ...audio.sessions import read_track
from ...audio_format import SAMPLE_RATE
from ...speakers.diarize import DiarizeOptions
from ...speakers.growing import GrowingTrack
from ...speakers.online import YOU
from ...transcript import SpeakerTurn, Transcript
from ..speakers import label_recording
from .store import TranscriptStore

log = logging.getLogger(__name__)

REFINE_BUDGET_SECONDS = 90.0  # a pass at Stop that takes longer is given up
REFINE_MAX_SECONDS = 3 * 60 * 60  # a track this long (about 700 MB as float32) stays unread


def voices_track(tracks: list[str]) -> str | None:
    """The track whose voices are told apart: the one source, or in meeting mode the system
    audio (the microphone is "You")."""
    if tracks == ["mic", "system"]:
        return "system"
    return tracks[0] if len(tracks) == 1 else None


def refine_speakers(
    store: TranscriptStore,
    snapshot,
    encoder,
    folder: Path | None,
    tracks: list[str],
    samples: int,
    budget: float = REFINE_BUDGET_SECONDS,
    growing: GrowingTrack | None = None,
    decoded: dict | None = None,
    options: DiarizeOptions | None = None,
) -> bool:
    """Relabel ``store``'s transcript (``snapshot()`` gives it) from the recorded voices;
    whether it did. Any failure, or a pass past ``budget`` seconds, leaves the live labels
    as they were. ``growing``: the revisions' VAD and embeddings of the same track;
    ``decoded``: the chunks they decoded (``read_track``)."""
    voices = voices_track(tracks)
    if (
        encoder is None
        or voices is None
        or folder is None
        or store.edited
        or not len(store)
        or samples > REFINE_MAX_SECONDS * SAMPLE_RATE
    ):
        return False
    cancel = threading.Event()
    timer = threading.Timer(budget, cancel.set)
    timer.daemon = True
    timer.start()
    try:
        transcript = snapshot()
        audio = read_track(folder, voices, decoded)
        if voices == "system":
            refined = _label_beside_you(transcript, audio, encoder, cancel, growing, options)
        else:
            refined = label_recording(transcript, audio, encoder, cancel, growing, options)
    except Exception:  # the live labels stay; nothing is lost
        if cancel.is_set():
            log.warning("the speaker pass at Stop ran past %.0f s: live labels kept", budget)
        else:
            log.exception("refining the speaker labels at stop failed")
        return False
    finally:
        timer.cancel()
    store.replace(refined)
    return True


def _label_beside_you(
    transcript: Transcript, audio, encoder, cancel, growing, options=None
) -> Transcript:
    """Meeting mode: the words the system-audio track carried get its voices; "You" stays."""
    yours = [s for s in transcript.segments if s.speaker == YOU]
    others = dataclasses.replace(
        transcript,
        segments=[s for s in transcript.segments if s.speaker != YOU],
        speakers={k: v for k, v in transcript.speakers.items() if k != YOU},
    )
    labelled = label_recording(others, audio, encoder, cancel, growing, options)
    segments = sorted(yours + labelled.segments, key=lambda s: (s.start, s.end))
    for i, seg in enumerate(segments):
        seg.id = i
    turns = labelled.turns + [SpeakerTurn(s.start, s.end, YOU) for s in yours]
    speakers = {**labelled.speakers, **{k: v for k, v in transcript.speakers.items() if k == YOU}}
    return dataclasses.replace(
        transcript,
        segments=segments,
        speakers=speakers,
        turns=sorted(turns, key=lambda t: (t.start, t.end)),
    )
