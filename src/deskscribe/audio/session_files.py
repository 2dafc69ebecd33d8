"""The on-disk format of a live recording session, and the low-level file helpers shared by
`recorder` (writing a session) and `sessions` (listing, recovering and exporting them).

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
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import av
import numpy as np

from ..fsutil import fsync_dir, write_atomic

log = logging.getLogger(__name__)

JOURNAL = "session.json"
TRANSCRIPT = "transcript.json"
LOCK, RESERVE, RESERVE_BYTES = ".lock", ".reserve", 64 * 1024
CHUNK_RE = re.compile(r"^([a-z0-9_]+)-(\d{6})\.(pcm|flac)$")
TRACK_RE = re.compile(r"^[a-z0-9_]+$")
LIVE_STATES = ("recording", "paused")
DISK_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
O_BINARY = getattr(os, "O_BINARY", 0)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def encode_flac(blocks: Iterable[np.ndarray], sink: Any, rate: int) -> None:
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


def decode_flac(source: Any, parts: list[np.ndarray] | None = None) -> np.ndarray:
    """Decode our int16 mono FLAC; blocks land in ``parts`` as they come, for partial reads."""
    parts = [] if parts is None else parts
    with av.open(source, "r") as inp:
        for frame in inp.decode(audio=0):
            if frame.format.name != "s16" or len(frame.layout.channels) != 1:
                raise ValueError(f"not 16-bit mono ({frame.format.name}, {frame.layout.name})")
            parts.append(frame.to_ndarray().reshape(-1))
    return np.concatenate(parts) if parts else np.zeros(0, np.int16)


def finalize_chunk(pcm: Path, data: np.ndarray, rate: int) -> Path:
    """Write ``data`` (the whole of ``pcm``) as a verified FLAC next to it, then delete ``pcm``.

    OSError (disk full) propagates; any other failure too: either way the ``.pcm`` is kept.
    """
    buf = io.BytesIO()
    encode_flac([data], buf, rate)
    if not np.array_equal(decode_flac(io.BytesIO(buf.getvalue())), data):
        raise ValueError("FLAC round trip does not match the recorded samples")
    flac = pcm.with_suffix(".flac")
    write_atomic(flac, buf.getvalue())
    pcm.unlink()
    fsync_dir(pcm.parent)
    return flac


def read_pcm(path: Path) -> np.ndarray:
    raw = path.read_bytes()
    return np.frombuffer(raw[: len(raw) // 2 * 2], "<i2").astype(np.int16)


def read_flac(path: Path, expected: int | None) -> np.ndarray:
    """A chunk FLAC; a damaged one keeps what decodes, padded with silence to its known length."""
    parts: list[np.ndarray] = []
    try:
        return decode_flac(str(path), parts)
    except (av.FFmpegError, OSError, ValueError) as e:
        log.warning("'%s' is damaged (%s); the undecodable rest is silence", path, e)
        got = np.concatenate(parts) if parts else np.zeros(0, np.int16)
        return np.pad(got, (0, max(0, (expected or 0) - len(got))))


def read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_journal(folder: Path) -> dict | None:
    j = read_json(folder / JOURNAL)
    ok = j is not None and isinstance(j.get("tracks"), list) and isinstance(j.get("state"), str)
    return j if ok and all(isinstance(t, str) and TRACK_RE.match(t) for t in j["tracks"]) else None


def scan_chunks(folder: Path) -> dict[str, dict[int, dict[str, Path]]]:
    """track -> chunk index -> {"pcm"|"flac": path}, from the files actually present."""
    found: dict[str, dict[int, dict[str, Path]]] = {}
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
            m = CHUNK_RE.match(p.name)
            if m:
                found.setdefault(m[1], {}).setdefault(int(m[2]), {})[m[3]] = p
    return found


def known_samples(journal: dict | None) -> dict[str, int]:
    """Chunk file name -> sample count, as the journal recorded it."""
    chunks = (journal or {}).get("chunks")
    out: dict[str, int] = {}
    for entries in chunks.values() if isinstance(chunks, dict) else []:
        for e in entries if isinstance(entries, list) else []:
            with contextlib.suppress(TypeError, KeyError, ValueError):
                out[str(e["file"])] = int(e["samples"])
    return out


def created_at(folder: Path, journal: dict | None) -> datetime:
    with contextlib.suppress(TypeError, ValueError):
        return datetime.fromisoformat(str((journal or {}).get("created"))).astimezone()
    with contextlib.suppress(ValueError):
        return datetime.strptime(folder.name[:15], "%Y%m%d-%H%M%S").astimezone()
    return datetime.fromtimestamp(folder.stat().st_mtime).astimezone()


def iter_track(
    folder: Path, track: str, known: dict[str, int], decoded: dict | None = None
) -> Iterator[np.ndarray]:
    """The chunks of ``track`` in order as int16 arrays; a ``.pcm`` wins over its ``.flac``
    (both exist only if we died between renaming the FLAC and deleting the raw file).
    ``decoded``: FLAC chunks decoded by earlier reads of the same track, by file name, size
    and modification time, taken from it and added to it (a FLAC chunk is written once,
    whole, by a rename), when the chunk has the length the journal recorded for it."""
    for _, files in sorted(scan_chunks(folder).get(track, {}).items()):
        if "pcm" in files:
            try:
                yield read_pcm(files["pcm"])
                continue
            except FileNotFoundError:  # a live recorder just finished this chunk as FLAC
                files["flac"] = files["pcm"].with_suffix(".flac")
        flac = files["flac"]
        key = None if decoded is None else _chunk_key(flac)
        cached = None if key is None else decoded.get(key)
        if cached is None:
            cached = read_flac(flac, known.get(flac.name))
            # Kept only when it has the length the journal recorded for it: a chunk that did
            # not decode (or whose count the journal has not got yet) is read again next time.
            if key is not None and len(cached) == known.get(flac.name):
                decoded[key] = cached
        yield cached


def _chunk_key(flac: Path) -> tuple | None:
    """What identifies a finished chunk's content: its name, size and modification time."""
    try:
        stat = flac.stat()
    except OSError:
        return None
    return (flac.name, stat.st_size, stat.st_mtime_ns)
