"""Opening a live session and putting a finished one in the library: one function each, for
the window, ``deskscribe live`` and recovery after a crash.

`open_live_session` loads the model (through the front end's ``ModelCache``), checks the
languages asked for, loads the speaker encoder when one is installed (one that is installed
but broken does not stop the session: it runs unlabelled and `Opened.speaker_problem` says
why), and finds the smaller models to step down to when the session falls behind.
`archive_session` is the one place a session folder and its transcript become a library item.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ...library import Library
from ...models.store import ModelNotInstalledError
from ...speakers.encoder import SpeakerModelError
from ...transcript import Transcript
from ...whisper.transcribe import check_languages
from .degrade import fallback_models
from .session import LiveOptions, LiveSession


@dataclass
class Opened:
    session: LiveSession
    encoder: object | None = None  # the speaker encoder labelling voices, if any
    speaker_problem: str | None = None  # why voices are not labelled, when one should be


def open_live_session(
    models,
    options: LiveOptions,
    *,
    model: str | None = None,
    device: str = "auto",
    speaker_model: str | None = None,
    speakers: str = "if installed",
) -> Opened:
    """A `LiveSession` ready to start. ``models``: the front end's ``ModelCache``; ``model``
    and ``device`` as its ``model()`` takes them. ``speakers``: "if installed" (voices are
    labelled when a speaker model is installed and works), "required" (asked for: a missing
    or broken one raises), "off". Raises the loading errors (``ModelNotInstalledError``,
    ``DecodingError`` for languages the model lacks, …): ``service.failures`` says them."""
    whisper = models.model(model, device)
    # An English-only model cannot tell the chosen languages apart: say so now.
    check_languages(whisper.tokenizer, options.streaming.languages)
    encoder, problem = None, None
    if speakers != "off":
        try:
            encoder = models.speaker_encoder("cpu", speaker_model)
        except ModelNotInstalledError:
            if speakers == "required" or speaker_model:
                raise
        except SpeakerModelError as e:
            if speakers == "required":
                raise
            problem = str(e)
    fallbacks = fallback_models(whisper, options.streaming.language, models.model)
    session = LiveSession(whisper, options, speaker_encoder=encoder, fallback_models=fallbacks)
    return Opened(session, encoder, problem)


def archive_session(
    library: Library,
    folder: Path,
    transcript: Transcript,
    *,
    title: str | None = None,
    created: datetime | None = None,
) -> int:
    """A live session's folder and transcript as one library item; returns its id."""
    title = title or f"Live session {created or datetime.now():%Y-%m-%d %H:%M}"
    item = library.add_live_session(folder, title, created, transcript.duration)
    library.save_transcript(item, transcript)
    return item
