"""OpenAI-compatible chat endpoints, through the official ``openai`` SDK.

``discover`` finds LLM servers on this computer only: a ``GET /v1/models`` to 127.0.0.1 on
the ports the usual local servers use, each with a short timeout and a bounded reply; nothing
else is probed. ``chat_json`` asks for a reply that follows a JSON schema
(``response_format``), streams it so that it can be cancelled between tokens, and checks the
reply parses; a server that refuses ``response_format`` (400) is asked again without it.
An API key is kept out of ``repr`` and of every message.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import Cancelled, DeskScribeError

# The ports local LLM servers listen on by default.
LOOPBACK_PORTS: dict[int, str] = {
    11434: "Ollama",
    1234: "LM Studio",
    8080: "llama.cpp server",
    8000: "vLLM",
}
MAX_MODELS_REPLY = 1 << 20  # bytes of a /v1/models reply read at most
# Characters of one streamed reply read at most: a server that streams past its max_tokens
# (a hostile or broken one) is stopped here, not at the request's timeout.
MAX_REPLY_CHARS = 200_000


class LLMError(DeskScribeError):
    """The language model could not be reached or did not answer usefully."""


class LLMCancelled(LLMError, Cancelled):
    pass


def install_hint() -> str:
    """How to get the notes runtime (llama.cpp's binding, the openai client) where it is
    missing: the extra from pip, or in the installed app its notes add-on."""
    import sys

    if not getattr(sys, "frozen", False):
        return 'pip install "deskscribe[notes]"'
    if sys.platform.startswith("linux"):
        return (
            "install DeskScribe's notes add-on, the deskscribe-notes package of the same "
            "version (sudo apt install ./deskscribe-notes_VERSION_amd64.deb)"
        )
    return (
        "this build of DeskScribe has no built-in notes model; set Ollama or LM Studio "
        "in Settings > Notes instead"
    )


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server (``base_url`` ends in ``/v1``) and the model to ask."""

    base_url: str
    model: str
    api_key: str = field(default="", repr=False)
    label: str = ""  # what the user is shown: "Ollama on port 11434", "SmolLM2 (embedded)"

    def client(self, timeout: float = 600.0):
        try:
            import openai
        except ImportError as err:  # pragma: no cover - the notes extra installs it
            raise LLMError(f"meeting notes need the openai package: {install_hint()}") from err
        return openai.OpenAI(
            base_url=self.base_url, api_key=self.api_key or "none", timeout=timeout, max_retries=0
        )


def list_models(base_url: str, api_key: str = "", timeout: float = 0.5) -> list[str]:
    """The model ids a server offers (``GET {base_url}/models``); [] when nothing answers."""
    request = urllib.request.Request(base_url.rstrip("/") + "/models")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            body = reply.read(MAX_MODELS_REPLY + 1)
    except (OSError, urllib.error.URLError, ValueError):
        return []
    if len(body) > MAX_MODELS_REPLY:
        return []
    try:
        data = json.loads(body)
    except ValueError:
        return []
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return []
    return [str(m["id"])[:200] for m in items if isinstance(m, dict) and "id" in m][:100]


def discover(ports: dict[int, str] | None = None, timeout: float = 0.3) -> list[Endpoint]:
    """Local servers that answer ``/v1/models`` on 127.0.0.1, one endpoint per model."""
    found: list[Endpoint] = []
    for port, name in (LOOPBACK_PORTS if ports is None else ports).items():
        base = f"http://127.0.0.1:{int(port)}/v1"
        for model in list_models(base, timeout=timeout):
            found.append(Endpoint(base, model, label=f"{name} on port {port}: {model}"))
    return found


def chat_json(
    endpoint: Endpoint,
    messages: list[dict],
    schema: dict,
    *,
    max_tokens: int = 800,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
    name: str = "notes",
) -> dict:
    """The model's reply to ``messages`` as a JSON object following ``schema``; ``on_text``
    gets each piece of the reply as it streams (on this thread), ``cancel`` stops it between
    pieces (``LLMCancelled``); every failure is an ``LLMError`` that names the endpoint."""
    import openai

    client = endpoint.client()
    ask = {
        "model": endpoint.model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    formats = [
        {"type": "json_schema", "json_schema": {"name": name, "schema": schema}},
        None,  # a server that does not take response_format
    ]
    last: Exception | None = None
    for fmt in formats:
        try:
            text = _stream(client, {**ask, **({"response_format": fmt} if fmt else {})},
                           cancel, on_text)  # fmt: skip
        except openai.BadRequestError as err:
            last = err
            continue
        except openai.AuthenticationError as err:
            raise LLMError(
                f"{endpoint.label or endpoint.base_url} refused the API key: check the key "
                "it was given (--api-key-env)"
            ) from err
        except openai.NotFoundError as err:
            raise LLMError(
                f"{endpoint.label or endpoint.base_url} has no model {endpoint.model!r}: "
                "choose one it lists (deskscribe notes --find)"
            ) from err
        except openai.APIConnectionError as err:
            raise LLMError(
                f"no language model answers at {endpoint.base_url}: start it (Ollama, LM "
                "Studio, …), check the address, or use the built-in model (no --url)"
            ) from err
        except openai.APIError as err:
            raise LLMError(f"the language model failed: {str(err)[:300]}") from err
        parsed = _json_object(text)
        if parsed is not None:
            return parsed
        last = LLMError(f"the reply is not the JSON asked for: {text[:160]!r}")
        break  # the server took the format: asking again without it would not help
    raise LLMError(
        f"{endpoint.label or endpoint.model} did not write the {name} in the form asked for "
        f"({str(last)[:200]}); a larger model writes far better notes"
    )


def _stream(client, ask: dict, cancel, on_text) -> str:
    """The streamed reply's text. With ``cancel``, the reply is read on a thread of its own
    and a cancel returns at once (a server can take seconds over one token: a cold start,
    a long prompt); the reader closes the connection at its next piece, and llama.cpp's
    server, like the others, stops generating for a client that has gone."""
    if cancel is None:
        return _read(client, ask, None, on_text)
    box: dict = {}
    finished = threading.Event()

    def reader() -> None:
        try:
            box["text"] = _read(client, ask, cancel, on_text)
        except BaseException as err:  # handed to the caller's thread
            box["error"] = err
        finally:
            finished.set()

    threading.Thread(target=reader, name="llm-reply", daemon=True).start()
    while not finished.wait(0.05):
        if cancel.is_set():
            # Close the client's connections now, so that the server stops generating
            # even while the reader still waits for its first piece.
            threading.Thread(target=client.close, name="llm-close", daemon=True).start()
            raise LLMCancelled("cancelled")
    if "error" in box:
        raise box["error"]
    return box["text"]


def _read(client, ask: dict, cancel, on_text) -> str:
    parts: list[str] = []
    size = 0
    stream = client.chat.completions.create(**ask)
    try:
        for chunk in stream:
            if cancel is not None and cancel.is_set():
                raise LLMCancelled("cancelled")
            piece = chunk.choices[0].delta.content if chunk.choices else None
            if piece:
                parts.append(piece)
                size += len(piece)
                if size > MAX_REPLY_CHARS:
                    raise LLMError(
                        f"the language model wrote more than {MAX_REPLY_CHARS} characters, "
                        "far past what was asked for: it was stopped"
                    )
                if on_text is not None:
                    on_text(piece)
    finally:
        stream.close()
    return "".join(parts)


def _json_object(text: str) -> dict | None:
    """The JSON object in ``text``; a reply cut off at the token limit, or wrapped in a fenced
    block by a server that ignored the format, is mended by json-repair (what it cannot
    read as an object is None)."""
    try:
        value = json.loads(text)
    except ValueError:
        try:
            import json_repair
        except ImportError:  # pragma: no cover - the notes extra installs it
            return None
        try:
            value = json_repair.loads(text)
        except Exception:  # whatever it raises, the reply is not usable
            return None
    return value if isinstance(value, dict) else None
