"""The Realtime transcription WebSocket (``GET /v1/realtime?intent=transcription``): OpenAI's
Realtime protocol, so the official SDKs (``client.realtime.connect`` and the older
``client.beta.realtime.connect``) stream microphone audio to a DeskScribe server.

Both shapes of the protocol are spoken: GA (``session.update`` with
``session.audio.input.*``, answered by ``session.created`` / ``session.updated``) and beta
(``transcription_session.update`` with ``input_audio_*``, answered by
``transcription_session.created`` / ``...updated``; a client is taken for beta when it sends
``OpenAI-Beta: realtime=v1``). Audio is base64 pcm16 mono at 24 kHz (16 kHz if the client
asks for it), resampled to 16 kHz with soxr.

The engine is the live policy of the desktop app (``whisper.streaming.OnlineTranscriber``):
its VAD starts and ends items (``speech_started`` / ``speech_stopped`` / ``committed``), words
that two decodes agree on go out as ``...input_audio_transcription.delta`` while the person is
still speaking, and ``...completed`` carries the item's whole text (exactly the deltas
joined). With ``turn_detection: null`` there are no speech events and an item ends when the
client commits. With ``include: ["item.input_audio_transcription.logprobs"]`` deltas and
completed events carry ``logprobs``, per word as the REST API's are. ``noise_reduction`` is
not applied: sessions report it as null, whatever was asked.

Each connection is on its own: its own transcriber, resampler and decoding thread (not the
event loop, and not the REST work pool, so file uploads never hold up a live session); only
the loaded model is shared, read-only. Buffers are bounded both ways: audio waiting for the
decoder (past that the socket is not read, so a fast client is slowed down by TCP, not by
memory), and events waiting for a client that does not read them (past that the session is
closed; other sessions never wait on it). Finished items are forgotten, so a session can run
for hours in constant memory.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging

from fastapi import WebSocket

from .config import bearer, key_matches
from .errors import ApiError
from .realtime_decoder import Decoder
from .realtime_protocol import (
    Settings,
    beta_session,
    clip,
    error_event,
    ga_session,
    invalid,
    new_id,
    parse_beta,
    parse_ga,
)

log = logging.getLogger(__name__)

QUEUED_BYTES = 24000 * 2 * 20  # audio waiting for the decoder (20 s at 24 kHz); then backpressure
MAX_APPEND_SECONDS = 30.0  # audio one append may carry (clients send 20-500 ms)
WS_MAX_BYTES = 4 * 1024 * 1024  # one WebSocket message (uvicorn's ws_max_size): 30 s fits
WS_QUEUE = 4  # messages read ahead of the session (uvicorn's ws_max_queue; its default: 32)
BURST_SECONDS = 60.0  # audio taken at once before the speed limit applies
OUTBOX_EVENTS = 4096  # events waiting for the client; more: it is not reading, so it is closed
OUTBOX_BYTES = 8 * 1024 * 1024  # ... or this much of them
CLIENT_EVENTS = (
    "session.update, transcription_session.update, input_audio_buffer.append, "
    "input_audio_buffer.commit, input_audio_buffer.clear"
)
# Events of OpenAI's conversation sessions: known, but meaningless in a transcription session.
CONVERSATION_EVENTS = frozenset(
    {"conversation.item.create", "conversation.item.delete", "conversation.item.retrieve",
     "conversation.item.truncate", "response.create", "response.cancel",
     "output_audio_buffer.clear"}
)  # fmt: skip


# --------------------------------------------------------------------------- the connection


class Connection:
    """One WebSocket: the event loop's side (receive, validate, queue; send events)."""

    def __init__(self, ws, state) -> None:
        self.ws, self.state = ws, state
        self.loop = asyncio.get_running_loop()
        self.sid = new_id("sess")
        self.outbox: asyncio.Queue = asyncio.Queue()  # JSON text of events to send
        self.outbox_bytes = 0
        self.queued = 0  # bytes of audio the decoder has not taken yet
        self.audio_seconds = 0.0  # taken from the client so far
        self.opened = self.loop.time()
        self.room = asyncio.Event()
        self.room.set()
        self.aborted: tuple[int, str] | None = None
        self.task: asyncio.Task | None = None
        self.decoder: Decoder | None = None
        headers = ws.headers
        offered = list(ws.scope.get("subprotocols") or [])
        self.offered = offered
        self.beta = "realtime=v1" in (headers.get("openai-beta") or "").replace(" ", "") or (
            "openai-beta.realtime-v1" in offered
        )

    # ------------------------------------------------------------------ entry

    async def run(self) -> None:
        await self.ws.accept(subprotocol="realtime" if "realtime" in self.offered else None)
        refusal = self._refusal()
        if refusal is not None:
            close, event = refusal
            with contextlib.suppress(Exception):
                await self.ws.send_text(json.dumps(self._stamp(event)))
                await self.ws.close(code=close, reason=event["error"]["code"])
            return
        state = self.state
        state.sessions += 1  # the loop is the only writer; the drain thread only reads
        state.metrics.sessions.inc()
        self.task = asyncio.current_task()
        sender = asyncio.create_task(self._send_loop())
        try:
            try:
                default_name, _ = await asyncio.to_thread(state.model_folder, None)
            except ApiError:
                default_name = None  # said when audio comes (no model installed)
            self.decoder = Decoder(state, self.sid, self._emit, self._taken, self._died,
                                   default_name)  # fmt: skip
            self.decoder.start()
            body = beta_session if self.beta else ga_session
            kind = "transcription_session.created" if self.beta else "session.created"
            self._post({"type": kind, "session": body(self.sid, Settings(), default_name)})
            await self._receive_loop()
            if self.aborted is not None:  # the loop saw it first: take the abort's cancel now
                await asyncio.sleep(0)
        except asyncio.CancelledError:
            if self.aborted is None:
                raise
            self.task.uncancel()  # our own cancel (``_abort``): close below
        finally:
            state.sessions -= 1
            state.metrics.sessions.dec()
            if self.decoder is not None:
                self.decoder.stopped.set()
                self.decoder.inbox.put(("stop",))
            sender.cancel()
            if self.aborted is not None:
                await self._close(*self.aborted)

    async def _close(self, code: int, reason: str) -> None:
        """Close with ``code``, waiting up to 5 s. A client that reads nothing cannot take the
        close frame either, and the WebSocket library would hold its socket open, with our
        events queued in it, until it did: such a connection is reset instead."""
        closing = asyncio.ensure_future(self.ws.close(code=code, reason=reason))
        wait = 0.0 if reason == "client_not_reading" else 5.0
        done, _ = await asyncio.wait({closing}, timeout=wait)
        if closing in done and not closing.exception():
            return
        watch = self.state.connections
        if watch is not None:
            watch.abort(self.ws.scope.get("client"))
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(closing), 5)

    def _refusal(self) -> tuple[int, dict] | None:
        """(close code, error event) when this connection may not have a session."""
        state, ws = self.state, self.ws
        if state.config.key_hashes and not key_matches(self._key(), state.config.key_hashes):
            given = self._key() is not None
            return 1008, error_event(
                "incorrect API key provided" if given else "missing API key: send "
                "`Authorization: Bearer KEY` (or the subprotocol openai-insecure-api-key.KEY)",
                code="invalid_api_key", type="invalid_request_error")  # fmt: skip
        intent = ws.query_params.get("intent")
        if intent != "transcription":
            return 1008, error_event(
                f"this server offers transcription sessions only: connect to "
                f"/v1/realtime?intent=transcription (got intent={intent!r})",
                code="unsupported_intent", param="intent")  # fmt: skip
        if state.draining:
            return 1013, error_event(
                "the server is shutting down; reconnect to another server or later",
                code="draining", type="server_error")  # fmt: skip
        if state.sessions >= state.config.max_sessions:
            return 1013, error_event(
                f"this server already runs {state.sessions} realtime sessions, its limit; "
                "retry later", code="session_limit", type="rate_limit_error")  # fmt: skip
        return None

    def _key(self) -> str | None:
        key = bearer(self.ws.headers)
        if key:
            return key
        for proto in self.offered:  # browsers cannot set headers: the key rides as a protocol
            if proto.startswith("openai-insecure-api-key."):
                return proto.split(".", 1)[1] or None
        return None

    # ------------------------------------------------------------------ receiving

    async def _receive_loop(self) -> None:
        idle = self.state.config.realtime_idle_seconds or None
        # ``aborted`` is checked as well as the task's cancel: Python 3.11's wait_for can
        # swallow a cancel that lands as the message arrives, and the session would go on.
        while self.aborted is None:
            try:
                message = await asyncio.wait_for(self.ws.receive(), idle)
            except TimeoutError:
                log.info("realtime session %s: nothing received for %g s; closing", self.sid, idle)
                self._post(error_event(
                    f"the session was closed: no events for {idle:g} s (audio, or any other "
                    "event, keeps it open)", code="idle_timeout",
                ))  # fmt: skip
                await self._flush()
                self.aborted = (1000, "idle_timeout")  # closed on the way out of run()
                return
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                self._post(error_event("send events as JSON text frames, not binary",
                                       code="invalid_json"))  # fmt: skip
                continue
            await self._handle(text)

    async def _handle(self, text: str) -> None:
        try:
            event = json.loads(text)
        except ValueError as e:
            self._post(error_event(f"the event is not valid JSON: {e}", code="invalid_json"))
            return
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self._post(error_event("an event is a JSON object with a string \"type\"",
                                   code="invalid_value", param="type"))  # fmt: skip
            return
        kind = event["type"]
        cid = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        try:
            if kind == "input_audio_buffer.append":
                await self._append(event, cid)
            elif kind in ("session.update", "transcription_session.update"):
                parse = parse_ga if kind == "session.update" else parse_beta
                if "session" not in event:
                    raise invalid("missing required parameter: session", "session",
                                   "missing_required_parameter")  # fmt: skip
                self.decoder.inbox.put(("update", parse(event["session"]), kind, cid))
            elif kind == "input_audio_buffer.commit":
                self.decoder.inbox.put(("commit", cid))
            elif kind == "input_audio_buffer.clear":
                self.decoder.inbox.put(("clear",))
            elif kind in CONVERSATION_EVENTS:
                raise invalid(f"{kind} is not supported in a transcription session; this "
                               f"server takes {CLIENT_EVENTS}", "type")  # fmt: skip
            else:
                raise invalid(f"unknown event type {clip(kind)!r}; this server takes "
                               f"{CLIENT_EVENTS}", "type", "unknown_event_type")  # fmt: skip
        except ApiError as e:
            self._post(error_event(e.message, code=e.code, param=e.param, client_event_id=cid))

    async def _append(self, event: dict, cid: str | None) -> None:
        audio = event.get("audio")
        if not isinstance(audio, str):
            raise invalid("missing required parameter: audio (base64 pcm16)", "audio",
                           "missing_required_parameter")  # fmt: skip
        try:
            pcm = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise invalid("audio is not valid base64 (it should be base64-encoded pcm16 "
                           "mono little-endian samples)", "audio", "invalid_base64") from None  # fmt: skip
        if len(pcm) % 2:
            raise invalid(f"audio has {len(pcm)} bytes, an odd number: pcm16 samples are 2 "
                           "bytes each", "audio", "invalid_audio")  # fmt: skip
        if not pcm:
            return
        seconds = len(pcm) / 2 / self.decoder.settings.rate
        if seconds > MAX_APPEND_SECONDS:
            raise invalid(f"one append carries {seconds:.0f} s of audio; send at most "
                           f"{MAX_APPEND_SECONDS:g} s per append (clients send 20-500 ms)",
                           "audio", "invalid_audio")  # fmt: skip
        await self._pace(seconds)
        # Backpressure: while the decoder holds this much, stop reading the socket.
        while self.queued and self.queued + len(pcm) > QUEUED_BYTES:
            self.room.clear()
            await self.room.wait()
        self.queued += len(pcm)
        self.decoder.inbox.put(("audio", pcm))

    async def _pace(self, seconds: float) -> None:
        """Take audio no faster than ``realtime_max_speed`` times real time once the first
        ``BURST_SECONDS`` are in: the socket is not read meanwhile, so a client streaming an
        hour in a minute is slowed down by TCP, not buffered, and a session's decoding cost
        follows real time."""
        speed = self.state.config.realtime_max_speed
        self.audio_seconds += seconds
        allowed = BURST_SECONDS + speed * (self.loop.time() - self.opened)
        if self.audio_seconds > allowed:
            await asyncio.sleep((self.audio_seconds - allowed) / speed)

    def _taken(self, n: int) -> None:  # decoder thread
        self._threadsafe(self._release, n)

    def _died(self) -> None:  # decoder thread
        self._threadsafe(self._abort, 1011, "server_error")

    def _release(self, n: int) -> None:
        self.queued -= n
        self.room.set()

    # ------------------------------------------------------------------ sending

    def _emit(self, event: dict) -> None:  # decoder thread
        self._threadsafe(self._post, event)

    def _threadsafe(self, fn, *args) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: the server is stopping
            self.loop.call_soon_threadsafe(fn, *args)

    @staticmethod
    def _stamp(event: dict) -> dict:
        return {"event_id": new_id("event"), **event}

    def _post(self, event: dict) -> None:
        if self.aborted is not None:
            return
        text = json.dumps(self._stamp(event))
        if self.outbox.qsize() >= OUTBOX_EVENTS or self.outbox_bytes + len(text) > OUTBOX_BYTES:
            log.warning("realtime session %s: the client does not read its events; closing",
                        self.sid)  # fmt: skip
            self._abort(1008, "client_not_reading")
            return
        self.outbox_bytes += len(text)
        self.outbox.put_nowait(text)

    def _abort(self, code: int, reason: str) -> None:
        if self.aborted is None:
            self.aborted = (code, reason)
            if self.task is not None:
                self.task.cancel()

    async def _flush(self, timeout: float = 5.0) -> None:
        """Wait (a little) until the events posted so far have been sent."""
        deadline = self.loop.time() + timeout
        while not self.outbox.empty() and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)  # the last one taken may still be on its way

    async def _send_loop(self) -> None:
        while True:
            text = await self.outbox.get()
            self.outbox_bytes -= len(text)
            try:
                await self.ws.send_text(text)
            except Exception:  # the client went away; the receive loop ends the session
                return


def mount(app, state) -> None:
    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        await Connection(websocket, state).run()
