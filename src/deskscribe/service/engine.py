"""File jobs in a separate engine process, so the app's process never feels them.

Why a process and not only a thread: parts of loading a model and decoding media run in native
code that holds Python's GIL (the tokenizer's JSON parse, FFmpeg's and ONNX Runtime's module
set-up), which froze the UI thread for 60-280 ms when they ran on a thread; and a media file
that crashes a native library takes down only the engine, not the app (and not a live
recording). The engine process lives while there is work, keeps its models loaded between
jobs, and is started again after a crash.

`EngineProcess.run(job, progress=..., cancel=...)` is called from a worker thread and returns
the job's `FileJobResult` (the transcript comes back through the pipe); it never raises for a
file's problem. Progress and cancel cross the pipe as small messages. The engine never writes
the app's library: the caller stores the result (``service.queue.run_queued_item``).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import sys
import threading
import time

from .jobs import FileJob, FileJobResult

log = logging.getLogger(__name__)

ENGINE_NICENESS = 10  # POSIX; Windows: below-normal priority
CANCEL_GRACE_S = 10.0  # a job that ignores cancel this long is stopped by ending the process


class EngineProcess:
    """One engine process, one job at a time (the file queue runs jobs one by one)."""

    def __init__(self) -> None:
        self._mp = multiprocessing.get_context("spawn")  # no fork: the app has threads
        self._proc = None
        self._commands = None  # app -> engine
        self._events = None  # engine -> app
        self._lock = threading.Lock()
        self._closing = False

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def start(self) -> None:
        """Start the process now (it takes a second or two to import the engine)."""
        with self._lock:
            if self.running:
                return
            self._closing = False
            # Two one-way pipes: each end is used by one thread only.
            commands_in, commands_out = self._mp.Pipe(duplex=False)
            events_in, events_out = self._mp.Pipe(duplex=False)
            self._proc = self._mp.Process(
                target=serve, args=(commands_in, events_out), name="deskscribe-engine",
                daemon=True,
            )  # fmt: skip
            self._proc.start()
            commands_in.close()
            events_out.close()
            self._commands, self._events = commands_out, events_in

    def close(self, timeout: float = 3.0) -> None:
        """Stop the process. A job running now is left unfinished in the library (status
        "running"), so the next start offers to run it again."""
        with self._lock:
            self._closing = True
            proc, commands, events = self._proc, self._commands, self._events
            self._proc = self._commands = self._events = None
        if proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            commands.send(("quit",))
        proc.join(timeout)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout)
        for end in (commands, events):
            with contextlib.suppress(OSError):
                end.close()

    def run(
        self, job: FileJob, progress=None, cancel: threading.Event | None = None
    ) -> FileJobResult:
        """Run one job in the engine process and wait for it (on a worker thread)."""
        self.start()
        proc, commands, events = self._proc, self._commands, self._events
        with contextlib.suppress(OSError, ValueError):  # a dead engine is reported below
            commands.send(("job", job))
        asked_to_cancel: float | None = None
        while True:
            if cancel is not None and cancel.is_set() and asked_to_cancel is None:
                asked_to_cancel = time.monotonic()
                with contextlib.suppress(OSError, ValueError):
                    commands.send(("cancel",))
            try:
                message = events.recv() if events.poll(0.05) else None
            except (EOFError, OSError, ValueError):
                message = None
                proc.join(1.0)
            if message is not None:
                if message[0] == "progress" and progress is not None:
                    progress(*message[1:])
                elif message[0] == "done":
                    return message[1]
                continue
            if not proc.is_alive():
                if self._closing and asked_to_cancel is None:  # the app is quitting
                    return FileJobResult("running", error="stopped with the app")
                return self._crashed(proc.exitcode, asked_to_cancel is not None)
            if asked_to_cancel and time.monotonic() - asked_to_cancel > CANCEL_GRACE_S:
                log.warning("engine ignored cancel for %.0f s; stopping it", CANCEL_GRACE_S)
                self.close(timeout=1.0)
                return self._crashed(None, True)

    def _crashed(self, exitcode, cancelled: bool) -> FileJobResult:
        self.close(timeout=0.5)
        if cancelled:
            return FileJobResult("cancelled")
        return FileJobResult(
            "failed",
            error="The transcription engine stopped unexpectedly on this file"
            + (f" (exit code {exitcode})" if exitcode is not None else "")
            + ". The file may be damaged in a way that crashes the decoder, or the computer "
            "ran out of memory. Other files are not affected; try converting this one to WAV.",
        )


# --------------------------------------------------------------------------- the child side


def serve(commands, events) -> None:
    """The engine process: run jobs from ``commands`` until told to quit or the app goes away;
    progress and results go to ``events``."""
    _lower_priority()
    from .files import run_file_job  # the engine itself: loaded in this process only
    from .models import ModelCache

    jobs: queue.Queue = queue.Queue()
    current: list[threading.Event] = [threading.Event()]

    def send(*message) -> None:
        with contextlib.suppress(OSError, ValueError):
            events.send(message)

    def listen() -> None:
        while True:
            try:
                message = commands.recv()
            except (EOFError, OSError):  # the app is gone: stop what runs, then leave
                current[0].set()
                jobs.put(None)
                return
            if message[0] == "job":
                current[0] = threading.Event()
                jobs.put((message[1], current[0]))
            elif message[0] == "cancel":
                current[0].set()
            elif message[0] == "quit":
                current[0].set()
                jobs.put(None)
                return

    threading.Thread(target=listen, name="engine-listen", daemon=True).start()
    models = ModelCache(keep=1)  # one model at a time: they are big

    while (job := jobs.get()) is not None:
        request, cancel = job
        try:
            result = run_file_job(
                request, models.model, models.speaker_encoder,
                progress=lambda done, total, stage="": send("progress", done, total, stage),
                cancel=cancel,
            )  # fmt: skip
        except Exception as e:  # run_file_job catches a file's problems; this is a bug
            log.exception("engine: job %s", request.source)
            result = FileJobResult("failed", error=f"Unexpected error ({type(e).__name__}: {e})")
        send("done", result)


def _lower_priority() -> None:
    """Background work yields the CPU to the app's window and the user's other programs."""
    try:
        if hasattr(os, "nice"):
            os.nice(ENGINE_NICENESS)
        elif sys.platform == "win32":
            import ctypes

            below_normal = 0x4000
            kernel32 = ctypes.windll.kernel32  # type: ignore[attr-defined]
            kernel32.SetPriorityClass(kernel32.GetCurrentProcess(), below_normal)
    except OSError as e:
        log.info("engine priority unchanged: %s", e)
