"""Translation for front ends: ``translate`` asks the language model that
``service.language_model`` picks for a copy of the transcript with a translation track
(``llm.translate``); ``target`` says what a language the user typed is stored under and how
the model is told it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from ..llm.translate import language_key, translate_transcript, untranslated
from ..transcript import Transcript
from ..whisper.languages import LANGUAGES
from .language_model import LLMOptions

__all__ = ["target", "translate", "untranslated"]


def target(language: str) -> tuple[str, str]:
    """(key, name) of the language the user gave: a code of Whisper's ("fr") is stored as
    it is and named ("French"); one of Whisper's names ("french", "French") is stored under
    its code; a regional code ("pt-BR") under its lower-cased self, named after its
    language ("Portuguese (pt-BR)"); anything else ("Klingon") under its lower-cased self,
    named as given. ``LanguageError`` for what cannot be a key."""
    key = language_key(language)
    given = " ".join(str(language).split())
    if key in LANGUAGES:
        return key, LANGUAGES[key]
    by_name = {v.lower(): k for k, v in LANGUAGES.items()}
    if key in by_name:
        return by_name[key], LANGUAGES[by_name[key]]
    base = key.replace("_", "-").split("-", 1)[0]
    if base in LANGUAGES and base != key:
        return key, f"{LANGUAGES[base]} ({given})"
    return key, given


def translate(
    transcript: Transcript,
    language: str,
    *,
    llm: LLMOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Transcript:
    """A copy of ``transcript`` whose segments carry their translation into ``language``
    under ``target(language)[0]`` (``transcript`` is not changed); the segments left
    without one: ``untranslated(result, key)``. ``progress(done, total)`` counts lines;
    ``llm``: the model to ask (None: the store's)."""
    key, name = target(language)
    with (llm or LLMOptions()).open() as model:
        return translate_transcript(transcript, key, model.endpoint, name=name,
                                    context=model.context, progress=progress, cancel=cancel,
                                    on_text=on_text)  # fmt: skip
