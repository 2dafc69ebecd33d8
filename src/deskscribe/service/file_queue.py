"""The file queue as a service: the order of the files, one job at a time on its own thread,
cancel / retry / remove, this computer or a DeskScribe server (and back to this computer for
files the server failed), files waiting for a model until one is installed, the engine
process's lifetime, and recovery after a crash. No Qt: the window, ``deskscribe watch`` and
the tests drive the same `FileQueue`.

Front ends observe it: ``subscribe(fn)`` calls ``fn(QueueChanged)`` (on the queue's thread)
after every change, the one notification there is (Anki's ``operation_did_execute``); they
read ``entries()`` again and ask for changes with the methods below, never by editing rows.
The library is the record (``service.queue`` writes it); an `Entry` is what a front end
shows of one library item.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ..library import Item, Library, LibraryError
from ..models.store import ModelNotInstalledError
from .models import pick_model
from .queue import ExportOptions, JobOutcome, Queued, Runner, queue_files, run_queued_item

log = logging.getLogger(__name__)

ENGINE_IDLE_SECONDS = 300.0  # the engine process (and its model's memory) goes when idle
PROGRESS_EVERY = 0.1  # seconds between progress notifications of one job


class Status(str, Enum):
    """Where a file is in the queue. The library keeps the same words, but for WAITING (a
    queued job that waits for a model) and SKIPPED (done before: not run again)."""

    QUEUED = "queued"
    WAITING = "waiting"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"

    @property
    def finished(self) -> bool:
        return self in (Status.DONE, Status.FAILED, Status.CANCELLED, Status.SKIPPED)


WAITING_NOTE = "waiting for a model: install one (Models) and this file starts by itself"


@dataclass(frozen=True)
class Entry:
    item_id: int
    path: Path
    status: Status = Status.QUEUED
    duration: float | None = None
    progress: float = 0.0
    eta: float | None = None
    error: str | None = None  # why it failed (or a note on a finished one)
    on_server: bool = False  # its job runs (or last ran) on a DeskScribe server
    server_failed: bool = False  # it failed there: it may be run on this computer instead


@dataclass(frozen=True)
class QueueChanged:
    """What changed: the entries (ids) whose row is new, changed or gone, and the outcome of a
    job that just ended. ``progress``: only progress moved (frequent; cheap to show).
    ``finished``: the work asked for (files added, resumed or retried) is all done, each file
    done, failed, cancelled or skipped; said once per such run of work, however fast it went
    (an observer that reads the queue later may never see it busy)."""

    ids: frozenset[int] = frozenset()
    outcome: JobOutcome | None = None
    progress: bool = False
    finished: bool = False


Server = Callable[[], tuple[str, str | None] | None]  # (address, key) of the server, or None


@dataclass
class _Job:
    item_id: int
    cancel: threading.Event = field(default_factory=threading.Event)
    remove_after: bool = False


class FileQueue:
    """One queue of file jobs. ``local``: the runner on this computer (default: the engine
    process, closed when idle); ``server``: where files go instead, read at each job;
    ``device``, ``exports``: read at each job; ``model_ready(options)``: whether a job with
    these options can find its model (default: one is installed), else it waits."""

    def __init__(
        self,
        library: Library,
        *,
        local: Runner | None = None,
        server: Server = lambda: None,
        remote: Callable[..., Runner] | None = None,
        device: Callable[[], str] = lambda: "auto",
        exports: Callable[[], ExportOptions | None] = lambda: None,
        model_ready: Callable[[dict[str, Any]], bool] | None = None,
        idle_seconds: float = ENGINE_IDLE_SECONDS,
    ) -> None:
        self.library = library
        self._engine = None
        if local is None:
            from .engine import EngineProcess

            self._engine = EngineProcess()
            local = self._engine.run
        self._local, self._server, self._device, self._exports = local, server, device, exports
        self._remote = remote
        self._model_ready = model_ready or _a_model_is_installed
        self._idle_seconds = idle_seconds
        self._entries: dict[int, Entry] = {}  # in queue order (insertion order)
        self._run_here: set[int] = set()
        self._job: _Job | None = None
        self._observers: list[Callable[[QueueChanged], None]] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._idle_since: float | None = None
        self._asked = False  # work was asked for since the queue last said it finished
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ observing

    def subscribe(self, fn: Callable[[QueueChanged], None]) -> Callable[[], None]:
        """Call ``fn`` after every change (on whichever thread made it); returns the
        unsubscribe function."""
        self._observers.append(fn)
        return lambda: self._observers.remove(fn) if fn in self._observers else None

    def entries(self) -> list[Entry]:
        with self._cond:
            return list(self._entries.values())

    def entry(self, item_id: int) -> Entry | None:
        with self._cond:
            return self._entries.get(item_id)

    @property
    def finished(self) -> bool:
        """Nothing is waiting or running (files waiting for a model count as waiting)."""
        with self._cond:
            return self._job is None and all(e.status.finished for e in self._entries.values())

    def wait_until_finished(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not (self._job is None and all(e.status.finished
                                                 for e in self._entries.values())):  # fmt: skip
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _notify(self, event: QueueChanged) -> None:
        for fn in list(self._observers):
            try:
                fn(event)
            except Exception:  # an observer's bug must not stop the queue
                log.exception("a file queue observer failed")

    def _set(self, item_id: int, **changes: Any) -> Entry | None:
        """Change one entry (under the lock); the new entry, or None when it is gone."""
        old = self._entries.get(item_id)
        if old is None:
            return None
        new = self._entries[item_id] = dataclasses.replace(old, **changes)
        return new

    # ------------------------------------------------------------------ adding

    def add(self, paths: Iterable[str | Path], options: dict[str, Any], redo: bool = False,
            ) -> list[Queued]:  # fmt: skip
        """Queue the media files of ``paths`` (folders searched) with ``options``; files done
        before with the same options are skipped, unreadable ones fail at once. It probes
        every file: call it off any UI thread."""
        queued = queue_files(self.library, paths, options, redo)
        ids = set()
        with self._cond:
            for q in queued:
                if q.item_id in self._entries:
                    continue  # the same done file added twice
                status = Status(q.status)
                self._entries[q.item_id] = Entry(
                    q.item_id, q.path, status, q.duration, error=q.error,
                    progress=1.0 if status is Status.SKIPPED else 0.0,
                )  # fmt: skip
                ids.add(q.item_id)
            self._asked = True
            self._cond.notify_all()
        self._notify(QueueChanged(frozenset(ids)))
        return queued

    def resume(self, items: Iterable[Item]) -> None:
        """Queue library items again: jobs left unfinished by a crash or a quit."""
        ids = set()
        with self._cond:
            for item in items:
                if item.id in self._entries:
                    continue
                with contextlib.suppress(LibraryError):
                    self.library.update(item.id, status="queued", progress=0.0, error=None)
                self._entries[item.id] = Entry(item.id, Path(item.source), Status.QUEUED,
                                               item.duration)  # fmt: skip
                ids.add(item.id)
            self._asked = self._asked or bool(ids)
            self._cond.notify_all()
        self._notify(QueueChanged(frozenset(ids)))

    def recover(self) -> list[Item]:
        """After a crash (or a quit mid-queue): every file job the library has as queued or
        running goes back into the queue, in its order. Returns them."""
        items = self.library.unfinished_jobs()
        self.resume(items)
        return items

    # ------------------------------------------------------------------ asking for changes

    def cancel(self, ids: Iterable[int]) -> None:
        """Stop running jobs (at their next window) and take waiting ones off the run."""
        changed = set()
        with self._cond:
            for item_id in ids:
                e = self._entries.get(item_id)
                if e is None:
                    continue
                if self._job is not None and self._job.item_id == item_id:
                    self._job.cancel.set()
                elif e.status in (Status.QUEUED, Status.WAITING):
                    with contextlib.suppress(LibraryError):
                        self.library.update(item_id, status="cancelled")
                    self._set(item_id, status=Status.CANCELLED, error=None)
                    changed.add(item_id)
            self._cond.notify_all()
        self._notify(QueueChanged(frozenset(changed)))

    def retry(self, ids: Iterable[int], *, here: bool = False) -> None:
        """Queue failed or cancelled files again; ``here``: on this computer, whatever the
        settings say (for files the server failed)."""
        changed = set()
        with self._cond:
            for item_id in ids:
                e = self._entries.get(item_id)
                if e is None or e.status not in (Status.FAILED, Status.CANCELLED):
                    continue
                with contextlib.suppress(LibraryError):
                    self.library.update(item_id, status="queued", progress=0.0, error=None)
                self._set(item_id, status=Status.QUEUED, progress=0.0, error=None, eta=None,
                          server_failed=False)  # fmt: skip
                if here:
                    self._run_here.add(item_id)
                changed.add(item_id)
            self._asked = self._asked or bool(changed)
            self._cond.notify_all()
        self._notify(QueueChanged(frozenset(changed)))

    def run_here(self, ids: Iterable[int] | None = None) -> None:
        """The files that failed on the server (those of ``ids``, else all) again, on this
        computer."""
        with self._cond:
            failed = [e.item_id for e in self._entries.values()
                      if e.server_failed and e.status is Status.FAILED]  # fmt: skip
        picked = set(ids or ()) & set(failed) or set(failed)
        self.retry(picked, here=True)

    def remove(self, ids: Iterable[int]) -> None:
        """Take files off the queue; unfinished jobs leave the library too (transcripts
        stay). A running one is cancelled first and goes when it has stopped."""
        changed = set()
        with self._cond:
            for item_id in ids:
                e = self._entries.get(item_id)
                if e is None:
                    continue
                if self._job is not None and self._job.item_id == item_id:
                    self._job.remove_after = True
                    self._job.cancel.set()
                    continue
                self._forget(e)
                changed.add(item_id)
            self._cond.notify_all()
        self._notify(QueueChanged(frozenset(changed)))

    def clear_finished(self) -> None:
        """Take done (and skipped) files off the queue; their transcripts stay in the library."""
        with self._cond:
            gone = [i for i, e in self._entries.items()
                    if e.status in (Status.DONE, Status.SKIPPED)]  # fmt: skip
            for item_id in gone:
                del self._entries[item_id]
        self._notify(QueueChanged(frozenset(gone)))

    def models_changed(self) -> None:
        """A model was installed (or removed): files waiting for one are tried again."""
        with self._cond:
            waiting = [i for i, e in self._entries.items() if e.status is Status.WAITING]
            for item_id in waiting:
                self._set(item_id, status=Status.QUEUED, error=None)
            self._asked = self._asked or bool(waiting)
            self._cond.notify_all()
        self._notify(QueueChanged(frozenset(waiting)))

    def _forget(self, e: Entry) -> None:
        if e.status not in (Status.DONE, Status.SKIPPED):
            with contextlib.suppress(LibraryError):
                self.library.delete(e.item_id)
        self._entries.pop(e.item_id, None)
        self._run_here.discard(e.item_id)

    # ------------------------------------------------------------------ running

    def start(self) -> FileQueue:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="file-queue", daemon=True)
            self._thread.start()
        return self

    def shutdown(self, wait: float = 5.0) -> None:
        """Stop: the running job is stopped as by a quit (it stays unfinished in the library,
        and `recover` queues it again next time); waiting ones stay queued there."""
        with self._cond:
            self._stopping = True
            if self._job is not None:  # an in-process runner stops at its next window
                self._job.cancel.set()
            self._cond.notify_all()
        if self._engine is not None:
            self._engine.close()
        if self._thread is not None:
            self._thread.join(wait)

    def _next(self) -> Entry | None:
        """The next job to run (under the lock); files that cannot find a model wait."""
        for e in self._entries.values():
            if e.status is not Status.QUEUED:
                continue
            item = self._item(e.item_id)
            if item is None:
                continue
            if not self._model_ready(item.options):
                self._set(e.item_id, status=Status.WAITING, error=WAITING_NOTE)
                self._notify_later.add(e.item_id)
                continue
            return e
        return None

    def _item(self, item_id: int) -> Item | None:
        try:
            return self.library.get(item_id)
        except LibraryError:  # deleted behind the queue's back: forget it
            self._entries.pop(item_id, None)
            self._notify_later.add(item_id)
            return None

    def _loop(self) -> None:
        while True:
            self._notify_later: set[int] = set()
            close_engine = done = False
            with self._cond:
                entry = None
                while not self._stopping and not self._notify_later:
                    entry = self._next()
                    if entry is not None:
                        break
                    if self._asked and all(e.status.finished for e in self._entries.values()):
                        # all the work asked for is over (none waits for a model): say so once
                        self._asked, done = False, True
                        break
                    self._idle_since = self._idle_since or time.monotonic()
                    self._cond.notify_all()  # wait_until_finished
                    if self._engine_idle():
                        close_engine = True
                        break
                    self._cond.wait(self._idle_wait())
                if self._stopping:
                    return
                if entry is not None:
                    job = self._job = _Job(entry.item_id)
                    self._idle_since = None
                    self._set(entry.item_id, status=Status.RUNNING, progress=0.0, eta=None,
                              error=None)  # fmt: skip
                    self._notify_later.add(entry.item_id)
            if close_engine:  # outside the lock: it waits a moment for the process
                self._engine.close()
            if self._notify_later or done:
                self._notify(QueueChanged(frozenset(self._notify_later), finished=done))
            if entry is not None:
                self._run(job)

    def _engine_idle(self) -> bool:
        """The engine process has had nothing to do for ``idle_seconds``."""
        if self._engine is None or not self._engine.running or self._idle_since is None:
            return False
        return time.monotonic() - self._idle_since >= self._idle_seconds

    def _idle_wait(self) -> float | None:
        if self._engine is None or not self._engine.running:
            return None
        return max(0.1, self._idle_seconds - (time.monotonic() - (self._idle_since or 0)))

    def _run(self, job: _Job) -> None:
        here = job.item_id in self._run_here
        server = None if here else self._server()
        run = self._local if server is None else self._remote_runner(server)
        with self._cond:
            self._set(job.item_id, on_server=server is not None)
        last = [0.0]

        def progress(fraction: float, eta: float | None) -> None:
            with self._cond:
                self._set(job.item_id, progress=fraction, eta=eta)
            now = time.monotonic()
            if now - last[0] >= PROGRESS_EVERY:
                last[0] = now
                self._notify(QueueChanged(frozenset({job.item_id}), progress=True))

        try:
            outcome = run_queued_item(self.library, job.item_id, run, device=self._device(),
                                      export_options=self._exports(), progress=progress,
                                      cancel=job.cancel)  # fmt: skip
        except Exception as exc:  # the library itself failed: the row says why
            log.exception("file job %d", job.item_id)
            message = f"Unexpected error ({type(exc).__name__}: {exc})"
            with contextlib.suppress(Exception):
                self.library.update(job.item_id, status="failed", error=message)
            outcome = JobOutcome(job.item_id, "failed", error=message)
        self._finished(job, outcome, server is not None)

    def _remote_runner(self, server: tuple[str, str | None]) -> Runner:
        if self._remote is None:
            from .remote import remote_runner

            self._remote = remote_runner
        # Quitting stops the job as the engine's are stopped: unfinished, offered next time.
        return self._remote(*server, quitting=lambda: self._stopping)

    def _finished(self, job: _Job, outcome: JobOutcome, on_server: bool) -> None:
        if self._stopping and outcome.status == "cancelled" and not job.remove_after:
            # Stopped by the quit, not by the user: unfinished, as an engine's job would be.
            with contextlib.suppress(LibraryError):
                self.library.update(job.item_id, status="queued", progress=0.0)
            outcome = dataclasses.replace(outcome, status="running")
        with self._cond:
            self._job = None
            self._run_here.discard(job.item_id)  # "here" was for that run
            if outcome.status == "running":  # stopped with the app: unfinished in the library
                self._set(job.item_id, status=Status.QUEUED, progress=0.0, eta=None)
            else:
                status = Status(outcome.status)
                self._set(job.item_id, status=status, error=outcome.error, eta=None,
                          progress=1.0 if status is Status.DONE else 0.0,
                          server_failed=on_server and status is Status.FAILED)  # fmt: skip
            if job.remove_after and (e := self._entries.get(job.item_id)) is not None:
                self._forget(e)
            self._cond.notify_all()
        self._notify(QueueChanged(frozenset({job.item_id}), outcome=outcome))


def _a_model_is_installed(_options: dict[str, Any]) -> bool:
    """Whether any model is installed. (A job whose own model was removed runs, and says
    so: only a computer with no model at all makes files wait.)"""
    try:
        pick_model(None)
    except ModelNotInstalledError:
        return False
    return True
