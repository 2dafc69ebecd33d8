"""Live recording to disk that survives crashes, kill -9 and a full disk.

A session is a folder ``<sessions_dir>/<YYYYMMDD-HHMMSS>-<hex>/`` holding:

- ``session.json``: the journal (id, created, tracks, sample rate, state, title/model/source,
  the finished chunks with their sample counts), replaced atomically whenever it changes;
- ``<track>-<NNNNNN>.pcm``: the chunk being recorded, raw little-endian int16 mono. Every block
  goes to the OS with ``os.write`` at once (so a killed process loses nothing already handed to
  ``write``) and is fsync'd at least every ``sync_seconds`` (so a power cut loses at most that);
  a file cut mid-sample is still readable (the odd byte is dropped);
- ``<track>-<NNNNNN>.flac``: finished chunks of ``chunk_seconds``. The FLAC is encoded in
  memory, decoded back and compared with the raw samples, written to a hidden temp file, fsync'd
  and renamed; only then is the ``.pcm`` deleted. If any step fails, the ``.pcm`` stays;
- ``transcript.json``: the caller's autosaved transcript, replaced atomically;
- ``.lock``: held (flock / msvcrt) while a recorder or `recover` uses the folder. The OS drops it
  when the process dies, which is how `find_interrupted` tells a crash from a live session;
- ``.reserve``: 64 KiB written at start and deleted when the disk fills, so the journal can
  still record why the recording stopped.

The audio files, not the journal, are the truth: reading and recovery scan the folder, so a
lost or garbled journal costs only the title.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import av
import numpy as np

from ..fsutil import fsync_dir
from ..paths import sessions_dir

log = logging.getLogger(__name__)

JOURNAL = "session.json"
TRANSCRIPT = "transcript.json"
_LOCK, _RESERVE, _RESERVE_BYTES = ".lock", ".reserve", 64 * 1024
_CHUNK_RE = re.compile(r"^([a-z0-9_]+)-(\d{6})\.(pcm|flac)$")
_TRACK_RE = re.compile(r"^[a-z0-9_]+$")
_LIVE = ("recording", "paused")
_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_BINARY = getattr(os, "O_BINARY", 0)
_RESERVED = {"format", "version", "id", "created", "updated", "tracks", "sample_rate"}
_RESERVED |= {"chunk_seconds", "state", "stop_reason", "chunks"}


class RecorderError(Exception):
    """Recording or recovery failed; `str(err)` is a message fit for the user."""


class RecorderDiskFullError(RecorderError):
    """The disk filled up: the recording was stopped cleanly and everything before it kept."""


class SessionInUseError(RecorderError):
    """Another DeskScribe window (or process) is recording or recovering this session."""


@dataclass
class SessionInfo:
    folder: Path
    id: str
    created: datetime
    state: str  # as the journal says, or "interrupted" when nothing holds a live session
    duration_s: float
    title: str | None
    interrupted: bool


@dataclass
class RecoveredSession:
    folder: Path
    tracks: dict[str, np.ndarray]  # float32 in [-1, 1] at the session's rate (16 kHz)
    transcript: dict | None
    duration_s: float


def _hms(seconds: float) -> str:
    s = int(seconds)
    return (
        f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"
    )


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_atomic(path: Path, data: bytes) -> None:
    """tmp + fsync + rename + fsync(dir): readers see the old file or the new, never a mix."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _BINARY, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        for attempt in range(50):
            try:
                os.replace(tmp, path)
                break
            except PermissionError:  # Windows: a reader has the old file open for a moment
                if os.name != "nt" or attempt == 49:
                    raise
                time.sleep(0.02)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    fsync_dir(path.parent)


class _FolderLock:
    """An exclusive OS lock on ``<folder>/.lock``, released by the OS if the process dies."""

    def __init__(self, folder: Path, create: bool = True) -> None:
        flags = os.O_RDWR | (os.O_CREAT if create else 0) | _BINARY
        self._fd: int | None = os.open(folder / _LOCK, flags, 0o644)
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


