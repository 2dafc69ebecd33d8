"""Run slow work (model loading, transcription, downloads, recovery, exports) off the UI thread.

``run_in_worker(fn, *args, on_done=..., on_error=..., on_progress=...)`` starts ``fn`` on a
daemon thread and returns a `WorkerHandle` at once. The callbacks run on the UI thread: a small
relay QObject that lives there emits Qt signals from the worker thread, and Qt queues them.

``fn`` may take ``progress`` and/or ``cancel`` keyword arguments: ``progress(*values)`` sends
values to ``on_progress`` (at most ~20 times a second, the last one always delivered), and
``cancel`` is a `threading.Event` set by `WorkerHandle.cancel()`; ``fn`` decides how to stop.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QCoreApplication, QObject, Signal, Slot

log = logging.getLogger(__name__)

PROGRESS_INTERVAL_S = 0.05
_active: set[WorkerHandle] = set()  # keeps handles (and their relays) alive until they finish


class _Relay(QObject):
    """Lives on the UI thread; signals emitted from the worker arrive here queued."""

    done = Signal(object)
    failed = Signal(object)
    progressed = Signal(object)

    def __init__(self, handle: WorkerHandle) -> None:
        super().__init__()
        app = QCoreApplication.instance()
        if app is not None:
            self.moveToThread(app.thread())
        self._handle = handle
        self.done.connect(self._on_done)
        self.failed.connect(self._on_failed)
        self.progressed.connect(self._on_progress)

    @Slot(object)
    def _on_progress(self, values: tuple) -> None:
        if self._handle.on_progress is not None and not self._handle.finished:
            self._handle.on_progress(*values)

    @Slot(object)
    def _on_done(self, result: object) -> None:
        self._handle._finish()
        if self._handle.on_done is not None:
            self._handle.on_done(result)

    @Slot(object)
    def _on_failed(self, exc: object) -> None:
        self._handle._finish()
        if self._handle.on_error is not None:
            self._handle.on_error(exc)
        else:
            log.error("background task failed", exc_info=exc)  # type: ignore[arg-type]


class WorkerHandle:
    """A running job: `cancel()` it, ask whether it is `running`, or `wait()` (not on the UI thread
    while the job needs it: the callbacks are delivered by the UI event loop)."""

    def __init__(
        self,
        name: str,
        on_done: Callable[[Any], None] | None,
        on_error: Callable[[BaseException], None] | None,
        on_progress: Callable[..., None] | None,
    ) -> None:
        self.name = name
        self.on_done, self.on_error, self.on_progress = on_done, on_error, on_progress
        self.cancel_event = threading.Event()
        self.finished = False  # set on the UI thread, just before on_done / on_error run
        self._thread_done = threading.Event()
        self._relay = _Relay(self)
        self._last_progress = 0.0
        self._pending: tuple | None = None
        self._progress_lock = threading.Lock()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    @property
    def running(self) -> bool:
        return not self._thread_done.is_set()

    def cancel(self) -> None:
        self.cancel_event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker thread has returned; True if it has."""
        return self._thread_done.wait(timeout)

    def _progress(self, *values: Any) -> None:
        now = time.monotonic()
        with self._progress_lock:
            if now - self._last_progress < PROGRESS_INTERVAL_S:
                self._pending = values  # sent later, or flushed when the job ends
                return
            self._last_progress, self._pending = now, None
        self._relay.progressed.emit(values)

    def _flush_progress(self) -> None:
        with self._progress_lock:
            values, self._pending = self._pending, None
        if values is not None:
            self._relay.progressed.emit(values)

    def _finish(self) -> None:
        self.finished = True
        _active.discard(self)


def _wants(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def run_in_worker(
    fn: Callable[..., Any],
    *args: Any,
    on_done: Callable[[Any], None] | None = None,
    on_error: Callable[[BaseException], None] | None = None,
    on_progress: Callable[..., None] | None = None,
    name: str | None = None,
) -> WorkerHandle:
    """Run ``fn(*args)`` on a worker thread; callbacks come back on the UI thread."""
    handle = WorkerHandle(name or getattr(fn, "__name__", "task"), on_done, on_error, on_progress)
    kwargs: dict[str, Any] = {}
    if _wants(fn, "progress"):
        kwargs["progress"] = handle._progress
    if _wants(fn, "cancel"):
        kwargs["cancel"] = handle.cancel_event

    def body() -> None:
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            handle._flush_progress()
            handle._relay.failed.emit(exc)
        else:
            handle._flush_progress()
            handle._relay.done.emit(result)
        finally:
            handle._thread_done.set()

    _active.add(handle)
    threading.Thread(target=body, name=f"worker-{handle.name}", daemon=True).start()
    return handle


def active_workers() -> list[WorkerHandle]:
    """Jobs whose results have not been delivered yet (e.g. to cancel them on quit)."""
    return list(_active)


def cancel_all(timeout: float = 2.0) -> None:
    """Cancel every job and give them ``timeout`` seconds together to return."""
    handles = active_workers()
    for h in handles:
        h.cancel()
    deadline = time.monotonic() + timeout
    for h in handles:
        h.wait(max(0.0, deadline - time.monotonic()))
