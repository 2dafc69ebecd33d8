"""Live recording to disk that survives crashes, kill -9 and a full disk.

`SessionRecorder` writes one session folder; its layout and the guarantees of each file are
described in `session_files`. Listing, recovering and exporting sessions is in `sessions`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import av
import numpy as np

from ..errors import DeskScribeError
from ..fsutil import fsync_dir, private_dir
from ..paths import sessions_dir
from .session_files import (
    DISK_FULL,
    JOURNAL,
    LIVE_STATES,
    LOCK,
    O_BINARY,
    RESERVE,
    RESERVE_BYTES,
    TRACK_RE,
    TRANSCRIPT,
    finalize_chunk,
    read_pcm,
    scan_chunks,
    write_all,
    write_atomic,
)

log = logging.getLogger(__name__)

_RESERVED = {"format", "version", "id", "created", "updated", "tracks", "sample_rate"}
_RESERVED |= {"chunk_seconds", "state", "stop_reason", "chunks"}


class RecorderError(DeskScribeError):
    """Recording or recovery failed; `str(err)` is a message fit for the user."""


class RecorderDiskFullError(RecorderError):
    """The disk filled up: the recording was stopped cleanly and everything before it kept."""


class SessionInUseError(RecorderError):
    """Another DeskScribe window (or process) is recording or recovering this session."""


def _hms(seconds: float) -> str:
    s = int(seconds)
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


class FolderLock:
    """An exclusive OS lock on ``<folder>/.lock``, released by the OS if the process dies."""

    def __init__(self, folder: Path, create: bool = True) -> None:
        flags = os.O_RDWR | (os.O_CREAT if create else 0) | O_BINARY
        self._fd: int | None = os.open(folder / LOCK, flags, 0o600)
        try:
            if os.name == "nt":
                import msvcrt

                msvcrt.locking(self._fd, msvcrt.LK_NBLCK, 1)
            else:
                import fcntl

                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise SessionInUseError(
                f"The recording in '{folder}' is in use by another DeskScribe window. "
                "Stop it there, or wait until it is finished."
            ) from None

    def release(self) -> None:
        if self._fd is not None:
            if os.name == "nt":
                import msvcrt

                with contextlib.suppress(OSError):
                    msvcrt.locking(self._fd, msvcrt.LK_UNLCK, 1)
            os.close(self._fd)  # closing drops a flock
            self._fd = None


def is_held(folder: Path) -> bool:
    try:
        FolderLock(folder, create=False).release()
    except SessionInUseError:
        return True
    except OSError:
        return False  # no lock file: no recorder ever held it, or it cannot be opened
    return False


class _Track:
    def __init__(self, name: str) -> None:
        self.name, self.index, self.fd = name, 0, None
        self.done = self.current = self.synced = 0  # samples in finished chunks / current
        self.last_sync = time.monotonic()
        self.chunks: list[dict[str, Any]] = []

    @property
    def total(self) -> int:
        return self.done + self.current


class SessionRecorder:
    """Writes live audio of one or more tracks into a session folder (layout: `session_files`).

    Thread-safe: capture callbacks of different tracks may call `write` from their own threads.
    """

    def __init__(
        self,
        folder: Path | None = None,
        tracks: Sequence[str] = ("mic",),
        *,
        sample_rate: int = 16000,
        chunk_seconds: float = 30.0,
        sync_seconds: float = 0.5,
        meta: dict | None = None,
    ) -> None:
        if not tracks or len(set(tracks)) != len(tracks) or not all(map(TRACK_RE.match, tracks)):
            raise ValueError(f"tracks must be distinct names of a-z, 0-9 and _, got {tracks}")
        now = datetime.now().astimezone()
        if folder is None:
            folder = sessions_dir() / f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
        self.folder, self.id = Path(folder), Path(folder).name
        self.sample_rate, self._sync_s = sample_rate, sync_seconds
        self._chunk = max(1, round(chunk_seconds * sample_rate))
        self._tracks = {t: _Track(t) for t in tracks}
        self._mutex = threading.Lock()
        self._closed = False
        self._failure: RecorderError | None = None  # why a write error stopped it
        self._journal: dict[str, Any] = {"title": None, "model": None, "source": None}
        if _RESERVED & (meta or {}).keys():
            raise ValueError(f"the recorder manages {sorted(_RESERVED & meta.keys())} itself")
        self._journal.update(meta or {})
        self._journal.update(
            format="deskscribe-session", version=1, id=self.id, created=now.isoformat(),
            tracks=list(tracks), sample_rate=sample_rate, chunk_seconds=chunk_seconds,
            state="recording", stop_reason=None,
        )  # fmt: skip
        try:
            private_dir(self.folder)
            self._lock = FolderLock(self.folder)
        except OSError as e:
            raise self._error(e, "start") from None
        if (self.folder / JOURNAL).exists() or scan_chunks(self.folder):
            self._lock.release()
            raise RecorderError(f"'{self.folder}' already holds a recording; choose a new folder.")
        try:
            write_atomic(self.folder / RESERVE, bytes(RESERVE_BYTES))
            self._save_journal()
        except OSError as e:
            raise self._fail(e) from None

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def samples(self, track: str) -> int:
        """Samples of ``track`` handed to the OS so far (a kill -9 loses none of them)."""
        return self._tracks[track].total

    def synced_samples(self, track: str) -> int:
        """Samples of ``track`` fsync'd so far (a power cut loses none of them)."""
        return self._tracks[track].synced

    def write(self, track: str, samples: np.ndarray) -> None:
        """Append float32 samples in [-1, 1] (louder ones are clipped) to ``track``."""
        t = self._tracks[track]
        x = np.nan_to_num(np.asarray(samples, np.float32).reshape(-1))
        data = np.clip(np.rint(x * 32768.0), -32768, 32767).astype("<i2")
        with self._mutex:
            self._check_open()
            try:
                pos = 0
                while pos < len(data):
                    if t.fd is None:
                        path = self._path(t, "pcm")
                        t.fd = os.open(
                            path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | O_BINARY, 0o600
                        )
                        fsync_dir(self.folder)
                    n = min(len(data) - pos, self._chunk - t.current)
                    write_all(t.fd, data[pos : pos + n].tobytes())
                    pos, t.current = pos + n, t.current + n
                    if t.current >= self._chunk:
                        self._finish(t)
                # By audio time too, so a burst after a stall (catching up) is not left unsynced.
                due = t.total - t.synced >= self._sync_s * self.sample_rate
                if t.fd is not None and (due or time.monotonic() - t.last_sync >= self._sync_s):
                    self._sync(t)
            except OSError as e:
                raise self._fail(e) from None

    def set_state(self, state: str) -> None:
        """Mark the session "recording" or "paused" in the journal (audio is fsync'd first)."""
        if state not in LIVE_STATES:
            raise ValueError(f"state must be 'recording' or 'paused', got {state!r}")
        with self._mutex:
            self._check_open()
            try:
                for t in self._tracks.values():
                    self._sync(t)
                self._journal["state"] = state
                self._save_journal()
            except OSError as e:
                raise self._fail(e) from None

    def update_meta(self, **fields: Any) -> None:
        """Change title/model/source (or other extra keys) in the journal."""
        if _RESERVED & fields.keys():
            raise ValueError(f"the recorder manages {sorted(_RESERVED & fields.keys())} itself")
        with self._mutex:
            self._journal.update(fields)
            try:
                self._save_journal()
            except OSError as e:
                raise (self._error(e, "journal") if self._closed else self._fail(e)) from None

    def save_transcript(self, data: dict) -> None:
        """Replace ``transcript.json`` atomically with ``data`` (Transcript JSON + tentative text).

        Also allowed after `close`. A full disk while recording stops the recording.
        """
        payload = json.dumps(data, ensure_ascii=False).encode("utf-8")
        with self._mutex:
            try:
                write_atomic(self.folder / TRANSCRIPT, payload)
            except OSError as e:
                raise (self._error(e, "transcript") if self._closed else self._fail(e)) from None

    def close(self) -> None:
        """Flush, fsync, turn the open chunks into FLAC and mark the session "stopped".

        A FLAC conversion that fails (e.g. the disk is full) keeps its ``.pcm``; that is not an
        error, `read_track` and `recover` read it.
        """
        with self._mutex:
            if self._closed:
                return
            try:
                for t in self._tracks.values():
                    if t.fd is not None:
                        self._finish(t, quiet=True)
                self._journal.update(state="stopped")
                self._save_journal()
                with contextlib.suppress(OSError):
                    (self.folder / RESERVE).unlink()
            except OSError as e:
                raise self._fail(e) from None
            self._closed = True
            self._lock.release()

    # --- internals (called with self._mutex held) -------------------------------------------

    def _path(self, t: _Track, ext: str) -> Path:
        return self.folder / f"{t.name}-{t.index:06d}.{ext}"

    def _check_open(self) -> None:
        if self._closed:
            # After a write error every later call says why it stopped, not just that it did.
            raise self._failure or RecorderError(
                "This recording has stopped. Start a new recording."
            )

    def _sync(self, t: _Track) -> None:
        if t.fd is not None:
            os.fsync(t.fd)
        t.synced, t.last_sync = t.total, time.monotonic()

    def _finish(self, t: _Track, quiet: bool = False) -> None:
        """Close the current chunk and convert it to FLAC; the raw file stays if that fails."""
        assert t.fd is not None
        self._sync(t)
        os.close(t.fd)
        t.fd = None
        pcm, n = self._path(t, "pcm"), t.current
        t.done, t.current, t.index = t.done + n, 0, t.index + 1
        try:
            name = finalize_chunk(pcm, read_pcm(pcm), self.sample_rate).name
        except (OSError, av.FFmpegError, ValueError) as e:
            if isinstance(e, OSError) and e.errno in DISK_FULL and not quiet:
                t.chunks.append({"file": pcm.name, "samples": n})
                raise
            log.warning("keeping '%s' as raw audio: FLAC conversion failed (%s)", pcm, e)
            name = pcm.name
        t.chunks.append({"file": name, "samples": n})
        self._save_journal()

    def _save_journal(self) -> None:
        self._journal["chunks"] = {t.name: t.chunks for t in self._tracks.values()}
        self._journal["updated"] = datetime.now().astimezone().isoformat()
        write_atomic(self.folder / JOURNAL, json.dumps(self._journal, indent=1).encode())

    def _fail(self, e: OSError) -> RecorderError:
        """Stop cleanly after a write error: keep every whole sample on disk, say why."""
        with contextlib.suppress(OSError):
            (self.folder / RESERVE).unlink()  # room for the journal below
        for t in self._tracks.values():
            if t.fd is not None:
                with contextlib.suppress(OSError):
                    t.current = os.fstat(t.fd).st_size // 2
                    os.ftruncate(t.fd, t.current * 2)  # drop a half-written sample
                    os.fsync(t.fd)
                    t.synced = t.total
                with contextlib.suppress(OSError):
                    os.close(t.fd)
                t.fd = None
        reason = "disk full" if e.errno in DISK_FULL else (e.strerror or str(e))
        self._journal.update(state="stopped", stop_reason=reason)
        with contextlib.suppress(OSError):
            self._save_journal()
        if not self._closed:
            self._closed = True
            if hasattr(self, "_lock"):
                self._lock.release()
        self._failure = self._error(e, "record")
        return self._failure

    def _error(self, e: OSError, doing: str) -> RecorderError:
        kept = min(t.total for t in self._tracks.values()) / self.sample_rate
        what = f"everything up to {_hms(kept)} is kept" if kept else "nothing had been recorded yet"
        if doing in ("transcript", "journal"):
            what = f"the audio is kept, the latest {doing} changes are not"
        if e.errno in DISK_FULL:
            return RecorderDiskFullError(
                f"The disk is full at '{self.folder}'. Recording stopped; {what}. "
                "Free some space and start again."
            )
        return RecorderError(
            f"Could not write to '{self.folder}' ({e.strerror or e}). Recording stopped; {what}. "
            "Check that the disk is connected and writable, then start again."
        )
