"""A real ``deskscribe serve`` in its own process, for the server tests: its own model store
(the test models, linked), data folder and port; started, waited for, stopped by signal.

The tests talk to it only through the clients people use (the official ``openai`` SDK, plain
HTTP for what the SDK does not cover)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx2 as httpx

HEALTH_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_store(root: Path, models: dict[str, Path]) -> Path:
    """A model store holding ``models`` (store name -> built folder), linked, not copied."""
    store = root / "models"
    store.mkdir(parents=True, exist_ok=True)
    for name, folder in models.items():
        link = store / name
        if not link.exists():
            link.symlink_to(folder, target_is_directory=True)
    return store


@dataclass
class Served:
    proc: subprocess.Popen
    port: int
    store: Path
    data: Path
    log: Path
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/v1"

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def serve(
    store: Path,
    data: Path,
    *args: str,
    port: int | None = None,
    env: dict[str, str] | None = None,
    wait: bool = True,
    files_limit: int | None = None,
) -> Served:
    """Start ``deskscribe serve --port P ARGS...`` on loopback and wait until /health answers.
    ``files_limit``: the process's open-file limit (soft and hard, as ``ulimit -n``)."""
    port = port or free_port()
    data.mkdir(parents=True, exist_ok=True)
    log = data / f"server-{port}-{time.monotonic_ns()}.log"
    full_env = {
        **os.environ,
        "DESKSCRIBE_MODELS_DIR": str(store),
        "DESKSCRIBE_DATA_DIR": str(data),
        "DESKSCRIBE_SETTINGS": str(data / "settings.json"),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    cmd = [sys.executable, "-m", "deskscribe", "serve", "--port", str(port), *args]

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (files_limit, files_limit))

    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=full_env, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=limit if files_limit else None)  # fmt: skip
    served = Served(proc, port, store, data, log, tuple(args), env or {})
    if wait:
        wait_healthy(served)
    return served


def wait_healthy(served: Served, timeout: float = HEALTH_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            raise AssertionError(
                f"the server exited ({served.proc.returncode}):\n{served.output()}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(served.url + "/health", timeout=2).status_code in (200, 503):
                return
        time.sleep(0.2)
    served.stop()
    raise AssertionError(
        f"the server did not answer /health in {timeout:.0f} s:\n{served.output()}"
    )


def restart(served: Served) -> Served:
    """The same server (port, store, data, arguments) started again."""
    return serve(served.store, served.data, *served.args, port=served.port, env=served.env)


def transcribing(client, path: Path, served: Served, counted: str = "running"):
    """A transcription of ``path`` with the openai ``client`` on a thread, returned once the
    server's /health counts it (``counted``: "running" on a worker, "inflight" anywhere):
    (the thread, a dict that gets its "text" or the "error" raised)."""
    answer: dict = {}

    def transcribe() -> None:
        try:
            with open(path, "rb") as fh:
                answer["text"] = client.audio.transcriptions.create(model="whisper-1", file=fh).text
        except Exception as e:  # the caller's assertions report it
            answer["error"] = e

    worker = threading.Thread(target=transcribe)
    worker.start()
    deadline = time.monotonic() + 60
    while httpx.get(served.url + "/health", timeout=10).json()[counted] < 1:
        assert time.monotonic() < deadline and "error" not in answer, answer
        time.sleep(0.02)
    return worker, answer
