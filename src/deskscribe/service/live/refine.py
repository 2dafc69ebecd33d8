"""At Stop, one offline speaker pass over the whole recording refines the live labels.

The live labels had to be given from a few seconds of speech each; with the whole recording
at hand the voices are clustered again and the ones saved as profiles named. Single-source
sessions up to ``REFINE_MAX_SECONDS`` only, and never when the user has corrected text
meanwhile (a correction must not be relabelled away).
"""

from __future__ import annotations

import logging
from pathlib import Path

from ...audio.sessions import read_track
from ...audio_format import SAMPLE_RATE
from ..speakers import label_recording
from .store import TranscriptStore

log = logging.getLogger(__name__)

REFINE_MAX_SECONDS = 20 * 60  # longer sessions keep their live speaker labels at Stop


def refine_speakers(
    store: TranscriptStore,
    snapshot,
    encoder,
    folder: Path | None,
    tracks: list[str],
    samples: int,
) -> bool:
    """Relabel ``store``'s transcript (``snapshot()`` gives it) from the recorded track;
    whether it did. Any failure leaves the live labels as they were."""
    if (
        encoder is None
        or len(tracks) != 1
        or folder is None
        or store.edited
        or not len(store)
        or samples > REFINE_MAX_SECONDS * SAMPLE_RATE
    ):
        return False
    try:
        refined = label_recording(snapshot(), read_track(folder, tracks[0]), encoder)
    except Exception:  # the live labels stay; nothing is lost
        log.exception("refining the speaker labels at stop failed")
        return False
    store.replace(refined)
    return True
