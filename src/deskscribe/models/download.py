"""Download a model's files from the Hugging Face hub into a folder we own, resumably.

Why not ``hf_hub_download(local_dir=...)``: in huggingface_hub 2.x it streams into a
process-unique ``<etag>.<uuid>.incomplete`` file and deletes it when anything goes wrong, so a
cancelled, crashed or long-interrupted download starts again from byte 0 (it resumes only
within one call, when the connection drops and comes back within its retries). We keep one
partial file per (file, etag) under ``dest/.partial/`` and hand it to huggingface_hub's own
``http_get`` with ``resume_size``, which sends the ``Range`` request; the metadata comes from
its ``get_hf_file_metadata`` (HEAD on ``/resolve``), so the hub protocol stays the library's.

Layout of ``dest``: the finished files at their repo paths, ``.partial/`` for pieces,
``.done.json`` (path → etag of each finished, verified file) and ``.lock``, which serialises
downloads into the same folder across threads and processes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import filelock
import httpx2
from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.file_download import http_get
from huggingface_hub.utils import build_hf_headers

from ..errors import Cancelled, DeskScribeError, Progress
from ..fsutil import UnsafePathError, inside, write_atomic

_SHA256_HEX = frozenset("0123456789abcdef")
_DONE = ".done.json"
_PARTIAL = ".partial"


class DownloadError(DeskScribeError):
    """Base class: a model download failed (the message says what to do)."""


class UnsafeFileNameError(DownloadError):
    """The hub (or a mirror) named a file outside the model folder."""


class OfflineError(DownloadError):
    """The hub cannot be reached (no network, hub down, or HF_HUB_OFFLINE is set)."""


class RepoNotFoundError(DownloadError):
    """The repo, revision or file does not exist on the hub (or needs a login)."""


class GatedError(RepoNotFoundError):
    """The repo asks users to accept its conditions, and no token that did was sent."""


class NotEnoughDiskError(DownloadError):
    """Too little free space in the download folder."""

    def __init__(self, message: str, needed: int, free: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.free = free


class DiskFullError(DownloadError):
    """The disk ran out of space during the download (partial files are kept for resuming)."""


class ChecksumError(DownloadError):
    """A file's sha256 did not match the hub's, twice in a row."""


class DownloadCancelled(DownloadError, Cancelled):
    """The caller cancelled; partial files stay in place and the next call resumes them."""


@dataclass
class RepoFile:
    path: str
    size: int
    sha256: str | None  # LFS files only: the hub publishes no sha256 for plain git files


@dataclass
class _Remote:
    path: str
    url: str
    etag: str
    size: int | None
    sha256: str | None
    same_host: bool  # False when the hub redirects to a CDN: the token must not go there


def list_repo_files(
    repo_id: str,
    revision: str = "main",
    endpoint: str | None = None,
    token: str | None = None,
) -> list[RepoFile]:
    """The files of ``repo_id`` at ``revision``, with sizes and (for LFS files) sha256."""
    _refuse_if_offline(repo_id)
    with _hub_errors(repo_id, revision):
        info = HfApi(
            endpoint=_endpoint(endpoint), token=_token_for(_endpoint(endpoint), token)
        ).model_info(repo_id, revision=revision, files_metadata=True)
    return [
        RepoFile(
            path=s.rfilename,
            size=s.lfs.size if s.lfs else (s.size or 0),
            sha256=s.lfs.sha256 if s.lfs else None,
        )
        for s in info.siblings or []
    ]


def download_files(
    repo_id: str,
    files: list[str],
    dest: Path,
    *,
    revision: str = "main",
    endpoint: str | None = None,
    token: str | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Download ``files`` of ``repo_id`` into ``dest`` and return ``dest``.

    Files already finished (and still current on the hub) are skipped, partial ones resumed.
    ``progress(done, total)`` counts bytes over all files and never goes backwards;
    ``cancel`` is checked between chunks (huggingface_hub reads 10 MB at a time).
    """
    dest = Path(dest)
    cancel = cancel or threading.Event()
    for name in files:
        try:
            inside(dest, name)
        except UnsafePathError as err:
            raise UnsafeFileNameError(
                f"{repo_id} lists a file name that leads out of the model folder ({name!r}); "
                "nothing was downloaded. Check HF_ENDPOINT or the mirror you use"
            ) from err
    _refuse_if_offline(repo_id)
    dest.mkdir(parents=True, exist_ok=True)
    with _locked(dest / ".lock", cancel):
        headers = build_hf_headers(token=_token_for(_endpoint(endpoint), token))
        remotes = _resolve(repo_id, files, revision, _endpoint(endpoint), headers)
        done = _read_done(dest)
        todo = [r for r in remotes if not _is_finished(dest, r, done)]
        _check_disk(dest, todo)
        meter = _Meter(progress, sum(r.size or 0 for r in remotes))
        for r in remotes:
            meter.set(r.path, _have(dest, r, done))
        meter.report()
        for remote in todo:
            if cancel.is_set():
                raise DownloadCancelled(f"download of {repo_id} cancelled")
            with _hub_errors(repo_id, revision):
                _fetch_verified(repo_id, remote, dest, headers, meter, cancel)
            done[remote.path] = remote.etag
            _write_done(dest, done)
        meter.finish()
    return dest


