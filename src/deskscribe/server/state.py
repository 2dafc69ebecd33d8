"""What one running server holds: its settings, the model cache, the work pool, the metrics,
and whether it is draining. Created once per app (``app.create_app``); tests create several.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import DeskScribeError
from ..models.store import ModelNotInstalledError, list_models, resolve_model
from ..service.models import ModelCache
from ..whisper.shared_batches import SharedBatches
from .config import ServerConfig
from .errors import ApiError
from .metrics import Metrics

log = logging.getLogger(__name__)

# Names OpenAI clients send by default: they mean "the server's default model".
OPENAI_NAMES = frozenset(
    {"whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe", "gpt-4o-transcribe-diarize"}
)


class QueueFull(DeskScribeError):
    def __init__(self, retry_after: int) -> None:
        super().__init__("queue full")
        self.retry_after = retry_after


class WorkPool:
    """``workers`` threads run transcriptions; at most ``max_queue`` more wait. A request
    beyond that is refused at once (429) instead of piling up: the caller can retry later."""

    def __init__(self, workers: int, max_queue: int, metrics: Metrics | None = None) -> None:
        self.workers, self.max_queue = workers, max_queue
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="work")
        self._lock = threading.Lock()
        self.waiting = 0
        self.running = 0
        self.metrics = metrics
        self._durations: list[float] = []  # recent run times, for Retry-After

    def submit(self, fn: Callable, *args, **kwargs) -> concurrent.futures.Future:
        with self._lock:
            if self.waiting + self.running >= self.workers + self.max_queue:
                raise QueueFull(self.retry_after())
            self.waiting += 1
            self._gauges()
        return self._pool.submit(self._run, fn, args, kwargs)

    def _run(self, fn, args, kwargs):
        with self._lock:
            self.waiting -= 1
            self.running += 1
            self._gauges()
        t0 = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            with self._lock:
                self.running -= 1
                self._durations = [*self._durations[-19:], time.monotonic() - t0]
                self._gauges()

    def retry_after(self) -> int:
        typical = sorted(self._durations)[len(self._durations) // 2] if self._durations else 5
        return max(1, round(typical * (self.waiting + 1) / self.workers))

    def _gauges(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(self.waiting)
            self.metrics.running.set(self.running)

    async def run(self, fn: Callable, *args, cancel: threading.Event | None = None, **kwargs):
        """Run ``fn`` on the pool and await it; if the request goes away (the client hung
        up), ``cancel`` is set so the transcription stops at its next window."""
        if cancel is not None:
            kwargs["cancel"] = cancel
        future = self.submit(fn, *args, **kwargs)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if cancel is not None:
                cancel.set()
            future.cancel()
            raise

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=False)


class ServerState:
    def __init__(self, config: ServerConfig, models: ModelCache | None = None) -> None:
        self.config = config
        self.metrics = Metrics()
        self.models = models or ModelCache(
            default=lambda: config.model,
            keep=max(1, config.extra.get("keep_models", 2)),
            idle_seconds=config.idle_ttl or None,
        )
        self.metrics.watch_models(self.models)
        self.work = WorkPool(config.workers, config.max_queue, self.metrics)
        # Concurrent requests' chunks decoded in shared batches (whisper/shared_batches.py).
        self.batches: SharedBatches | None = None
        if config.shared_batch_rows > 0:
            self.batches = SharedBatches(
                config.shared_batch_rows, on_cpu=config.shared_batch_on_cpu
            )
            self.metrics.watch_batches(self.batches)
        self.draining = False
        self.inflight = 0
        self.sessions = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._janitor: threading.Thread | None = None
        # Parts with threads of their own (the job dispatcher): start() after the state's,
        # stop() before the work pool shuts down.
        self.services: list = []
        # The open connections (connections.ConnectionWatch) when served by uvicorn here;
        # None in a Ray ingress, whose proxy owns the sockets.
        self.connections = None

    def shared_member(self):
        """A transcription's handle on the shared batches (a context manager; ``None`` in it
        when batches are not shared)."""
        return self.batches.member() if self.batches is not None else contextlib.nullcontext()

    # ------------------------------------------------------------------ models

    def model_folder(self, requested: str | None) -> tuple[str, Path]:
        """(name, folder) of the model a request means: an installed model's name, or one of
        OpenAI's names / nothing for the server's default. Unknown names are a 404."""
        name = (requested or "").strip() or None
        if name in OPENAI_NAMES:
            name = None
        try:
            if name is None:
                if self.config.model:
                    return self.config.model, resolve_model(self.config.model)
                folder = resolve_model(None)
                return folder.name, folder
            if "/" in name or "\\" in name or name.startswith("."):
                raise ModelNotInstalledError(name)
            return name, resolve_model(name)
        except ModelNotInstalledError:
            installed = ", ".join(m.name for m in list_models()) or "none"
            raise ApiError(
                404,
                f"the model {requested!r} is not installed on this server (installed: "
                f"{installed}; 'whisper-1' means the server's default)",
                param="model",
                code="model_not_found",
            ) from None

    def load(self, requested: str | None):
        """The loaded model (on a worker thread: the first use loads it)."""
        _, folder = self.model_folder(requested)
        return self.models.model(str(folder), self.config.device)

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        """The janitor thread: releases models idle past the TTL."""
        if self._janitor is not None:
            return
        if self.config.preload:
            with contextlib.suppress(ApiError):
                self.load(None)

        def janitor() -> None:
            while not self._stop.wait(min(30.0, max(1.0, (self.config.idle_ttl or 30) / 4))):
                # Only while nothing runs: a model a long transcription or a realtime session
                # still uses would be loaded a second time by the next request.
                if self.config.idle_ttl and not (self.work.running or self.sessions):
                    released = self.models.release_idle()
                    if released:
                        log.info("released %d idle model(s)", released)

        self._janitor = threading.Thread(target=janitor, name="janitor", daemon=True)
        self._janitor.start()
        for service in self.services:
            service.start()

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()
        self._stop.set()
        self.work.shutdown()

    def drain(self, seconds: float) -> tuple[int, int]:
        """From now on new requests get 503 ``draining``; wait (this thread) up to ``seconds``
        for the requests and realtime sessions in flight to finish. Returns what is still in
        flight. The single server's SIGTERM and the cluster's ingress both drain here."""
        self.draining = True
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (self.inflight or self.sessions):
            time.sleep(0.1)
        return self.inflight, self.sessions

    def enter(self) -> None:
        with self._lock:
            self.inflight += 1

    def leave(self) -> None:
        with self._lock:
            self.inflight -= 1
