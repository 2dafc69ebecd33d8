"""Ask for front ends: a question about one transcript (``ask_transcript``) or across the
library (``ask_library``: the items the library's full-text index ranks best for the
question's words, then the model), answered by the language model that
``service.language_model`` picks, with checked citations (``llm.ask``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from ..library.db import Library, LibraryError
from ..llm.ask import Answer, NothingToAsk, Source, ask_transcripts, check_question, keywords
from ..transcript import Transcript
from .language_model import LLMOptions


def ask_transcript(
    transcript: Transcript,
    question: str,
    *,
    title: str = "",
    item_id: int | None = None,
    llm: LLMOptions | None = None,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Answer:
    """``question`` about one transcript, called ``title`` in the citations."""
    name = title or (Path(transcript.source).name if transcript.source else "transcript")
    return ask_sources([(item_id, name, transcript)], question, llm=llm, cancel=cancel,
                       on_text=on_text)  # fmt: skip


def library_sources(library: Library, question: str, limit: int = 5) -> list[Source]:
    """The ``limit`` items with a transcript that the library ranks best for ``question``,
    best first; ``NothingToAsk`` when none matches."""
    words = keywords(check_question(question))
    ranked = library.rank(" ".join(words), limit + 20) if words else []
    out: list[Source] = []
    for item_id in ranked:
        try:
            item = library.get(item_id)
            if item.transcript_path:
                out.append((item_id, item.title, library.load_transcript(item_id)))
        except LibraryError:  # deleted meanwhile, or its file is gone: ask the others
            continue
        if len(out) >= limit:
            break
    if not out:
        raise NothingToAsk(
            "no transcript in the library matches the question's words: ask with words the "
            "recordings use (the library is searched in their language), or ask about one "
            "transcript"
        )
    return out


def ask_library(
    library: Library,
    question: str,
    *,
    limit: int = 5,
    llm: LLMOptions | None = None,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Answer:
    """``question`` across the library: the best-matching transcripts, read together."""
    sources = library_sources(library, question, limit)
    return ask_sources(sources, question, llm=llm, cancel=cancel, on_text=on_text)


def ask_sources(
    sources: list[Source],
    question: str,
    *,
    llm: LLMOptions | None = None,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Answer:
    """``question`` about ``sources`` ((item id or None, title, transcript) each), asked of
    the model ``llm`` names (None: the store's)."""
    check_question(question)  # before a model is started for nothing
    if not sources:
        raise NothingToAsk("no transcript to ask about: give one, or ask across the library")
    with (llm or LLMOptions()).open() as model:
        return ask_transcripts(sources, question, model.endpoint, context=model.context,
                               cancel=cancel, on_text=on_text)  # fmt: skip
