"""Files transcribed on a DeskScribe server (``deskscribe serve``) instead of on this computer.

The file queue runs each job with a *runner*: ``run(job, progress=None, cancel=None) ->
FileJobResult`` (``service.files.local_runner``, the engine process's ``run``).
``remote_runner(url, key)`` is one more. It uploads the file to the server's job API
(``POST /v1/jobs``), polls the job for progress, cancels it there when asked (``DELETE``) and
returns the transcript (``GET /v1/jobs/{id}/result?format=deskscribe``). Like every runner it
never raises: a server that cannot be reached, a wrong key, the server's own errors, time-outs
and a server restarting mid-job all end in a failed ``FileJobResult`` whose message says what
to do, so the queue shows it in the file's row and goes on.

``check_server(url, key)`` is the Settings dialog's Test button: one line about the server, or
a ``RemoteError`` whose message says what is wrong.

Plain HTTP through httpx2 (the web framework is ``server/``'s alone), so the window needs none
of the server's dependencies.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2 as httpx

from .. import __version__
from ..errors import Cancelled, DeskScribeError
from ..transcript import Transcript
from .jobs import FileJob, FileJobResult

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10.0
# Every answer but an upload's comes at once; an upload's comes once the whole file is in.
READ_TIMEOUT_S = 60.0
POLL_S = 0.5
# The server may be away a while mid-job (restarted by its admin, a moment off the network);
# the job is polled again for this long before the file fails.
AWAY_GRACE_S = 120.0
# A full server (429) is waited for, as a queue waits: this long at most.
BUSY_WAIT_S = 30 * 60.0
_VARIANT = re.compile(r"-(fp32|fp16|int8)$")


class RemoteError(DeskScribeError):
    """Talking to the DeskScribe server failed; the message says why and what to do."""


class ServerUnreachable(RemoteError):
    """Nothing answered at the address (refused, unknown name, no route, no answer in time)."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(
            f"The DeskScribe server at {url} cannot be reached: {reason}. Check the address in "
            "Settings, or transcribe on this computer."
        )
        self.url, self.reason = url, reason


class ServerKeyError(RemoteError):
    """The server wants a key and the one given (or none) is not one of its keys."""

    def __init__(self, url: str, missing: bool) -> None:
        what = (
            "needs an API key: enter the key its administrator gave you in Settings"
            if missing
            else "did not accept the API key: check the key in Settings"
        )
        super().__init__(f"The DeskScribe server at {url} {what}.")
        self.url, self.missing = url, missing


class NotADeskScribeServer(RemoteError):
    """Something answered at the address, but not a DeskScribe server."""

    def __init__(self, url: str, what: str) -> None:
        super().__init__(
            f"{url} answered, but it is not a DeskScribe server ({what}). Check the address "
            "in Settings: it is the one `deskscribe serve` prints, e.g. http://HOST:8000."
        )


class ServerRefused(RemoteError):
    """The server answered a request with an error; the message is the server's own."""

    def __init__(
        self, status: int, message: str, code: str | None = None, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.retry_after = status, code, retry_after


class _UploadStopped(Cancelled):
    """Raised inside the upload's body when the user cancels, to abort the request."""


def normalize_url(url: str) -> str:
    """The server's root URL from what a user types: ``host:8000``, ``http://host:8000/``, or
    the base URL OpenAI clients are given (``http://host:8000/v1``)."""
    text = (url or "").strip()
    if not text:
        raise RemoteError("Enter the DeskScribe server's address in Settings, e.g. "
                          "http://HOST:8000.")  # fmt: skip
    if "://" not in text:
        text = "http://" + text
    text = text.rstrip("/")
    if text.endswith("/v1"):
        text = text[: -len("/v1")]
    try:
        parsed = httpx.URL(text)
    except httpx.InvalidURL as e:
        raise RemoteError(f"{url!r} is not a server address ({e}); write it as "
                          "http://HOST:PORT.") from None  # fmt: skip
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise RemoteError(f"{url!r} is not a server address; write it as http://HOST:PORT.")
    return text


def _reason(err: httpx.HTTPError) -> str:
    """What a network error means, in a few words ("connection refused")."""
    if isinstance(err, httpx.TimeoutException):
        return "it did not answer in time"
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(err).strip()) or type(err).__name__
    return text[:1].lower() + text[1:]


