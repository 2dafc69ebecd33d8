"""Meeting notes for front ends: ``make_notes`` asks the language model that
``service.language_model`` picks, and returns notes whose citations were checked."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..llm.notes import Notes, write_notes
from ..transcript import Transcript
from .language_model import LLMOptions


def make_notes(
    transcript: Transcript,
    *,
    llm: LLMOptions | None = None,
    template: str = "meeting",
    language: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_text: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
) -> Notes:
    """The notes of ``transcript`` by the model ``llm`` names (None: the store's)."""
    lang = language or transcript.language or "the transcript's language"
    with (llm or LLMOptions()).open() as model:
        return write_notes(transcript, model.endpoint, template=template, language=lang,
                           context=model.context, progress=progress, on_text=on_text,
                           cancel=cancel)  # fmt: skip
