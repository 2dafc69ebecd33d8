"""Finding, reading, recovering and exporting the sessions `recorder` wrote (format: see
`session_files`)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import av
import numpy as np

from ..fsutil import atomic_file
from ..paths import sessions_dir
from .recorder import FolderLock, RecorderDiskFullError, RecorderError, is_held
from .session_files import (
    DISK_FULL,
    JOURNAL,
    LIVE_STATES,
    RESERVE,
    TRANSCRIPT,
    created_at,
    encode_flac,
    finalize_chunk,
    iter_track,
    known_samples,
    read_flac,
    read_journal,
    read_json,
    read_pcm,
    scan_chunks,
    write_atomic,
)

log = logging.getLogger(__name__)


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


def _tracks(folder: Path) -> tuple[dict | None, list[str]]:
    journal, found = read_journal(folder), scan_chunks(folder)
    if journal is None and not found:
        raise RecorderError(
            f"'{folder}' is not a DeskScribe recording (it has no session.json and no audio). "
            "Choose the folder of a recording."
        )
    names = list(journal["tracks"]) if journal else []
    return journal, names + sorted(t for t in found if t not in names)


def read_track(folder: Path, track: str, decoded: dict | None = None) -> np.ndarray:
    """All audio of ``track`` on disk now, as float32 (works on live sessions; reads only).
    ``decoded``: a dict kept by a caller that reads the same growing track again and again
    (the live label revisions): finished chunks are decoded once, then taken from it (int16,
    115 MB per recorded hour; decoding was most of the cost: 0.5 s for 20 minutes)."""
    journal, names = _tracks(Path(folder))
    if track not in names:
        raise ValueError(f"no track {track!r} in {folder} (it has {names})")
    parts = list(iter_track(Path(folder), track, known_samples(journal), decoded))
    out = np.empty(sum(p.shape[0] for p in parts), np.float32)
    pos = 0
    for part in parts:  # filled in place: no int16 copy of the whole track
        np.multiply(part, np.float32(1 / 32768), out=out[pos : pos + part.shape[0]])
        pos += part.shape[0]
    return out


def _info(folder: Path) -> SessionInfo | None:
    journal, found = read_journal(folder), scan_chunks(folder)
    if journal is None and not found:
        return None  # not a session, or one being created right now
    known, longest = known_samples(journal), 0
    for chunks in found.values():
        n = 0
        for files in chunks.values():
            if "pcm" in files:
                with contextlib.suppress(OSError):
                    n += files["pcm"].stat().st_size // 2
            elif files["flac"].name in known:
                n += known[files["flac"].name]
            else:
                n += len(read_flac(files["flac"], None))
        longest = max(longest, n)
    state = journal["state"] if journal else "interrupted"
    interrupted = (state in LIVE_STATES or journal is None) and not is_held(folder)
    rate = int((journal or {}).get("sample_rate") or 16000)
    title = (journal or {}).get("title")
    return SessionInfo(
        folder=folder,
        id=str((journal or {}).get("id") or folder.name),
        created=created_at(folder, journal),
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


def unlisted_sessions(listed: set[Path], root: Path | None = None) -> list[SessionInfo]:
    """Sessions to offer for restoring: interrupted ones, and finished ones whose folder is
    not in ``listed`` (the library's), so that no recording can become invisible. Sessions
    a process is recording now are left alone."""
    out = []
    for info in list_sessions(root):
        if info.interrupted or (
            info.state not in LIVE_STATES and info.folder.resolve() not in listed
        ):
            out.append(info)
    return out


def recover(folder: Path) -> RecoveredSession:
    """Read back everything a session has on disk, and tidy it up; safe to call again.

    Leftover ``.pcm`` chunks become verified FLAC (kept as they are if that fails), a lost or
    garbled journal is rebuilt from the files, and an interrupted session is marked
    "recovered". Raises `SessionInUseError` while another process records it.
    """
    folder = Path(folder)
    _tracks(folder)  # not a session: say so before creating a lock file in it
    try:
        lock = FolderLock(folder)
    except OSError as e:
        raise RecorderError(
            f"Cannot open the recording in '{folder}' ({e.strerror or e}). Check that the disk "
            "is connected and that you may write to the folder, then try again."
        ) from None
    try:
        journal, names = _tracks(folder)
        known, rate = known_samples(journal), int((journal or {}).get("sample_rate") or 16000)
        for p in folder.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                p.unlink()  # half-written copies; the originals are intact
        tracks, chunks = {}, {}
        for track in names:
            parts, entries = [], []
            for _, files in sorted(scan_chunks(folder).get(track, {}).items()):
                if "pcm" in files:
                    data, name = read_pcm(files["pcm"]), files["pcm"].name
                    if not len(data):  # created, but not one whole sample written
                        with contextlib.suppress(OSError):
                            files["pcm"].unlink()
                        continue
                    try:
                        name = finalize_chunk(files["pcm"], data, rate).name
                    except (OSError, av.FFmpegError, ValueError) as e:
                        log.warning("keeping '%s' as raw audio: %s", files["pcm"], e)
                else:
                    name = files["flac"].name
                    data = read_flac(files["flac"], known.get(name))
                parts.append(data)
                entries.append({"file": name, "samples": len(data)})
            joined = np.concatenate(parts) if parts else np.zeros(0, np.int16)
            tracks[track], chunks[track] = joined.astype(np.float32) / 32768.0, entries
        new = dict(journal or {"id": folder.name, "title": None, "model": None, "source": None})
        new.update(tracks=names, sample_rate=rate, chunks=chunks)
        new.setdefault("created", created_at(folder, journal).isoformat())
        if journal is None or journal["state"] in LIVE_STATES:
            new["state"] = "recovered"
        if new != journal:
            new["updated"] = datetime.now().astimezone().isoformat()
            try:
                write_atomic(folder / JOURNAL, json.dumps(new, indent=1).encode())
            except OSError as e:
                log.warning("could not update the journal of '%s': %s", folder, e)
        with contextlib.suppress(OSError):
            (folder / RESERVE).unlink()
    finally:
        lock.release()
    longest = max((len(a) for a in tracks.values()), default=0)
    return RecoveredSession(folder, tracks, read_json(folder / TRANSCRIPT), longest / rate)


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
    known, rate = known_samples(journal), int((journal or {}).get("sample_rate") or 16000)

    def mixed() -> Iterator[np.ndarray]:
        its = [iter_track(folder, t, known) for t in tracks]
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
    try:
        with atomic_file(out, private=False) as tmp:
            encode_flac(mixed(), str(tmp), rate)  # PyAV raises av.OSError (an OSError), errno set
    except OSError as e:
        if e.errno in DISK_FULL:
            raise RecorderDiskFullError(
                f"The disk is full at '{out.parent}'; nothing was exported. "
                "Free some space or choose another folder, then export again."
            ) from None
        raise RecorderError(
            f"Could not write '{out}' ({e.strerror or e}). Choose another folder."
        ) from None
    return out
