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
import queue
import threading
from dataclasses import dataclass, field

import numpy as np
from fastapi import WebSocket

from ..errors import DeskScribeError
from .config import bearer, key_matches
from .errors import ApiError
from .formats import word_logprob
from .realtime_protocol import (
    Settings,
    beta_session,
    error_event,
    ga_session,
    invalid,
    new_id,
    parse_beta,
    parse_ga,
)

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # the engine's rate
PIECE = SAMPLE_RATE // 10  # audio is fed to the VAD in 100 ms pieces: one end per piece at most
MIN_COMMIT = SAMPLE_RATE // 10  # OpenAI refuses to commit less than 100 ms
QUEUED_BYTES = 24000 * 2 * 20  # audio waiting for the decoder (20 s at 24 kHz); then backpressure
OUTBOX_EVENTS = 4096  # events waiting for the client; more: it is not reading, so it is closed
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


@dataclass
class Item:
    id: str
    start: int  # session sample (16 kHz) where its audio starts
    text: str = ""
    logprobs: list = field(default_factory=list)  # per word, when the session includes them


class Decoder(threading.Thread):
    """One session's engine, on its own thread: takes commands from ``inbox`` in order
    (audio, commit, clear, update, stop) and reports protocol events through ``emit``
    (thread-safe; never blocks)."""

    def __init__(self, state, sid: str, emit, taken, abort, default_name: str | None):
        super().__init__(name=f"realtime-{sid[-6:]}", daemon=True)
        self.state, self.sid = state, sid
        self.emit, self.taken = emit, taken  # taken(n): n bytes of queued audio consumed
        self.abort = abort  # the thread cannot go on: the connection is closed
        self.default_name = default_name
        self.inbox: queue.Queue = queue.Queue()  # bounded by the loop's byte budget
        self.stopped = threading.Event()
        self.settings = Settings()
        self.model = None
        self.model_key: tuple | None = None  # (requested name, folder) of self.model
        self.transcriber = None
        self.resampler = None
        self.offset = 0  # session samples before the current transcriber's first one
        self.uncommitted = 0  # samples since the last commit, clear or VAD end
        self.item: Item | None = None
        self.previous: str | None = None  # the last committed item's id
        self.emitted: dict[int, int] = {}  # open segment id -> its words already sent
        self.load_failed = False  # reported once; audio is dropped until an update

    # ------------------------------------------------------------------ loop

    def run(self) -> None:
        try:
            while not self.stopped.is_set():
                batch = [self.inbox.get()]
                with contextlib.suppress(queue.Empty):
                    while True:
                        batch.append(self.inbox.get_nowait())
                fed = 0
                for cmd in batch:
                    if cmd[0] == "stop" or self.stopped.is_set():
                        return
                    fed += self._guarded(cmd)
                if fed and self.transcriber is not None:
                    # More than two steps of audio came in during the last pass: behind real
                    # time, so skip the tentative pass; utterance ends still commit the text.
                    step = self.transcriber.step_samples  # grows while passes are slow
                    self._guarded(("process", fed <= 2 * step))
        except Exception:
            log.exception("realtime session %s failed", self.sid)
            self.emit(error_event("the transcription engine failed; see the server log",
                                  type="server_error", code="server_error"))  # fmt: skip
            self.abort()
        finally:
            self.stopped.set()

    def _guarded(self, cmd) -> int:
        """Run one command; a failure ends the current item (``failed``), not the session."""
        kind = cmd[0]
        try:
            if kind == "audio":
                return self._audio(cmd[1])
            if kind == "process":
                self._words(self.transcriber.process(interim=cmd[1]))
            elif kind == "commit":
                self._commit(cmd[1])
            elif kind == "clear":
                self._clear()
            elif kind == "update":
                self._update(*cmd[1:])
        except Exception as e:
            log.exception("realtime session %s: %s failed", self.sid, kind)
            self._fail(f"{type(e).__name__}: {e}"[:300])
        finally:
            if kind == "audio":
                self.taken(len(cmd[1]))
        return 0

    # ------------------------------------------------------------------ commands

    def _audio(self, pcm: bytes) -> int:
        if not self._ready():
            return 0
        self.state.metrics.audio_seconds.labels("realtime").inc(len(pcm) / 2 / self.settings.rate)
        x = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        if self.resampler is not None:
            x = self.resampler.resample_chunk(x)
        self._feed(x)
        return x.shape[0]

    def _feed(self, x: np.ndarray) -> None:
        t = self.transcriber
        for i in range(0, x.shape[0], PIECE):
            piece = x[i : i + PIECE]
            if self.settings.vad is None and self.item is None:
                self.item = Item(new_id("item"), self.offset + t.total)
            changes = t.add_audio(piece)
            self.uncommitted += piece.shape[0]
            if self.settings.vad is None:
                continue  # the transcriber's VAD still shapes its passes; items are the client's
            for kind, at in changes:
                if kind == "start":
                    self._speech_started(at)
                else:
                    self._speech_stopped(at)

    def _speech_started(self, at: int) -> None:
        if self.item is not None:  # a start without an end (cannot happen; be safe)
            self._complete([])
        pad = self.transcriber.options.speech_pad_ms * SAMPLE_RATE // 1000
        start = self.offset + max(0, at - pad)
        self.item = Item(new_id("item"), start)
        self.emit({"type": "input_audio_buffer.speech_started",
                   "audio_start_ms": _ms(start), "item_id": self.item.id})  # fmt: skip

    def _speech_stopped(self, at: int) -> None:
        t = self.transcriber
        pad = t.options.speech_pad_ms * SAMPLE_RATE // 1000
        end = min(at + pad, t.total)
        if self.item is None:
            self.item = Item(new_id("item"), self.offset + at)
        self.emit({"type": "input_audio_buffer.speech_stopped",
                   "audio_end_ms": _ms(self.offset + end), "item_id": self.item.id})  # fmt: skip
        self._committed()
        self.uncommitted = max(0, t.total - end)
        # The utterance's last pass, now: its words are this item's, none of the next one's.
        self._complete(self._new_words(t.process(interim=False)), end=self.offset + end)

    def _commit(self, client_event_id: str | None) -> None:
        if not self._ready():
            return
        if self.resampler is not None:  # the resampler's tail, then it starts afresh
            tail = self.resampler.resample_chunk(np.zeros(0, np.float32), last=True)
            self.resampler.clear()
            self._feed(tail)
        if self.uncommitted < MIN_COMMIT and (self.item is None or self.settings.vad is None):
            self.emit(error_event(
                f"Error committing input audio buffer: buffer too small. Expected at least "
                f"100ms of audio, but buffer only has {_ms(self.uncommitted):.2f}ms of audio.",
                code="input_audio_buffer_commit_empty", client_event_id=client_event_id))  # fmt: skip
            return
        t = self.transcriber
        if self.item is None:
            self.item = Item(new_id("item"), self.offset + t.total - self.uncommitted)
        self._committed()
        self.uncommitted = 0
        self._complete(self._new_words(t.finish()), end=self.offset + t.total)

    def _clear(self) -> None:
        """Drop audio not yet committed: the item being spoken (its deltas stand, it gets
        no ``completed``) and the transcriber's buffer."""
        self.item = None
        self.uncommitted = 0
        if self.transcriber is not None:
            self._rebuild()
        self.emit({"type": "input_audio_buffer.cleared"})

    def _update(self, patch: dict, kind: str, client_event_id: str | None) -> None:
        new = self.settings.apply(patch)
        try:
            model, key, name = self._load(new)
        except ApiError as e:
            self.emit(error_event(e.message, code=e.code, param=_param(e.param, kind),
                                  client_event_id=client_event_id))  # fmt: skip
            return
        problem = _language_problem(model, new.language)
        if problem:
            param = "session.audio.input.transcription.language" if kind == "session.update" \
                else "session.input_audio_transcription.language"  # fmt: skip
            self.emit(error_event(problem, code="invalid_value", param=param,
                                  client_event_id=client_event_id))  # fmt: skip
            return
        old = self.settings
        engine = self.transcriber is None or key != self.model_key or new.changes_engine(old)
        if engine and self.item is not None:  # a new configuration starts a new item
            self._commit(None)
        self.settings, self.model, self.model_key, self.load_failed = new, model, key, False
        self.default_name = name if new.model is None else self.default_name
        if engine:
            self._rebuild()
        elif new.rate != old.rate:
            self._new_resampler()
        body = beta_session if kind == "transcription_session.update" else ga_session
        self.emit({"type": kind.replace(".update", ".updated"),
                   "session": body(self.sid, new, self.default_name)})  # fmt: skip

    # ------------------------------------------------------------------ engine

    def _load(self, s: Settings):
        """(model, key, name) for the settings; ``ApiError`` when it cannot be had."""
        name, folder = self.state.model_folder(s.model)
        key = (s.model, str(folder))
        if key == self.model_key and self.model is not None:
            return self.model, key, name
        try:
            return self.state.models.model(str(folder), self.state.config.device), key, name
        except DeskScribeError as e:
            raise ApiError(500, f"the model {name!r} cannot be loaded on this server: {e}",
                           param="model", code="model_unavailable") from None  # fmt: skip

    def _ready(self) -> bool:
        """A transcriber to feed (the model loads on first use); False when it cannot load."""
        if self.transcriber is not None:
            return True
        if self.load_failed:
            return False
        try:
            self.model, self.model_key, _ = self._load(self.settings)
        except ApiError as e:
            self.load_failed = True
            self.emit(error_event(e.message + " (the audio is dropped until a session update "
                                  "names a model that works)", code=e.code,
                                  param=_param(e.param, "session.update")))  # fmt: skip
            return False
        self._rebuild()
        return True

    def _rebuild(self) -> None:
        from ..whisper.streaming import OnlineTranscriber

        if self.transcriber is not None:
            self.offset += self.transcriber.total
        self.transcriber = OnlineTranscriber(self.model, self.settings.streaming())
        self.emitted.clear()
        self._new_resampler()

    def _new_resampler(self) -> None:
        import soxr

        rate = self.settings.rate
        self.resampler = (
            None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, "float32")
        )

    # ------------------------------------------------------------------ items

    def _new_words(self, update) -> list:
        """Words the update committed that were not sent yet (segments grow word by word)."""
        words = []
        for seg in update.segments:
            words += seg.words[self.emitted.get(seg.id, 0) :]
            if seg.id == update.open_id:
                self.emitted[seg.id] = len(seg.words)
            else:
                self.emitted.pop(seg.id, None)  # closed: never reported again
        return words

    def _words(self, update) -> None:
        """An interim pass: newly committed words are deltas of the item being spoken."""
        words = self._new_words(update)
        if words and self.item is None:  # committed outside speech (VAD edge): its own item
            self.item = Item(new_id("item"), self.offset + int(words[0].start * SAMPLE_RATE))
        self._delta(words)

    def _delta(self, words) -> None:
        if not words:
            return
        text = "".join(w.text for w in words)
        if not self.item.text:
            text = text.lstrip()
        if text:
            self.item.text += text
            event = {"type": "conversation.item.input_audio_transcription.delta",
                     "item_id": self.item.id, "content_index": 0, "delta": text}  # fmt: skip
            if self.settings.logprobs:
                event["logprobs"] = [word_logprob(w) for w in words]
                self.item.logprobs += event["logprobs"]
            self.emit(event)

    def _committed(self) -> None:
        self.emit({"type": "input_audio_buffer.committed", "item_id": self.item.id,
                   "previous_item_id": self.previous})  # fmt: skip
        self.previous = self.item.id

    def _complete(self, words, end: int | None = None) -> None:
        item = self.item
        self._delta(words)
        end = end if end is not None else self.offset + self.transcriber.total
        event = {"type": "conversation.item.input_audio_transcription.completed",
                 "item_id": item.id, "content_index": 0, "transcript": item.text,
                 "usage": {"type": "duration",
                           "seconds": round(max(0, end - item.start) / SAMPLE_RATE, 3)}}  # fmt: skip
        if self.settings.logprobs:
            event["logprobs"] = item.logprobs
        self.emit(event)
        self.item = None
        self.transcriber.forget_segments()  # sent: nothing of it needs to stay

    def _fail(self, message: str) -> None:
        """A pass failed: the item in progress is reported failed and the engine restarts."""
        if self.item is not None:
            self.emit({"type": "conversation.item.input_audio_transcription.failed",
                       "item_id": self.item.id, "content_index": 0,
                       "error": {"type": "server_error", "code": "transcription_failed",
                                 "message": f"transcription failed: {message}",
                                 "param": None}})  # fmt: skip
            self.item = None
        else:
            self.emit(error_event(f"transcription failed: {message}", type="server_error",
                                  code="transcription_failed"))  # fmt: skip
        if self.model is not None:
            with contextlib.suppress(Exception):
                self._rebuild()