# --------------------------------------------------------------------------- hub calls


def _endpoint(endpoint: str | None) -> str:
    return (endpoint or os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


OFFICIAL_HUB = "https://huggingface.co"


def _token_for(endpoint: str, token: str | None) -> str | bool | None:
    """The token to send: one given explicitly goes where it was given for; the token saved
    on this computer (``hf auth login``, ``HF_TOKEN``) only to the official hub, never to a
    custom ``HF_ENDPOINT`` or mirror (False: send none)."""
    if token is not None:
        return token
    return None if endpoint == OFFICIAL_HUB else False


def _refuse_if_offline(repo_id: str) -> None:
    env = os.environ.get("HF_HUB_OFFLINE", "").upper() in {"1", "ON", "YES", "TRUE"}
    if env or constants.is_offline_mode():
        raise _offline(repo_id, "offline mode is on (HF_HUB_OFFLINE)")


def _offline(repo_id: str, reason: str) -> OfflineError:
    return OfflineError(
        f"Cannot download {repo_id}: {reason}. The model has to be downloaded once with an "
        "internet connection; without one, build it from a local checkpoint folder "
        "(deskscribe models build <folder>) or install the offline starter model "
        "(deskscribe models install-starter)."
    )


@contextmanager
def _hub_errors(repo_id: str, revision: str) -> Iterator[None]:
    """Turn huggingface_hub / httpx2 failures into our user-facing errors."""
    try:
        yield
    except OfflineModeIsEnabled as e:
        raise _offline(repo_id, "offline mode is on (HF_HUB_OFFLINE)") from e
    except RevisionNotFoundError as e:
        raise RepoNotFoundError(
            f"{repo_id} has no revision {revision!r}; check the revision name"
        ) from e
    except EntryNotFoundError as e:
        raise RepoNotFoundError(
            f"a file is missing from {repo_id} at {revision!r} ({e}); check the file names"
        ) from e
    except GatedRepoError as e:
        raise GatedError(
            f"{repo_id} is gated: accept its conditions once at https://huggingface.co/"
            f"{repo_id} (a free account), then log in on this computer (hf auth login) or "
            "pass an access token (--token, or HF_TOKEN)"
        ) from e
    except RepositoryNotFoundError as e:
        raise RepoNotFoundError(
            f"{repo_id} was not found on the hub; check the model id, or log in "
            "(hf auth login) if it is private or gated"
        ) from e
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else 0
        if status >= 500 or status == 429:
            raise _offline(repo_id, f"the hub is unavailable (HTTP {status})") from e
        raise DownloadError(f"the hub refused the download of {repo_id}: {e}") from e
    except httpx2.TransportError as e:
        raise _offline(repo_id, f"the hub cannot be reached ({e})") from e
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DiskFullError(
                f"The disk filled up while downloading {repo_id} ({e.filename or 'models folder'}). "
                "What was downloaded is kept: free some space and run the same command again to "
                "resume, or choose a models folder on another drive (deskscribe config models_dir)."
            ) from e
        raise


def _resolve(
    repo_id: str, files: list[str], revision: str, endpoint: str, headers: dict[str, str]
) -> list[_Remote]:
    """HEAD every file; pin the commit of the first so all files come from one revision."""
    remotes = []
    with _hub_errors(repo_id, revision):
        for path in files:
            url = hf_hub_url(repo_id, path, revision=revision, endpoint=endpoint)
            meta = get_hf_file_metadata(url, token=False, headers=headers, endpoint=endpoint)
            if meta.etag is None or meta.commit_hash is None:
                raise DownloadError(
                    f"{endpoint} did not answer like a Hugging Face hub for {repo_id}/{path}; "
                    "check HF_ENDPOINT and any proxy settings"
                )
            revision = meta.commit_hash
            sha = meta.etag if len(meta.etag) == 64 and set(meta.etag) <= _SHA256_HEX else None
            same = urlsplit(meta.location).netloc == urlsplit(url).netloc
            remotes.append(_Remote(path, meta.location, meta.etag, meta.size, sha, same))
    return remotes


# --------------------------------------------------------------------------- local files


@contextmanager
def _locked(path: Path, cancel: threading.Event) -> Iterator[None]:
    lock = filelock.FileLock(str(path))
    while True:
        if cancel.is_set():
            raise DownloadCancelled(
                f"cancelled while waiting for another download into {path.parent}"
            )
        try:
            lock.acquire(timeout=0.2)
            break
        except filelock.Timeout:
            continue
    try:
        yield
    finally:
        lock.release()


def _read_done(dest: Path) -> dict[str, str]:
    try:
        return dict(json.loads((dest / _DONE).read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return {}


def _write_done(dest: Path, done: dict[str, str]) -> None:
    write_atomic(dest / _DONE, json.dumps(done, indent=1), private=False)


def _partial(dest: Path, remote: _Remote) -> Path:
    """The partial download of ``remote``: its checked path and a hash of its ETag (hub
    metadata: ``a/../../..`` must not become a part of a file name)."""
    tag = hashlib.sha256(remote.etag.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return dest / _PARTIAL / f"{remote.path}.{tag}.incomplete"


def _is_finished(dest: Path, remote: _Remote, done: dict[str, str]) -> bool:
    target = dest / remote.path
    return (
        done.get(remote.path) == remote.etag
        and target.is_file()
        and (remote.size is None or target.stat().st_size == remote.size)
    )


def _have(dest: Path, remote: _Remote, done: dict[str, str]) -> int:
    """Bytes of ``remote`` already on disk (finished file, or a usable partial)."""
    if _is_finished(dest, remote, done):
        return (dest / remote.path).stat().st_size
    partial = _partial(dest, remote)
    if partial.is_file() and (remote.size is None or partial.stat().st_size <= remote.size):
        return partial.stat().st_size
    return 0


def _check_disk(dest: Path, todo: list[_Remote]) -> None:
    needed = sum(max((r.size or 0) - _have(dest, r, {}), 0) for r in todo)
    free = shutil.disk_usage(dest).free
    if needed > free:
        raise NotEnoughDiskError(
            f"Not enough disk space in {dest}: the download needs {_mb(needed)} but only "
            f"{_mb(free)} is free. Free up {_mb(needed - free)} or more, or choose a "
            "models folder on another drive (DESKSCRIBE_MODELS_DIR).",
            needed=needed,
            free=free,
        )


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


# --------------------------------------------------------------------------- transfer


class _Meter:
    """Byte progress over all files; reports only forward movement, ends at the total.

    Bytes are kept per file, so a restarted file (server ignored Range, bad checksum) is
    counted once; the reported value then waits until real progress passes it again.
    """

    def __init__(self, callback: Progress | None, total: int) -> None:
        self.callback = callback
        self.total = total
        self.files: dict[str, int] = {}
        self.reported = -1

    def set(self, path: str, n: int) -> None:
        self.files[path] = n

    def advance(self, path: str, n: int) -> None:
        self.files[path] = self.files.get(path, 0) + n
        self.report()

    def report(self) -> None:
        shown = min(sum(self.files.values()), self.total)
        if shown > self.reported:
            self.reported = shown
            if self.callback is not None:
                self.callback(shown, self.total)

    def finish(self) -> None:
        if self.reported < self.total and self.callback is not None:
            self.callback(self.total, self.total)
        self.reported = self.total


def _bar_class(path: str, meter: _Meter, cancel: threading.Event) -> type[Any]:
    """A stand-in for tqdm that http_get builds per request and updates once per chunk."""

    class _Bar:
        def __init__(self, *, initial: int = 0, **_: Any) -> None:
            meter.set(path, initial)  # http_get passes the resume offset it really uses

        def __enter__(self) -> _Bar:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def update(self, n: int) -> None:
            # Called just before the chunk is written: cancelling here leaves a clean prefix.
            if cancel.is_set():
                raise DownloadCancelled("download cancelled")
            meter.advance(path, n)  # negative when the server ignored Range

        def close(self) -> None:
            pass

    return _Bar


def _fetch_verified(
    repo_id: str,
    remote: _Remote,
    dest: Path,
    headers: dict[str, str],
    meter: _Meter,
    cancel: threading.Event,
) -> None:
    """Download (resuming) into the partial file, check sha256, move into place."""
    partial = _partial(dest, remote)
    for attempt in (1, 2):
        _fetch(remote, partial, headers, meter, cancel)
        if remote.sha256 is None or _sha256(partial) == remote.sha256:
            target = dest / remote.path
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(partial, target)
            return
        partial.unlink()
        meter.set(remote.path, 0)
        if attempt == 2:
            raise ChecksumError(
                f"{repo_id}/{remote.path} arrived corrupted twice (sha256 mismatch); check the "
                "network or proxy, then retry the download"
            )


def _fetch(
    remote: _Remote,
    partial: Path,
    headers: dict[str, str],
    meter: _Meter,
    cancel: threading.Event,
) -> None:
    partial.parent.mkdir(parents=True, exist_ok=True)
    have = partial.stat().st_size if partial.exists() else 0
    if remote.size is not None and have > remote.size:
        partial.unlink()
        have = 0
    get_headers = {**headers, "Accept-Encoding": "identity"}  # byte ranges of the real file
    if not remote.same_host:
        get_headers.pop("authorization", None)
    with open(partial, "ab") as fh:
        http_get(
            remote.url,
            fh,
            resume_size=have,
            headers=get_headers,
            expected_size=remote.size,
            displayed_filename=remote.path,
            tqdm_class=_bar_class(remote.path, meter, cancel),
        )
