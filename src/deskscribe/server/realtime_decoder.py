"""One realtime session's engine (``Decoder``), on its own thread: the live policy of the
desktop app (``whisper.streaming.OnlineTranscriber``) turned into OpenAI's Realtime
transcription events. The socket's side (receiving, pacing, sending) is ``realtime.py``."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import DeskScribeError
from ..service.failures import describe_failure
from ..whisper.languages import language_problem
from .errors import ApiError
from .formats import word_logprob
from .realtime_protocol import Settings, beta_session, error_event, ga_session, new_id

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000  # the engine's rate
PIECE = SAMPLE_RATE // 10  # audio is fed to the VAD in 100 ms pieces: one end per piece at most
MIN_COMMIT = SAMPLE_RATE // 10  # OpenAI refuses to commit less than 100 ms


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
            self._fail(describe_failure(e).text)
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
        problem = language_problem(model.tokenizer, new.language)
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
