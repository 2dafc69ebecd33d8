"""The built-in language model: llama.cpp's own server running a GGUF file in a child
process, on 127.0.0.1 at a port the system picks, behind a random API key.

The binding is ``xllamacpp`` (MIT): wheels on PyPI for Linux, Windows and macOS (Metal on
Apple silicon) with no Python dependencies, and it runs llama.cpp's server, so the embedded
model and Ollama or LM Studio are reached by the same OpenAI-compatible client code and the
chat template is the one the GGUF carries. llama-cpp-python is source-only on PyPI (a C++
build at install); llama-cpp-cffi is Linux-only and pulls transformers and an old
huggingface-hub (docs/architecture.md "Notes").

Why a child process (``deskscribe --llm-server``, the same program): the binding holds the
GIL while it loads a model and while its destructor joins the server's threads, which froze
every thread of the app, the UI's included, for 1 s (a 135M model, quiet machine) to 8 s
(loaded machine, or a reply still being written). In a child it freezes nothing of ours, a
stop is a signal, and a crash in llama.cpp ends the child, not the app. The child reads its
settings (the API key included: never on a command line) from its stdin, answers one JSON
line with the address or an error, and ends when its stdin closes, so it never outlives the
app.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from .endpoint import Endpoint, LLMError, install_hint

CHILD_FLAG = "--llm-server"  # ``deskscribe --llm-server``: runs ``serve_child``
STOP_WAIT_S = 3.0  # after SIGTERM, before SIGKILL


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
        self._child: subprocess.Popen | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    def start(self) -> Endpoint:
        with self._lock:
            if not self.gguf.is_file():
                raise LLMError(
                    f"the notes model {self.gguf} is missing: install one with "
                    "`deskscribe models install-starter --which llm`, or give a GGUF chat model"
                )
            import importlib.util

            if importlib.util.find_spec("xllamacpp") is None:
                raise LLMError(
                    f"the built-in notes model needs llama.cpp's binding: {install_hint()}"
                )
            key = secrets.token_urlsafe(24)
            settings = {
                "gguf": str(self.gguf),
                "context": self.context,
                "threads": self.threads,
                "gpu_layers": self.gpu_layers,
                "key": key,
            }
            me = [sys.executable] if getattr(sys, "frozen", False) else [sys.executable, "-m",
                                                                         "deskscribe"]  # fmt: skip
            with tempfile.TemporaryFile() as log:  # llama.cpp's messages, read if it fails
                child = subprocess.Popen(
                    [*me, CHILD_FLAG],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0),
                )
                try:
                    assert child.stdin is not None and child.stdout is not None
                    child.stdin.write(json.dumps(settings) + "\n")
                    child.stdin.flush()
                    answer = child.stdout.readline()  # blocking: the GIL is free meanwhile
                    reply = json.loads(answer) if answer.strip() else {}
                except (OSError, ValueError):
                    reply = {}
                if "address" not in reply:
                    _end(child)
                    log.seek(0)
                    tail = log.read()[-400:].decode("utf-8", "replace").strip()
                    raise LLMError(
                        reply.get("error")
                        or f"the built-in notes model stopped while starting ({tail or 'no message'})"
                    )
            self._child = child
            base = str(reply["address"]).rstrip("/")
            return Endpoint(base + "/v1", self.gguf.stem, api_key=key, label=self.label)

    def stop(self, wait: bool = True) -> None:
        """Stop the server: its stdin is closed and it is signalled; ``wait=False`` reaps it
        on a thread of its own (a stop never waits on a reply being written)."""
        with self._lock:
            child, self._child = self._child, None
        if child is None:
            return
        if wait:
            _end(child)
        else:
            threading.Thread(target=_end, args=(child,), name="llm-stop", daemon=True).start()

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(wait=exc_type is None)


def _end(child: subprocess.Popen) -> None:
    for stream in (child.stdin, child.stdout):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


# --------------------------------------------------------------------------- the child


def serve_child() -> int:
    """``deskscribe --llm-server``: read the settings line from stdin, start llama.cpp's server,
    print ``{"address": URL}`` (or ``{"error": message}``), and serve until stdin closes."""
    settings = json.loads(sys.stdin.readline() or "{}")
    gguf = Path(settings.get("gguf", ""))

    def answer(**reply: str) -> None:
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()

    try:
        import xllamacpp
    except ImportError:
        answer(error=f"the built-in notes model needs llama.cpp's binding: {install_hint()}")
        return 1
    p = xllamacpp.CommonParams()
    p.model.path = str(gguf)
    p.n_ctx = int(settings.get("context", 8192))
    p.n_gpu_layers = int(settings.get("gpu_layers", -1))
    threads = int(settings.get("threads", 2))
    p.cpuparams.n_threads = threads
    p.cpuparams_batch.n_threads = threads
    p.hostnames = ["127.0.0.1"]
    p.port = 0
    p.api_keys = [str(settings.get("key") or secrets.token_urlsafe(24))]
    p.ui = False
    p.cors_origins = "http://127.0.0.1"
    p.n_parallel = 1
    p.verbosity = 0  # llama.cpp's own log: errors only (our messages say the rest)
    try:
        server = xllamacpp.Server(p)
    except Exception as err:  # the binding raises RuntimeError and others
        first = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        answer(
            error=f"{gguf.name} could not be loaded as a language model ({first}): it is "
            "damaged or not a GGUF chat model; install it again"
        )
        return 1
    answer(address=str(server.listening_address))
    sys.stdin.read()  # until the app closes it, or ends
    os._exit(0)  # at once: the binding's destructor would join the server's threads first