def _held(folder: Path) -> bool:
    try:
        _FolderLock(folder, create=False).release()
    except SessionInUseError:
        return True
    except OSError:
        return False  # no lock file: no recorder ever held it, or it cannot be opened
    return False


def _encode_flac(blocks: Iterable[np.ndarray], sink: Any, rate: int) -> None:
    """Encode int16 mono blocks as FLAC into ``sink`` (a path or a binary file object)."""
    with av.open(sink, "w", format="flac") as out:
        stream = out.add_stream("flac", rate=rate, layout="mono")
        stream.format = "s16"
        pts = 0
        for block in blocks:
            for i in range(0, len(block), 4096):
                part = np.ascontiguousarray(block[i : i + 4096], dtype="<i2")
                frame = av.AudioFrame.from_ndarray(part.reshape(1, -1), format="s16", layout="mono")
                frame.sample_rate, frame.pts = rate, pts
                pts += len(part)
                out.mux(stream.encode(frame))
        out.mux(stream.encode(None))


def _decode_flac(source: Any, parts: list[np.ndarray] | None = None) -> np.ndarray:
    """Decode our int16 mono FLAC; blocks land in ``parts`` as they come, for partial reads."""
    parts = [] if parts is None else parts
    with av.open(source, "r") as inp:
        for frame in inp.decode(audio=0):
            if frame.format.name != "s16" or len(frame.layout.channels) != 1:
                raise ValueError(f"not 16-bit mono ({frame.format.name}, {frame.layout.name})")
            parts.append(frame.to_ndarray().reshape(-1))
    return np.concatenate(parts) if parts else np.zeros(0, np.int16)


def _finalize(pcm: Path, data: np.ndarray, rate: int) -> Path:
    """Write ``data`` (the whole of ``pcm``) as a verified FLAC next to it, then delete ``pcm``.

    OSError (disk full) propagates; any other failure too: either way the ``.pcm`` is kept.
    """
    buf = io.BytesIO()
    _encode_flac([data], buf, rate)
    if not np.array_equal(_decode_flac(io.BytesIO(buf.getvalue())), data):
        raise ValueError("FLAC round trip does not match the recorded samples")
    flac = pcm.with_suffix(".flac")
    _write_atomic(flac, buf.getvalue())
    pcm.unlink()
    fsync_dir(pcm.parent)
    return flac


