"""Speaker labels as every front end gets them: diarize, then name the voices saved as profiles.

One place for "label the speakers of this file" (the file queue, ``deskscribe transcribe
--speakers``, the server) and "label the speakers of this recording" (a live session at Stop).
A broken profile file never costs the transcript: the voices then keep their "Speaker N" names
and the caller is told why.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import Progress
from ..speakers.assign import assign_speakers
from ..speakers.diarize import DiarizeOptions, diarize, diarize_file
from ..speakers.encoder import SpeakerEncoder
from ..speakers.profiles import ProfileError, apply_profiles, match_threshold_for
from ..transcript import Transcript

log = logging.getLogger(__name__)


def name_known_voices(
    transcript: Transcript,
    centroids: dict[str, np.ndarray],
    encoder: SpeakerEncoder,
    warn: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """Name the speakers of ``transcript`` whose voice matches a saved profile (profiles of
    ``encoder``'s model, at its kind's threshold); {speaker id: name}. A profile file that
    cannot be read is reported to ``warn`` (else logged) and nobody is renamed."""
    try:
        return apply_profiles(
            transcript, centroids, match_threshold_for(encoder.kind), model=encoder.name
        )
    except ProfileError as err:
        if warn is not None:
            warn(f"voice profiles not used: {err}")
        else:
            log.exception("voice profiles not used")
        return {}


def label_file(
    model,
    path: str | Path,
    encoder: SpeakerEncoder,
    options: DiarizeOptions | None = None,
    transcribe_options=None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    warn: Callable[[str], None] | None = None,
) -> Transcript:
    """Transcribe ``path`` with word timestamps, label every word with its speaker and name
    the known voices. ``progress`` reports the "transcribe" stage in seconds of audio, then
    "speakers" in windows embedded."""
    result = diarize_file(
        model, path, encoder, options, transcribe_options, progress=progress, cancel=cancel
    )
    name_known_voices(result.transcript, result.diarization.centroids, encoder, warn)
    return result.transcript


def label_recording(
    transcript: Transcript, audio: np.ndarray, encoder: SpeakerEncoder
) -> Transcript:
    """A copy of ``transcript`` (of 16 kHz ``audio``) with speakers from one offline pass over
    the whole recording, the known voices named."""
    turns = diarize(audio, encoder)
    labelled = assign_speakers(transcript, turns)
    name_known_voices(labelled, turns.centroids, encoder)
    return labelled
