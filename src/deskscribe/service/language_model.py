"""Which language model answers, for notes, questions and translation: an OpenAI-compatible
endpoint the user chose (Ollama, LM Studio, a remote provider with a key), else a GGUF file
run by the built-in llama.cpp server, else the largest notes model in the model store.
Nothing leaves the computer unless the user names a remote endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..llm.embedded import EmbeddedLLM
from ..llm.endpoint import Endpoint, LLMError
from ..llm.store import default_llm

EMBEDDED_CONTEXT = 8192  # tokens the built-in server is started with


@dataclass(frozen=True)
class Model:
    """An endpoint to ask, and the tokens its context holds (what one request may use)."""

    endpoint: Endpoint
    context: int


@contextmanager
def language_model(
    endpoint: Endpoint | None = None,
    gguf: Path | None = None,
    *,
    threads: int | None = None,
    context: int | None = None,
) -> Iterator[Model]:
    """``with language_model(...) as model:`` the model to ask while the block runs (the
    built-in server is started for it and stopped after). ``context`` is the endpoint's
    context in tokens where the caller knows it (default: 8192 for the built-in server,
    16384 for a server the user named)."""
    if endpoint is not None:
        yield Model(endpoint, context or 16384)
        return
    gguf = gguf or default_llm()
    if gguf is None:
        raise LLMError(
            "no language model is installed: install the offline one with `deskscribe models "
            "install-starter --which llm`, or give an OpenAI-compatible server (Ollama, "
            "LM Studio) with --url and --model"
        )
    context = context or EMBEDDED_CONTEXT
    with EmbeddedLLM(gguf, threads=threads, context=context) as local:
        yield Model(local, context)


@dataclass(frozen=True)
class Choice:
    """The language model the app's settings choose, and how the app names it to the user."""

    endpoint: Endpoint | None  # None: the built-in model
    gguf: Path | None
    label: str  # "SmolLM2-135M-Instruct.Q4_1, built in (on this computer)"
    remote: bool  # the transcript leaves this computer


def chosen() -> Choice:
    """From the settings ``notes_url``/``notes_model``/``notes_key``; else the built-in model
    (``notes_gguf``, or the largest installed in the store). LLMError when neither is there."""
    from urllib.parse import urlsplit

    from .. import settings

    url = (settings.get("notes_url") or "").strip().rstrip("/")
    if url:
        model = (settings.get("notes_model") or "").strip()
        if not model:
            raise LLMError(
                f"notes are set to use {url} but no model on it: set notes_model in Settings "
                "(or deskscribe config notes_model NAME)"
            )
        host = (urlsplit(url).hostname or "").lower()
        remote = host not in ("127.0.0.1", "localhost", "::1")
        label = f"{model} at {url}" + (" (the transcript is sent there)" if remote else
                                        " (on this computer)")  # fmt: skip
        key = settings.get("notes_key") or ""
        return Choice(Endpoint(url, model, api_key=key, label=url), None, label, remote)
    gguf = default_llm(name=settings.get("notes_gguf"))
    if gguf is None:
        raise LLMError(
            "no language model for notes is installed: install the offline one with "
            "`deskscribe models install-starter --which llm` (small, for trying), or set an "
            "Ollama or LM Studio server in Settings (notes_url, notes_model)"
        )
    return Choice(None, gguf, f"{gguf.stem}, built in (on this computer)", False)


@dataclass(frozen=True)
class LLMOptions:
    """The language model a front end asks (notes, ask, translate), as ``language_model``
    takes it: a server, else a GGUF file run by the built-in server, else the largest notes
    model in the store; ``threads`` for the built-in server, ``context`` in tokens (None: the
    defaults). ``LLMOptions()``: the store's model with the defaults."""

    endpoint: Endpoint | None = None
    gguf: Path | None = None
    threads: int | None = None
    context: int | None = None

    @contextmanager
    def open(self) -> Iterator[Model]:
        """``with options.open() as model:`` ``language_model`` for these options."""
        with language_model(self.endpoint, self.gguf, threads=self.threads,
                            context=self.context) as model:  # fmt: skip
            yield model
