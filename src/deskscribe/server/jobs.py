"""The job API for long files (``/v1/jobs``): submit a file, poll its progress, fetch the result
in any format, cancel or delete it.

A synchronous request holds its HTTP connection for the whole transcription, which fails for an
hour of audio behind a proxy or a laptop's sleep. A job is stored instead: its row in SQLite
(``jobs.db``) and its upload and result in a private folder (``jobs/<id>/``), so a server that
is killed mid-job picks it up again when it starts, and nothing is lost silently: a job whose
upload is gone is marked failed with the reason.

One dispatcher thread feeds queued jobs to the shared work pool in order, one waiting at a time,
so jobs never see the pool's 429 (the stored queue absorbs peaks) and synchronous requests get
their turn between jobs. A running job counts as in flight, so a SIGTERM drain waits for it;
while draining no job starts (they stay queued for the next start).

A job belongs to the key that made it (its SHA-256 is stored, never the key): another key
gets 404 for it and does not see it in the list; a key from ``--admin-key-file`` sees all.
Finished jobs are purged after ``--job-retention-hours``; the uploads waiting in the queue are
capped in bytes (``--max-queued-job-gb``) as well as in number.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import sqlite3
import threading
import time
import uuid
from pathlib import Path

from ..errors import Cancelled
from ..fsutil import private_dir, write_atomic
from ..transcript import Transcript
from .errors import ApiError
from .formats import FORMATS
from .job_store import JobStore
from .requests import Fields, run
from .state import QueueFull, ServerState

log = logging.getLogger(__name__)

STATUSES = ("queued", "running", "done", "failed", "cancelled")
FINISHED = ("done", "failed", "cancelled")
RESULT_FORMATS = (*FORMATS, "deskscribe")
MAX_QUEUED = 1000  # stored queued jobs; more get 429 (config.extra["max_jobs"] overrides)
POLL = 0.25  # how often the dispatcher looks for pool room freed by synchronous requests
PURGE_EVERY = 60.0  # seconds between looks for finished jobs past the retention
JOB_ID = re.compile(r"job_[0-9a-f]{32}")
RESULT = "transcript.json"
GONE = "the server stopped while this job {} and its upload is gone; submit the file again"


class Jobs:
    """The stored jobs of one server and the dispatcher that runs them."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.max_queued = int(state.config.extra.get("max_jobs", MAX_QUEUED))
        self.store: JobStore | None = None
        self.root = Path()
        # Guards the hand-offs between the dispatcher, the workers and DELETE.
        self._cond = threading.Condition()
        self._cancels: dict[str, threading.Event] = {}  # jobs handed to the pool
        self._progress: dict[str, float] = {}  # running jobs, 0..1
        self._pending = 0  # handed to the pool, not started yet
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._purged_at = 0.0

    # ------------------------------------------------------------------ life

    def start(self) -> None:
        folder = self.state.config.folder()
        self.root = private_dir(folder / "jobs")
        self.store = JobStore(folder / "jobs.db")
        self._recover()
        self._purge()
        self._gauges()
        self._thread = threading.Thread(target=self._dispatch, name="jobs", daemon=True)
        self._thread.start()

    def stop(self, wait: float = 30.0) -> None:
        """Stop dispatching and cancel running jobs; they go back to queued (their uploads
        kept) and run again at the next start."""
        with self._cond:
            self._stopping = True
            for cancel in self._cancels.values():
                cancel.set()
            self._cond.notify_all()
            deadline = time.monotonic() + wait
            while self._progress and time.monotonic() < deadline:
                self._cond.wait(0.1)
        if self._thread is not None:
            self._thread.join(5)

    def _recover(self) -> None:
        """After a stop or a crash: jobs found queued or running are queued again in order if
        their upload is there, else failed with the reason; leftovers are removed."""
        assert self.store is not None
        now = int(time.time())
        for row in self.store.with_status("running", "queued"):
            if (self.root / row["id"] / row["upload"]).is_file():
                self.store.update(row["id"], status="queued")
                continue
            verb = "ran" if row["status"] == "running" else "waited"
            self.store.update(row["id"], status="failed", finished_at=now,
                              error=json.dumps(_error(GONE.format(verb), "upload_lost")))  # fmt: skip
            self.state.metrics.failures.labels("upload_lost").inc()
            log.warning("job %s failed: its upload is gone", row["id"])
        known = {r["id"]: r for r in self.store.newest(1 << 62)}
        for folder in self.root.iterdir():
            row = known.get(folder.name)
            if row is None:  # killed between storing the upload and the row
                shutil.rmtree(folder, ignore_errors=True)
            elif row["status"] in FINISHED:  # killed between the result and the clean-up
                with contextlib.suppress(OSError):
                    (folder / row["upload"]).unlink()

    # ------------------------------------------------------------------ submit

    def add(self, upload: Path, f: Fields, model: str, owner: str = "") -> dict:
        """Store a new job of ``owner`` (the upload is moved into its folder) and wake the
        dispatcher; 429 past the queue's count or bytes."""
        assert self.store is not None
        size = upload.stat().st_size
        cap = int(self.state.config.max_queued_job_gb * 1024**3)
        with self._cond:
            queued = self.store.counts().get("queued", 0)
            waiting = self.store.waiting_bytes()
            if queued >= self.max_queued or waiting + size > cap:
                what = (f"{queued} jobs queued" if queued >= self.max_queued
                        else f"{waiting / 1024**3:.1f} GB of uploads waiting")  # fmt: skip
                raise ApiError(
                    429,
                    f"the server has {what}, its limit; retry when some are done",
                    code="queue_full",
                    headers={"Retry-After": "60"},
                )
            job_id = "job_" + uuid.uuid4().hex
            folder = private_dir(self.root / job_id)
            name = "upload" + upload.suffix
            os.replace(upload, folder / name)
            self.store.add({"id": job_id, "status": "queued", "created_at": int(time.time()),
                            "filename": f.filename, "model": model, "fields": f.to_json(),
                            "upload": name, "owner": owner, "bytes": size})  # fmt: skip
            self._cond.notify_all()
        self._gauges()
        return self.get(job_id, owner)

    # ------------------------------------------------------------------ read

    def row(self, job_id: str, owner: str | None = None) -> sqlite3.Row:
        """The job's row; 404 when there is none, or (``owner`` given) it is another key's:
        the same answer, so a key cannot learn that another key's job exists."""
        assert self.store is not None
        row = self.store.get(job_id) if JOB_ID.fullmatch(job_id) else None
        if row is None or (owner is not None and row["owner"] != owner):
            shown = job_id if JOB_ID.fullmatch(job_id) else job_id[:40]
            raise ApiError(404, f"no job {shown!r} on this server (deleted, or never made)",
                           param="id", code="job_not_found")  # fmt: skip
        return row

    def get(self, job_id: str, owner: str | None = None) -> dict:
        return self.describe(self.row(job_id, owner))

    def describe(self, row: sqlite3.Row) -> dict:
        status = row["status"]
        progress = 1.0 if status == "done" else self._progress.get(row["id"], 0.0)
        return {
            "id": row["id"],
            "object": "transcription.job",
            "status": status,
            "created_at": row["created_at"],
            "filename": row["filename"],
            "model": row["model"],
            "progress": round(progress, 4),
            "duration": row["duration"],
            "error": json.loads(row["error"]) if row["error"] else None,
            "finished_at": row["finished_at"],
        }

    def newest(self, limit: int, owner: str | None = None) -> list[dict]:
        assert self.store is not None
        return [self.describe(r) for r in self.store.newest(limit, owner)]

    def result(self, job_id: str, owner: str | None = None) -> tuple[Fields, dict]:
        """The job's fields and stored transcript (``Transcript.to_dict``); 409 until done."""
        row = self.row(job_id, owner)
        status = row["status"]
        if status != "done":
            if status == "running":
                how = f"is running ({self._progress.get(job_id, 0.0):.0%} done)"
            elif status == "failed":
                how = "failed: " + json.loads(row["error"] or "{}").get("message", "")
            else:
                how = "was cancelled" if status == "cancelled" else "is queued"
            raise ApiError(409, f"the job {job_id} {how}; a result is there once its status is "
                           "done", param="id", code=f"job_{status}")  # fmt: skip
        try:
            data = json.loads((self.root / job_id / RESULT).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ApiError(500, f"the result of job {job_id} is missing or damaged on the "
                           f"server ({e}); submit the file again", code="result_lost") from None  # fmt: skip
        return Fields.from_json(row["fields"]), data

    # ------------------------------------------------------------------ delete

    def delete(self, job_id: str, owner: str | None = None) -> dict:
        """Cancel a queued or running job (kept, as cancelled), or forget a finished one; the
        upload and the result go either way."""
        assert self.store is not None
        with self._cond:
            row = self.row(job_id, owner)
            if row["status"] in FINISHED:
                self.store.delete(job_id)
                out = {"id": job_id, "object": "transcription.job", "deleted": True}
            else:
                self.store.update(job_id, status="cancelled", finished_at=int(time.time()))
                if job_id in self._cancels:  # stops at its next window
                    self._cancels[job_id].set()
                out = None
            shutil.rmtree(self.root / job_id, ignore_errors=True)
            self._cond.notify_all()
        self._gauges()
        return out or self.get(job_id, owner)

    def _purge(self) -> None:
        """Forget finished jobs older than the retention (rows, results, folders)."""
        assert self.store is not None
        self._purged_at = time.monotonic()
        hours = self.state.config.job_retention_hours
        if not hours:
            return
        old = self.store.finished_before(int(time.time() - hours * 3600))
        for job_id in old:
            with self._cond:
                self.store.delete(job_id)
                shutil.rmtree(self.root / job_id, ignore_errors=True)
        if old:
            log.info("purged %d finished job(s) older than %g h", len(old), hours)
            self._gauges()

    # ------------------------------------------------------------------ running

    def _dispatch(self) -> None:
        """Hand the oldest queued job to the pool whenever no job of ours waits there and the
        pool has room, so jobs never meet its 429 and requests interleave with jobs."""
        assert self.store is not None
        work = self.state.work
        while True:
            retention = self.state.config.job_retention_hours * 3600
            if time.monotonic() - self._purged_at > min(PURGE_EVERY, max(1.0, retention / 4)):
                try:
                    self._purge()
                except sqlite3.Error:
                    log.exception("could not purge old jobs")
            with self._cond:
                if self._stopping:
                    return
                room = work.waiting + work.running < work.workers + work.max_queue
                job_id = None
                if room and not self._pending and not self.state.draining:
                    job_id = self.store.next_queued(set(self._cancels))
                if job_id is None:
                    self._cond.wait(POLL)
                    continue
                cancel = self._cancels[job_id] = threading.Event()
                self._pending += 1
            try:
                work.submit(self._execute, job_id, cancel)
            except (QueueFull, RuntimeError):  # a request took the room; or shutting down
                with self._cond:
                    self._cancels.pop(job_id, None)
                    self._pending -= 1
                    self._cond.wait(POLL)

    def _execute(self, job_id: str, cancel: threading.Event) -> None:
        """On a worker: run the job, unless the server began to drain or stop (it stays
        queued) or it was cancelled while it waited."""
        self.state.enter()  # before the check: a drain that sees 0 in flight has no job
        try:
            with self._cond:
                self._pending -= 1
                start = not (self._stopping or self.state.draining or cancel.is_set())
                if start:
                    self._progress[job_id] = 0.0
                else:
                    self._cancels.pop(job_id, None)
                self._cond.notify_all()
            if start:
                try:
                    self._run(job_id, cancel)
                except Exception:
                    log.exception("job %s: unexpected error", job_id)
                    self._finish(job_id, "failed", error=_error(
                        "internal error while transcribing; see the server log", "internal"))  # fmt: skip
                finally:
                    with self._cond:
                        self._cancels.pop(job_id, None)
                        self._progress.pop(job_id, None)
                        self._cond.notify_all()
                    self._gauges()
        finally:
            self.state.leave()

    def _run(self, job_id: str, cancel: threading.Event) -> None:
        assert self.store is not None
        with self._cond:
            row = self.store.get(job_id)
            if row is None or not self.store.update(job_id, when="queued", status="running"):
                return  # deleted meanwhile
        self._gauges()
        upload = self.root / job_id / row["upload"]
        f = Fields.from_json(row["fields"])
        try:
            outcome = run(self.state, upload, f, cancel=cancel,
                          progress=self._tracker(job_id, f), kind="job")  # fmt: skip
        except Cancelled:
            # Cancelled by DELETE (then no longer running: nothing to do) or by a stop: queued
            # again, its upload kept, for the next start.
            with self._cond:
                if self.store.update(job_id, when="running", status="queued"):
                    log.info("job %s stopped with the server; it runs again at the next start",
                             job_id)  # fmt: skip
                else:
                    log.info("job %s cancelled at %.0f%%", job_id,
                             100 * self._progress.get(job_id, 0.0))  # fmt: skip
                    self._forget_files(job_id)
            return
        except ApiError as e:
            self.state.metrics.failures.labels(e.code or str(e.status)).inc()
            self._finish(job_id, "failed", error=_error(e.message, e.code or str(e.status),
                                                        e.type))  # fmt: skip
            return
        transcript = outcome.transcript
        transcript.source = f.filename
        duration = float(transcript.duration or 0.0)
        if self._finish(job_id, "done", transcript=transcript, duration=duration):
            log.info("job %s done: %.0f s of audio in %.1f s", job_id, duration, outcome.seconds)
            self.state.metrics.audio_seconds.labels("job").inc(duration)
            if duration > 0:
                self.state.metrics.rtf.observe(outcome.seconds / duration)

    def _finish(self, job_id: str, status: str, *, error: dict | None = None,
                transcript: Transcript | None = None, duration: float | None = None) -> bool:  # fmt: skip
        """Store the outcome of a running job (unless DELETE cancelled it meanwhile: then its
        folder is gone and it stays cancelled) and remove its upload. True when stored."""
        assert self.store is not None
        with self._cond:
            row = self.store.get(job_id)
            if row is None or row["status"] != "running":
                self._forget_files(job_id)
                return False
            folder = self.root / job_id
            if transcript is not None:
                write_atomic(folder / RESULT, json.dumps(transcript.to_dict()), private=True)
            self.store.update(job_id, status=status, finished_at=int(time.time()),
                              duration=duration, error=json.dumps(error) if error else None)  # fmt: skip
            with contextlib.suppress(OSError):
                (folder / row["upload"]).unlink()
        self._gauges()
        return True

    def _forget_files(self, job_id: str) -> None:
        """Remove a deleted job's folder again once its run ended: DELETE removed it while the
        upload was open, which fails on Windows, or the run wrote into it since."""
        shutil.rmtree(self.root / job_id, ignore_errors=True)

    def _tracker(self, job_id: str, f: Fields):
        """A Progress callback: the transcription's share of the job, then the speakers'
        (diarized_json); kept below 1 until the job is done."""
        stages = {"": (0.0, 1.0), "transcribe": (0.0, 1.0)}
        if f.response_format == "diarized_json":
            stages = {"": (0.0, 0.85), "transcribe": (0.0, 0.85), "speakers": (0.85, 0.15)}

        def progress(done: float, total: float, stage: str = "") -> None:
            base, share = stages.get(stage, (0.0, 1.0))
            if total > 0:
                value = min(0.99, base + share * min(1.0, max(0.0, done / total)))
                with self._cond:
                    if job_id in self._progress:
                        self._progress[job_id] = max(self._progress[job_id], value)

        return progress

    def _gauges(self) -> None:
        if self.store is None:
            return
        counts = self.store.counts()
        for status in STATUSES:
            self.state.metrics.jobs.labels(status).set(counts.get(status, 0))


def _error(message: str, code: str, type: str = "server_error") -> dict:
    return {"message": message, "type": type, "code": code}