def _ms(samples: int) -> int:
    return int(samples * 1000 // SAMPLE_RATE)


def _param(param: str | None, kind: str) -> str | None:
    if param != "model":
        return param
    if kind == "transcription_session.update":
        return "session.input_audio_transcription.model"
    return "session.audio.input.transcription.model"


def _language_problem(model, language: str | None) -> str | None:
    tk = model.tokenizer
    if not language:
        return None
    if not tk.multilingual and language != "en":
        return (f"this server's model is English-only; it cannot transcribe {language!r}. "
                "Name a multilingual model, or leave the language out")  # fmt: skip
    if tk.multilingual and language not in tk.language_ids:
        return (f"unknown language {language!r}; use an ISO-639-1 code such as "
                f"{', '.join(sorted(tk.language_ids)[:12])}, …")  # fmt: skip
    return None


# --------------------------------------------------------------------------- the connection


class Connection:
    """One WebSocket: the event loop's side (receive, validate, queue; send events)."""

    def __init__(self, ws, state) -> None:
        self.ws, self.state = ws, state
        self.loop = asyncio.get_running_loop()
        self.sid = new_id("sess")
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.queued = 0  # bytes of audio the decoder has not taken yet
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
                code, reason = self.aborted
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self.ws.close(code=code, reason=reason), 5)

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
        while True:
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
                raise invalid(f"unknown event type {kind!r}; this server takes {CLIENT_EVENTS}",
                               "type", "unknown_event_type")  # fmt: skip
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
        # Backpressure: while the decoder holds this much, stop reading the socket.
        while self.queued and self.queued + len(pcm) > QUEUED_BYTES:
            self.room.clear()
            await self.room.wait()
        self.queued += len(pcm)
        self.decoder.inbox.put(("audio", pcm))

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
        if self.outbox.qsize() >= OUTBOX_EVENTS:
            log.warning("realtime session %s: the client does not read its events; closing",
                        self.sid)  # fmt: skip
            self._abort(1008, "client_not_reading")
            return
        self.outbox.put_nowait(self._stamp(event))

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
            event = await self.outbox.get()
            try:
                await self.ws.send_text(json.dumps(event))
            except Exception:  # the client went away; the receive loop ends the session
                return


def mount(app, state) -> None:
    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        await Connection(websocket, state).run()
