"""The built-in notes model runs in a child process: starting it, stopping it (even in the
middle of a reply) and loading a model never stall this process's threads (the UI's among
them); it never outlives the app; its API key is never on a command line. Real llama.cpp,
real SmolLM2 GGUF."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import pytest

from deskscribe.llm.embedded import EmbeddedLLM


@contextmanager
def longest_stall() -> Iterator[list[float]]:
    """The longest time a thread that wakes every 10 ms waited, while the block ran."""
    gaps: list[float] = [0.0]
    done = threading.Event()

    def tick() -> None:
        last = time.monotonic()
        while not done.wait(0.01):
            now = time.monotonic()
            gaps[0] = max(gaps[0], now - last)
            last = now

    thread = threading.Thread(target=tick)
    thread.start()
    try:
        yield gaps
    finally:
        done.set()
        thread.join()


def gone(pid: int, timeout: float) -> bool:
    """True once process ``pid`` has ended (or is a zombie nobody reaps), within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_start_stop_and_a_reply_cut_short_never_stall_other_threads(llm_gguf: Path) -> None:
    server = EmbeddedLLM(llm_gguf, threads=2, context=512)
    with longest_stall() as loading:
        endpoint = server.start()
    pid = server.pid
    assert pid is not None and pid != os.getpid()
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert endpoint.api_key.encode() not in cmdline  # settings come through stdin
    client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0)
    stream = client.chat.completions.create(
        model=endpoint.model,
        messages=[{"role": "user", "content": "Count from one to five hundred in words."}],
        max_tokens=400,
        stream=True,
    )
    next(iter(stream))  # it is writing
    with longest_stall() as stopping:
        started = time.monotonic()
        server.stop()
        took = time.monotonic() - started
    assert gone(pid, 5)
    # In this process the binding held the GIL for 1 to 8 s while it loaded a model or joined
    # its threads (3.5 s measured here for this 100 MB model).
    assert loading[0] < 0.5, f"other threads stalled {loading[0]:.2f} s while it started"
    assert stopping[0] < 0.5 and took < 1.0, (stopping[0], took)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_server_never_outlives_the_app(llm_gguf: Path, tmp_path: Path) -> None:
    app = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time\n"
            "from deskscribe.llm.embedded import EmbeddedLLM\n"
            f"s = EmbeddedLLM({str(llm_gguf)!r}, threads=1, context=256)\n"
            "s.start()\n"
            "print(s.pid, flush=True)\n"
            "sys.stdin.read()\n"
        )],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert app.stdout is not None
    child = int(app.stdout.readline())
    assert not gone(child, 0.2)  # serving
    app.send_signal(signal.SIGKILL)  # the app crashes: no code of ours runs
    app.wait()
    assert gone(child, 10), "the llama.cpp child outlived the app"


def test_a_model_that_does_not_load_names_the_file_and_leaves_no_child(tmp_path: Path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_bytes(b"GGUF" + b"\3\0\0\0" + b"\0" * 64)
    server = EmbeddedLLM(bad, threads=1)
    from deskscribe.llm.endpoint import LLMError

    with pytest.raises(LLMError, match=r"notes\.gguf could not be loaded as a language model"):
        server.start()
    assert server.pid is None
