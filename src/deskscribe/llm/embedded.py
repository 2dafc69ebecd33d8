"""The built-in language model: llama.cpp's own server running a GGUF file, inside this
process, on 127.0.0.1 at a port the system picks, behind a random API key.

The binding is ``xllamacpp`` (MIT): wheels on PyPI for Linux, Windows and macOS (Metal on
Apple silicon) with no Python dependencies, and it runs llama.cpp's server, so the embedded
model and Ollama or LM Studio are reached by the same OpenAI-compatible client code and the
chat template is the one the GGUF carries. llama-cpp-python is source-only on PyPI (a C++
build at install); llama-cpp-cffi is Linux-only and pulls transformers and an old
huggingface-hub (docs/architecture.md "Notes").
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import urllib.request
from pathlib import Path

from ..errors import Cancelled
from .endpoint import Endpoint, LLMError, install_hint

IDLE_WAIT_S = 15.0  # how long a stop in the background waits for a reply to end


class EmbeddedLLM:
    """``with EmbeddedLLM(path) as endpoint:`` a running server and the endpoint to ask."""

    def __init__(
        self,
        gguf: Path,
        *,
        context: int = 8192,
        threads: int | None = None,
        gpu_layers: int = -1,  # all that fit, where the build has a GPU backend
        label: str = "",
    ) -> None:
        self.gguf = Path(gguf)
        self.context = context
        self.threads = threads or max(1, min(8, (os.cpu_count() or 2)))
        self.gpu_layers = gpu_layers
        self.label = label or f"{self.gguf.stem} (built in)"
        self._server = None
        self._key = ""
        self._lock = threading.Lock()

    def start(self) -> Endpoint:
        with self._lock:
            if not self.gguf.is_file():
                raise LLMError(
                    f"the notes model {self.gguf} is missing: install one with "
                    "`deskscribe models install-starter --which llm`, or give a GGUF chat model"
                )
            try:
                import xllamacpp
            except ImportError as err:
                raise LLMError(
                    f"the built-in notes model needs llama.cpp's binding: {install_hint()}"
                ) from err
            key = self._key = secrets.token_urlsafe(24)
            p = xllamacpp.CommonParams()
            p.model.path = str(self.gguf)
            p.n_ctx = self.context
            p.n_gpu_layers = self.gpu_layers
            p.cpuparams.n_threads = self.threads
            p.cpuparams_batch.n_threads = self.threads
            p.hostnames = ["127.0.0.1"]
            p.port = 0
            p.api_keys = [key]
            p.ui = False
            p.cors_origins = "http://127.0.0.1"
            p.n_parallel = 1
            p.verbosity = 0  # llama.cpp's own log: errors only (our messages say the rest)
            try:
                self._server = xllamacpp.Server(p)
            except Exception as err:  # the binding raises RuntimeError and others
                raise LLMError(
                    f"{self.gguf.name} could not be loaded as a language model "
                    f"({str(err).splitlines()[0][:200] if str(err) else type(err).__name__}): "
                    "it is damaged or not a GGUF chat model; install it again"
                ) from err
            base = str(self._server.listening_address).rstrip("/")
            return Endpoint(base + "/v1", self.gguf.stem, api_key=key, label=self.label)

    def stop(self, wait: bool = True) -> None:
        """Stop the server (the binding stops it when the object goes, which takes about a
        second); ``wait=False`` lets that happen on a thread of its own, once the server has
        stopped writing a reply. The binding's destructor holds the GIL while it joins the
        server's threads: dropped while a cancelled reply is still being written (before
        llama.cpp has seen the client go, which needs the GIL too), it froze every thread,
        the UI's included, until the reply's last token (3 to 6 s measured)."""
        with self._lock:
            holder = [self._server] if self._server is not None else []
            self._server = None
        if holder and not wait:  # the thread holds the last reference, and drops it
            base, key = str(holder[0].listening_address).rstrip("/"), self._key

            def drop() -> None:
                _wait_idle(base, key, IDLE_WAIT_S)
                holder.clear()

            threading.Thread(target=drop, name="llm-stop", daemon=True).start()
        else:
            holder.clear()

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        # After a cancel the user is waiting: the server goes in the background.
        self.stop(wait=not (exc_type is not None and issubclass(exc_type, Cancelled)))


def _wait_idle(base: str, key: str, timeout: float) -> None:
    """Until the llama.cpp server at ``base`` writes no reply (its ``/slots``), at most
    ``timeout`` seconds; waiting on a socket, so other threads run meanwhile."""
    deadline = time.monotonic() + timeout
    ask = urllib.request.Request(f"{base}/slots", headers={"Authorization": f"Bearer {key}"})
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(ask, timeout=2) as reply:
                if not any(slot.get("is_processing") for slot in json.load(reply)):
                    return
        except (OSError, ValueError, AttributeError, TypeError):
            time.sleep(1.0)  # no /slots on this build: a second for the reply to stop
            return
        time.sleep(0.1)
