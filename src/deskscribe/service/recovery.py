"""After a crash: what was interrupted (live sessions no library item holds, file jobs left
queued or running) and how it is put back (a session's files tidied and archived in the
library with its autosaved text). No Qt: the window's recovery dialog runs these on worker
threads; ``deskscribe sessions recover`` and ``FileQueue.recover`` cover the terminal."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..audio.sessions import SessionInfo
from ..library import Item, Library
from ..transcript import Segment, Transcript
from .live.opening import archive_session


@dataclass
class Interrupted:
    sessions: list[SessionInfo] = field(default_factory=list)
    jobs: list[Item] = field(default_factory=list)


def look_for_interrupted(library: Library) -> Interrupted:
    """Live sessions no process holds that never finished or that no library item holds (a
    save that failed at Stop, a restore cut short, a session of ``deskscribe live``), and file
    jobs left queued/running."""
    from ..audio.sessions import unlisted_sessions

    return Interrupted(unlisted_sessions(library.live_folders()), library.unfinished_jobs())


def recovered_transcript(data: dict | None, duration: float, source: str) -> Transcript:
    """The autosaved transcript, plus the words that were still tentative as a last line."""
    transcript = Transcript(segments=[])
    if data and data.get("segments") is not None:
        try:
            transcript = Transcript.from_dict(data)
        except ValueError:
            transcript = Transcript(segments=[])
    tentative = str((data or {}).get("tentative") or "").strip()
    if tentative:
        last = transcript.segments[-1] if transcript.segments else None
        start = last.end if last else 0.0
        next_id = max((s.id for s in transcript.segments), default=-1) + 1
        transcript.segments.append(
            Segment(start=start, end=max(start, duration), text=" " + tentative, id=next_id)
        )
    transcript.duration = duration
    transcript.source = source
    return transcript


def restore_session(library: Library, info: SessionInfo) -> int:
    """Tidy the session's files (`audio.sessions.recover`) and put it in the library."""
    from ..audio.sessions import recover

    found = recover(info.folder)
    transcript = recovered_transcript(found.transcript, found.duration_s, str(found.folder))
    title = info.title or f"Recovered session {info.created:%Y-%m-%d %H:%M}"
    return archive_session(library, found.folder, transcript, title=title, created=info.created)


def restore_all(library: Library, sessions: list[SessionInfo], progress, cancel) -> list:
    done, problems = [], []
    for i, info in enumerate(sessions):
        if cancel.is_set():
            break
        progress(i, len(sessions))
        try:
            done.append(restore_session(library, info))
        except Exception as exc:  # one damaged session must not stop the others
            problems.append(f"{info.folder.name}: {exc}")
    progress(len(sessions), len(sessions))
    return [done, problems]