class RemoteClient:
    """The job API of one server, for one caller at a time. Every failure leaves as a
    ``RemoteError``: ``ServerUnreachable``, ``ServerKeyError``, ``ServerRefused``."""

    def __init__(self, url: str, key: str | None = None, *, timeout: float | None = None) -> None:
        self.url = normalize_url(url)
        headers = {"User-Agent": f"DeskScribe/{__version__}"}
        if key and key.strip():
            headers["Authorization"] = f"Bearer {key.strip()}"
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=httpx.Timeout(timeout or READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> RemoteClient:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as e:  # transport errors; nothing was answered
            raise ServerUnreachable(self.url, _reason(e)) from e
        if response.status_code == 401:
            raise ServerKeyError(self.url, missing="Authorization" not in self._http.headers)
        if response.status_code >= 400:
            raise _refused(response)
        return response

    def json(self, method: str, path: str, **kwargs: Any) -> dict:
        response = self.request(method, path, **kwargs)
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise NotADeskScribeServer(self.url, f"{method} {path} did not answer with JSON")
        return data

    def health(self) -> dict:
        try:
            data = self.json("GET", "/health")
        except ServerRefused as e:
            if e.status == 503 and e.code == "draining":
                return {"status": "draining"}
            raise NotADeskScribeServer(self.url, f"GET /health answered {e.status}") from None
        if data.get("status") not in ("ok", "draining"):
            raise NotADeskScribeServer(self.url, "GET /health did not answer as one does")
        return data

    def models(self) -> list[str]:
        data = self.json("GET", "/v1/models")
        items = data.get("data")
        if not isinstance(items, list):
            raise NotADeskScribeServer(self.url, "GET /v1/models is not a list of models")
        return [str(m["id"]) for m in items if isinstance(m, dict) and "id" in m]

    def submit(
        self, job: FileJob, model: str | None, cancel: threading.Event | None = None
    ) -> dict:
        """Upload ``job.source`` as a new job; the job object (status "queued")."""
        fields = {"response_format": "json" if job.speakers in ("", "off") else "diarized_json"}
        if model:
            fields["model"] = model
        if job.language:
            fields["language"] = job.language
        elif job.languages:  # detection among the user's languages only
            fields["languages"] = ",".join(job.languages)
        if job.speakers and job.speakers != "off":
            fields["speakers"] = job.speakers
        if job.vocabulary:  # Whisper's prompt is what spells names and jargon as written
            fields["prompt"] = job.vocabulary
        with open(job.source, "rb") as raw:
            upload = _CancellableFile(raw, cancel)
            files = {"file": (job.source.name, upload, "application/octet-stream")}
            # The answer comes once the whole file has been sent: the read time-out is per
            # piece read, so a long upload is no time-out.
            return self.json("POST", "/v1/jobs", data=fields, files=files)

    def job(self, job_id: str) -> dict:
        return self.json("GET", f"/v1/jobs/{job_id}")

    def result(self, job_id: str) -> Transcript:
        data = self.json("GET", f"/v1/jobs/{job_id}/result", params={"format": "deskscribe"})
        try:
            return Transcript.from_dict(data)
        except ValueError as e:
            raise RemoteError(f"The server's transcript could not be read: {e}") from None

    def cancel(self, job_id: str) -> None:
        """DELETE: a queued or running job is cancelled, a finished one forgotten."""
        self.request("DELETE", f"/v1/jobs/{job_id}", timeout=CONNECT_TIMEOUT_S)


def _refused(response: httpx.Response) -> ServerRefused:
    """The server's error envelope as an exception; a non-DeskScribe answer (a proxy's HTML
    page) as its status."""
    message, code = None, None
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        error = response.json()["error"]
        message, code = error.get("message"), error.get("code")
    if not message:
        message = f"the server answered {response.status_code} {response.reason_phrase}".strip()
    retry_after = None
    with contextlib.suppress(TypeError, ValueError):
        retry_after = float(response.headers.get("retry-after"))
    return ServerRefused(response.status_code, str(message), code, retry_after)


class _CancellableFile:
    """The uploaded file as httpx reads it (in 64 KiB pieces): a cancel stops the upload at
    the next piece instead of after the whole file."""

    def __init__(self, raw, cancel: threading.Event | None) -> None:
        self._raw, self._cancel = raw, cancel

    def read(self, size: int = -1) -> bytes:
        if self._cancel is not None and self._cancel.is_set():
            raise _UploadStopped()
        return self._raw.read(size)

    def fileno(self) -> int:  # httpx takes the size from it, for Content-Length
        return self._raw.fileno()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()


# --------------------------------------------------------------------------- the Test button


def check_server(url: str, key: str | None = None) -> str:
    """One line about the server at ``url`` for the Settings dialog ("DeskScribe server, 2
    models: …"), after checking that it answers, is a DeskScribe server and takes ``key``.
    Raises a ``RemoteError`` saying what is wrong (blocking: call it on a worker thread)."""
    with RemoteClient(url, key, timeout=CONNECT_TIMEOUT_S) as client:
        health = client.health()
        if health.get("status") == "draining":
            raise RemoteError(f"The DeskScribe server at {client.url} is shutting down; "
                              "try again once it is back.")  # fmt: skip
        try:
            models = client.models()
        except ServerRefused as e:
            raise NotADeskScribeServer(client.url, f"GET /v1/models: {e}") from None
    if not models:
        return f"Connected to the DeskScribe server at {client.url}, but it has no model."
    names = ", ".join(models[:4]) + (f" and {len(models) - 4} more" if len(models) > 4 else "")
    plural = "model" if len(models) == 1 else "models"
    return f"Connected to the DeskScribe server at {client.url}: {len(models)} {plural} ({names})."


# --------------------------------------------------------------------------- the runner


def remote_runner(
    url: str,
    key: str | None = None,
    *,
    poll_s: float = POLL_S,
    away_grace_s: float = AWAY_GRACE_S,
    quitting: Callable[[], bool] | None = None,
) -> Callable[..., FileJobResult]:
    """A runner (``run(job, progress=None, cancel=None) -> FileJobResult``) that transcribes
    on the server at ``url``, never raising. ``quitting()`` true when ``cancel`` is set: the
    app is closing, and the job ends as "running" (unfinished, offered again at the next
    start) rather than "cancelled", as the engine process's jobs do."""

    def run(job: FileJob, progress=None, cancel: threading.Event | None = None) -> FileJobResult:
        cancel = cancel if cancel is not None else threading.Event()
        try:
            client = RemoteClient(url, key)
        except RemoteError as e:  # an address that is not one
            return FileJobResult("failed", error=str(e))
        try:
            remote = _RemoteJob(client, job, progress, cancel, poll_s, away_grace_s)
            remote.quitting = quitting or (lambda: False)
            return remote.run()
        except Exception as e:  # a bug: still, this file fails alone and the queue goes on
            log.exception("remote job %s failed", job.source)
            return FileJobResult("failed", error=f"Unexpected error ({type(e).__name__}: {e})")
        finally:
            client.close()

    return run


class _RemoteJob:
    def __init__(self, client, job, progress, cancel, poll_s, away_grace_s) -> None:
        self.client, self.job, self.progress, self.cancel = client, job, progress, cancel
        self.poll_s, self.away_grace_s = poll_s, away_grace_s
        self.notes: list[str] = []
        self.duration: float | None = None
        self.quitting: Callable[[], bool] = lambda: False

    def _stopped(self) -> FileJobResult:
        if self.quitting():
            return self._result("running", error="stopped with the app")
        return self._result("cancelled")

    def run(self) -> FileJobResult:
        if self.cancel.is_set():
            return self._stopped()
        if not Path(self.job.source).is_file():
            return FileJobResult("failed", error=f"{self.job.source} no longer exists.")
        try:
            too_big = self._too_big()
            if too_big:
                return FileJobResult("failed", error=too_big)
            model = self._model()
            created = self._submit(model)
            if created is None:
                return self._stopped()
            return self._follow(str(created["id"]))
        except (ServerUnreachable, ServerKeyError, NotADeskScribeServer) as e:
            return FileJobResult("failed", error=str(e))
        except ServerRefused as e:
            return FileJobResult("failed", error=_server_says(e, self.client.url))
        except RemoteError as e:
            return FileJobResult("failed", error=str(e))
        except OSError as e:  # the file itself (moved, unreadable) while uploading
            return FileJobResult("failed", error=f"{self.job.source.name} could not be read: {e}")

    def _too_big(self) -> str | None:
        """Why the file cannot go to this server (over its job upload limit, which /health
        tells), said before the upload: a refused upload may look like a lost connection."""
        limit = (self.client.health().get("limits") or {}).get("max_job_upload_mb")
        size = Path(self.job.source).stat().st_size
        if not isinstance(limit, (int, float)) or size <= limit * 1048576:
            return None
        return (
            f"{Path(self.job.source).name} is {size / 1048576:.0f} MB; the server at "
            f"{self.client.url} takes at most {limit:g} MB per file (its --max-job-upload-mb). "
            "Transcribe it on this computer, or ask for a larger limit."
        )

    def _model(self) -> str | None:
        """The job's model on the server: the same one, else the same model in another
        variant (this computer's int8 is the server's fp16), else the server's default, noted.
        The job's model was fixed from what this computer has installed."""
        wanted = Path(self.job.model).name if self.job.model else None
        try:
            installed = self.client.models()
        except ServerRefused:
            return wanted  # let the job say what is wrong
        if wanted is None or wanted in installed:
            return wanted
        base = _VARIANT.sub("", wanted)
        same = [m for m in installed if _VARIANT.sub("", m) == base]
        if same:
            return same[0]
        self.notes.append(f"The server has no {wanted}; its default model transcribed it.")
        return None

    def _submit(self, model: str | None) -> dict | None:
        """The new job, waiting while the server is full (429) or restarting (503); None
        when cancelled meanwhile."""
        busy_until = time.monotonic() + BUSY_WAIT_S
        away_until = time.monotonic() + self.away_grace_s
        while True:
            try:
                created = self.client.submit(self.job, model, self.cancel)
            except _UploadStopped:  # the user's cancel, raised out of the upload's body
                return None
            except ServerUnreachable as e:
                if _upload_stopped(e):  # the same, wrapped by the transport
                    return None
                raise
            except ServerRefused as e:
                now = time.monotonic()
                waiting = (e.status == 429 and now < busy_until) or (
                    e.status == 503 and now < away_until
                )
                if not waiting:
                    raise
                if self.cancel.wait(min(max(e.retry_after or 5.0, 1.0), 30.0)):
                    return None
                continue
            if "id" not in created:
                raise NotADeskScribeServer(self.client.url, "POST /v1/jobs did not make a job")
            return created

    def _follow(self, job_id: str) -> FileJobResult:
        """Poll the job until it ends; cancel it on the server when asked."""
        away_since: float | None = None
        last_error = ""
        reported = -1.0
        while True:
            if self.cancel.is_set():
                with contextlib.suppress(RemoteError):  # it goes when the server is back
                    self.client.cancel(job_id)
                return self._stopped()
            try:
                info = self.client.job(job_id)
            except (ServerUnreachable, ServerRefused) as e:
                gone = isinstance(e, ServerRefused) and e.status == 404
                if gone:
                    return self._result("failed", error=(
                        f"The DeskScribe server at {self.client.url} no longer has this job (it "
                        "may have restarted and lost it). Retry sends the file again."
                    ))  # fmt: skip
                if isinstance(e, ServerRefused) and e.status not in (502, 503, 504):
                    raise
                now = time.monotonic()
                away_since = away_since or now
                last_error = getattr(e, "reason", None) or str(e)
                if now - away_since > self.away_grace_s:
                    return self._result("failed", error=(
                        f"The DeskScribe server at {self.client.url} stopped answering while it "
                        f"transcribed this file ({last_error}; for {now - away_since:.0f} s). "
                        "Retry it, or transcribe on this computer."
                    ))  # fmt: skip
                self.cancel.wait(min(2.0, max(self.poll_s, 0.5)))
                continue
            away_since = None
            if isinstance(info.get("duration"), int | float):
                self.duration = float(info["duration"])
            status = info.get("status")
            fraction = _fraction(info.get("progress"))
            if status == "running" and self.progress is not None and fraction != reported:
                reported = fraction
                self.progress(fraction, 1.0, "")  # the server's own share of the stages
            if status == "done":
                try:
                    transcript = self.client.result(job_id)
                except ServerRefused as e:
                    if e.status == 409:  # done, but its result not written yet
                        self.cancel.wait(self.poll_s)
                        continue
                    raise
                transcript.source = str(self.job.source)
                self._forget(job_id)
                return self._result("done", transcript=transcript)
            if status == "failed":
                error = info.get("error") or {}
                message = error.get("message") if isinstance(error, dict) else str(error)
                self._forget(job_id)
                return self._result("failed", error=(
                    "The DeskScribe server could not transcribe this file: "
                    + (message or "it gave no reason")
                ))  # fmt: skip
            if status == "cancelled":
                return self._result("cancelled", error="Cancelled on the server.")
            self.cancel.wait(self.poll_s)

    def _forget(self, job_id: str) -> None:
        """Delete a finished job on the server: its transcript is this computer's now (in the
        library), and a recording's text should not stay on a shared server for nothing."""
        with contextlib.suppress(RemoteError):  # the server's own clean-up is no failure here
            self.client.cancel(job_id)

    def _result(self, status: str, *, error: str | None = None, transcript=None) -> FileJobResult:
        if transcript is not None and self.duration is None:
            self.duration = transcript.duration
        return FileJobResult(
            status, error=error, transcript=transcript, duration=self.duration,
            notes=list(self.notes) if status == "done" else [],
        )  # fmt: skip


def _upload_stopped(err: BaseException) -> bool:
    """Whether ``err`` (or what caused it) is the user's cancel of an upload."""
    seen = err
    while seen is not None:
        if isinstance(seen, _UploadStopped):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _fraction(value: Any) -> float:
    try:
        return min(1.0, max(0.0, float(value)))
    except (TypeError, ValueError):
        return 0.0


def _server_says(err: ServerRefused, url: str) -> str:
    """The server's own message for what it refused, said to be the server's."""
    if err.status == 404 and err.code is None and "no such route" in str(err):
        return (f"The server at {url} has no job API (an older DeskScribe server?): "
                "update it, or transcribe on this computer.")  # fmt: skip
    if err.status == 429:
        return f"The DeskScribe server at {url} stayed busy; retry later. ({err})"
    return f"The DeskScribe server did not take this file: {err}"
