"""Meeting notes for front ends: which language model writes them, and the notes.

``make_notes`` takes an OpenAI-compatible endpoint the user chose (Ollama, LM Studio, a
remote provider with a key) or a GGUF file run by the built-in llama.cpp server, else the
largest notes model installed in the model store. Nothing leaves the computer unless the
user names a remote endpoint.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from ..llm.embedded import EmbeddedLLM
from ..llm.endpoint import Endpoint, LLMError
from ..llm.notes import Notes, write_notes
from ..llm.store import default_llm
from ..transcript import Transcript


def make_notes(
    transcript: Transcript,
    *,
    endpoint: Endpoint | None = None,
    gguf: Path | None = None,
    language: str | None = None,
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> Notes:
    lang = language or transcript.language or "the transcript's language"
    if endpoint is not None:
        return write_notes(transcript, endpoint, language=lang, progress=progress, cancel=cancel)
    gguf = gguf or default_llm()
    if gguf is None:
        raise LLMError(
            "no language model for notes: install the offline one with `deskscribe models "
            "install-starter --which llm`, or give an OpenAI-compatible server (Ollama, "
            "LM Studio) with --url and --model"
        )
    with EmbeddedLLM(gguf, threads=threads) as local:
        return write_notes(
            transcript,
            local,
            language=lang,
            budget_chars=6000,  # the built-in model's context holds about this much
            progress=progress,
            cancel=cancel,
        )