def _read_pcm(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    return np.frombuffer(raw[: len(raw) // 2 * 2], "<i2").astype(np.int16)


def _read_flac(path: Path, expected: int | None) -> np.ndarray:
    """A chunk FLAC; a damaged one keeps what decodes, padded with silence to its known length."""
    parts: list[np.ndarray] = []
    try:
        return _decode_flac(str(path), parts)
    except (av.FFmpegError, OSError, ValueError) as e:
        log.warning("'%s' is damaged (%s); the undecodable rest is silence", path, e)
        got = np.concatenate(parts) if parts else np.zeros(0, np.int16)
        return np.pad(got, (0, max(0, (expected or 0) - len(got))))


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _journal(folder: Path) -> dict | None:
    j = _read_json(folder / JOURNAL)
    ok = j is not None and isinstance(j.get("tracks"), list) and isinstance(j.get("state"), str)
    return j if ok and all(isinstance(t, str) and _TRACK_RE.match(t) for t in j["tracks"]) else None


def _scan(folder: Path) -> dict[str, dict[int, dict[str, Path]]]:
    """track -> chunk index -> {"pcm"|"flac": path}, from the files actually present."""
    found: dict[str, dict[int, dict[str, Path]]] = {}
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
            m = _CHUNK_RE.match(p.name)
            if m:
                found.setdefault(m[1], {}).setdefault(int(m[2]), {})[m[3]] = p
    return found


def _known(journal: dict | None) -> dict[str, int]:
    """Chunk file name -> sample count, as the journal recorded it."""
    chunks = (journal or {}).get("chunks")
    out: dict[str, int] = {}
    for entries in chunks.values() if isinstance(chunks, dict) else []:
        for e in entries if isinstance(entries, list) else []:
            with contextlib.suppress(TypeError, KeyError, ValueError):
                out[str(e["file"])] = int(e["samples"])
    return out


def _created(folder: Path, journal: dict | None) -> datetime:
    with contextlib.suppress(TypeError, ValueError):
        return datetime.fromisoformat(str((journal or {}).get("created"))).astimezone()
    with contextlib.suppress(ValueError):
        return datetime.strptime(folder.name[:15], "%Y%m%d-%H%M%S").astimezone()
    return datetime.fromtimestamp(folder.stat().st_mtime).astimezone()


def _iter_track(folder: Path, track: str, known: dict[str, int]) -> Iterator[np.ndarray]:
    """The chunks of ``track`` in order as int16 arrays; a ``.pcm`` wins over its ``.flac``
    (both exist only if we died between renaming the FLAC and deleting the raw file)."""
    for _, files in sorted(_scan(folder).get(track, {}).items()):
        if "pcm" in files:
            try:
                yield _read_pcm(files["pcm"])
                continue
            except FileNotFoundError:  # a live recorder just finished this chunk as FLAC
                files["flac"] = files["pcm"].with_suffix(".flac")
        yield _read_flac(files["flac"], known.get(files["flac"].name))


def _tracks(folder: Path) -> tuple[dict | None, list[str]]:
    journal, found = _journal(folder), _scan(folder)
    if journal is None and not found:
        raise RecorderError(
            f"'{folder}' is not a DeskScribe recording (it has no session.json and no audio). "
            "Choose the folder of a recording."
        )
    names = list(journal["tracks"]) if journal else []
    return journal, names + sorted(t for t in found if t not in names)


def read_track(folder: Path, track: str) -> np.ndarray:
    """All audio of ``track`` on disk now, as float32 (works on live sessions; reads only)."""
    journal, names = _tracks(Path(folder))
    if track not in names:
        raise ValueError(f"no track {track!r} in {folder} (it has {names})")
    parts = list(_iter_track(Path(folder), track, _known(journal)))
    data = np.concatenate(parts) if parts else np.zeros(0, np.int16)
    return data.astype(np.float32) / 32768.0


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
    """Writes live audio of one or more tracks into a session folder (see the module doc).

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
        if not tracks or len(set(tracks)) != len(tracks) or not all(map(_TRACK_RE.match, tracks)):
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
            self.folder.mkdir(parents=True, exist_ok=True)
            self._lock = _FolderLock(self.folder)
        except OSError as e:
            raise self._error(e, "start") from None
        if (self.folder / JOURNAL).exists() or _scan(self.folder):
            self._lock.release()
            raise RecorderError(f"'{self.folder}' already holds a recording; choose a new folder.")
        try:
            _write_atomic(self.folder / _RESERVE, bytes(_RESERVE_BYTES))
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
                            path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | _BINARY, 0o644
                        )
                        fsync_dir(self.folder)
                    n = min(len(data) - pos, self._chunk - t.current)
                    _write_all(t.fd, data[pos : pos + n].tobytes())
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
        if state not in _LIVE:
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
                _write_atomic(self.folder / TRANSCRIPT, payload)
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
                    (self.folder / _RESERVE).unlink()
            except OSError as e:
                raise self._fail(e) from None
            self._closed = True
            self._lock.release()

    # --- internals (called with self._mutex held) -------------------------------------------

    def _path(self, t: _Track, ext: str) -> Path:
        return self.folder / f"{t.name}-{t.index:06d}.{ext}"

    def _check_open(self) -> None:
        if self._closed:
            raise RecorderError("This recording has stopped. Start a new recording.")

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
            name = _finalize(pcm, _read_pcm(pcm), self.sample_rate).name
        except (OSError, av.FFmpegError, ValueError) as e:
            if isinstance(e, OSError) and e.errno in _FULL and not quiet:
                t.chunks.append({"file": pcm.name, "samples": n})
                raise
            log.warning("keeping '%s' as raw audio: FLAC conversion failed (%s)", pcm, e)
            name = pcm.name
        t.chunks.append({"file": name, "samples": n})
        self._save_journal()

    def _save_journal(self) -> None:
        self._journal["chunks"] = {t.name: t.chunks for t in self._tracks.values()}
        self._journal["updated"] = datetime.now().astimezone().isoformat()
        _write_atomic(self.folder / JOURNAL, json.dumps(self._journal, indent=1).encode())

    def _fail(self, e: OSError) -> RecorderError:
        """Stop cleanly after a write error: keep every whole sample on disk, say why."""
        with contextlib.suppress(OSError):
            (self.folder / _RESERVE).unlink()  # room for the journal below
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
        reason = "disk full" if e.errno in _FULL else (e.strerror or str(e))
        self._journal.update(state="stopped", stop_reason=reason)
        with contextlib.suppress(OSError):
            self._save_journal()
        if not self._closed:
            self._closed = True
            if hasattr(self, "_lock"):
                self._lock.release()
        return self._error(e, "record")

    def _error(self, e: OSError, doing: str) -> RecorderError:
        kept = min(t.total for t in self._tracks.values()) / self.sample_rate
        what = f"everything up to {_hms(kept)} is kept" if kept else "nothing had been recorded yet"
        if doing in ("transcript", "journal"):
            what = f"the audio is kept, the latest {doing} changes are not"
        if e.errno in _FULL:
            return RecorderDiskFullError(
                f"The disk is full at '{self.folder}'. Recording stopped; {what}. "
                "Free some space and start again."
            )
        return RecorderError(
            f"Could not write to '{self.folder}' ({e.strerror or e}). Recording stopped; {what}. "
            "Check that the disk is connected and writable, then start again."
        )


# --- finding, recovering and exporting sessions ---------------------------------------------


def _info(folder: Path) -> SessionInfo | None:
    journal, found = _journal(folder), _scan(folder)
    if journal is None and not found:
        return None  # not a session, or one being created right now
    known, longest = _known(journal), 0
    for chunks in found.values():
        n = 0
        for files in chunks.values():
            if "pcm" in files:
                with contextlib.suppress(OSError):
                    n += files["pcm"].stat().st_size // 2
            elif files["flac"].name in known:
                n += known[files["flac"].name]
            else:
                n += len(_read_flac(files["flac"], None))
        longest = max(longest, n)
    state = journal["state"] if journal else "interrupted"
    interrupted = (state in _LIVE or journal is None) and not _held(folder)
    rate = int((journal or {}).get("sample_rate") or 16000)
    title = (journal or {}).get("title")
    return SessionInfo(
        folder=folder,
        id=str((journal or {}).get("id") or folder.name),
        created=_created(folder, journal),
        state="interrupted" if interrupted else state,
        duration_s=longest / rate,
        title=title if isinstance(title, str) else None,
        interrupted=interrupted,
    )


def list_sessions(root: Path | None = None) -> list[SessionInfo]:
    """Every session under ``root`` (default: `sessions_dir()`), newest first."""
    root = Path(root) if root is not None else sessions_dir()
    try:
        folders = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []
    infos = [i for i in map(_info, folders) if i is not None]
    return sorted(infos, key=lambda i: (i.created.timestamp(), i.folder.name), reverse=True)


def find_interrupted(root: Path | None = None) -> list[SessionInfo]:
    """Sessions whose journal says recording/paused (or is lost) and that no process holds."""
    return [i for i in list_sessions(root) if i.interrupted]


def recover(folder: Path) -> RecoveredSession:
    """Read back everything a session has on disk, and tidy it up; safe to call again.

    Leftover ``.pcm`` chunks become verified FLAC (kept as they are if that fails), a lost or
    garbled journal is rebuilt from the files, and an interrupted session is marked
    "recovered". Raises `SessionInUseError` while another process records it.
    """
    folder = Path(folder)
    _tracks(folder)  # not a session: say so before creating a lock file in it
    try:
        lock = _FolderLock(folder)
    except OSError as e:
        raise RecorderError(
            f"Cannot open the recording in '{folder}' ({e.strerror or e}). Check that the disk "
            "is connected and that you may write to the folder, then try again."
        ) from None
    try:
        journal, names = _tracks(folder)
        known, rate = _known(journal), int((journal or {}).get("sample_rate") or 16000)
        for p in folder.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                p.unlink()  # half-written copies; the originals are intact
        tracks, chunks = {}, {}
        for track in names:
            parts, entries = [], []
            for _, files in sorted(_scan(folder).get(track, {}).items()):
                if "pcm" in files:
                    data, name = _read_pcm(files["pcm"]), files["pcm"].name
                    if not len(data):  # created, but not one whole sample written
                        with contextlib.suppress(OSError):
                            files["pcm"].unlink()
                        continue
                    try:
                        name = _finalize(files["pcm"], data, rate).name
                    except (OSError, av.FFmpegError, ValueError) as e:
                        log.warning("keeping '%s' as raw audio: %s", files["pcm"], e)
                else:
                    name = files["flac"].name
                    data = _read_flac(files["flac"], known.get(name))
                parts.append(data)
                entries.append({"file": name, "samples": len(data)})
            joined = np.concatenate(parts) if parts else np.zeros(0, np.int16)
            tracks[track], chunks[track] = joined.astype(np.float32) / 32768.0, entries
        new = dict(journal or {"id": folder.name, "title": None, "model": None, "source": None})
        new.update(tracks=names, sample_rate=rate, chunks=chunks)
        new.setdefault("created", _created(folder, journal).isoformat())
        if journal is None or journal["state"] in _LIVE:
            new["state"] = "recovered"
        if new != journal:
            new["updated"] = datetime.now().astimezone().isoformat()
            try:
                _write_atomic(folder / JOURNAL, json.dumps(new, indent=1).encode())
            except OSError as e:
                log.warning("could not update the journal of '%s': %s", folder, e)
        with contextlib.suppress(OSError):
            (folder / _RESERVE).unlink()
    finally:
        lock.release()
    longest = max((len(a) for a in tracks.values()), default=0)
    return RecoveredSession(folder, tracks, _read_json(folder / TRANSCRIPT), longest / rate)


def export_audio(folder: Path, out: Path, tracks: Sequence[str] | None = None) -> Path:
    """One FLAC of ``tracks`` (default: all) averaged into mono, written atomically to ``out``.

    Streams chunk by chunk, so memory does not grow with the length of the recording.
    """
    folder, out = Path(folder), Path(out)
    journal, names = _tracks(folder)
    tracks = list(tracks or names)
    for t in tracks:
        if t not in names:
            raise ValueError(f"no track {t!r} in {folder} (it has {names})")
    known, rate = _known(journal), int((journal or {}).get("sample_rate") or 16000)

    def mixed() -> Iterator[np.ndarray]:
        its = [_iter_track(folder, t, known) for t in tracks]
        bufs, ended, step = [np.zeros(0, np.int16) for _ in its], [False] * len(its), rate * 10
        while True:
            for i, it in enumerate(its):
                while not ended[i] and len(bufs[i]) < step:
                    nxt = next(it, None)
                    ended[i] = nxt is None
                    bufs[i] = bufs[i] if nxt is None else np.concatenate([bufs[i], nxt])
            n = step if not all(ended) else max(len(b) for b in bufs)
            if not n:
                return
            total = np.zeros(n, np.float64)
            for i, b in enumerate(bufs):
                total[: len(b[:n])] += b[:n]
                bufs[i] = b[n:]
            yield np.rint(total / len(tracks)).astype(np.int16)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        _encode_flac(mixed(), str(tmp), rate)  # PyAV raises av.OSError (an OSError) with errno
        fd = os.open(tmp, os.O_RDWR | _BINARY)  # Windows fsyncs writable handles only
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, out)
    except OSError as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if e.errno in _FULL:
            raise RecorderDiskFullError(
                f"The disk is full at '{out.parent}'; nothing was exported. "
                "Free some space or choose another folder, then export again."
            ) from None
        raise RecorderError(
            f"Could not write '{out}' ({e.strerror or e}). Choose another folder."
        ) from None
    fsync_dir(out.parent)
    return out
