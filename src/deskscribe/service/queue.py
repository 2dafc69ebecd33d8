"""The file queue's side of the library: queue media files as items, run an item's job, store it.

The window's Files page (and anything else with a queue) adds files with ``queue_files`` and
runs each item with ``run_queued_item`` on a worker thread, one at a time. The job itself runs
wherever ``run`` says (in this process with ``local_runner``, or in the engine process, see
``service.engine``) and only returns its result; this module is the one that writes the
library: the item's status and progress, its transcript, and (when asked) its exports. Every
way a file can fail ends in the item's ``status``/``error``, never in an exception.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import settings
from ..audio.decode import MediaError, probe
from ..fsutil import unique_path
from ..library import Item, Library, LibraryError
from ..library.rescue import rescue_note
from ..transcript import Transcript
from ..transcript.export import FORMATS, export
from ..transcript.subtitles import SubtitleRules
from .jobs import TRANSCRIBE_SHARE, FileJob, FileJobResult

log = logging.getLogger(__name__)

_DB_EVERY_S = 1.0  # how often progress is written to the library

MEDIA_SUFFIXES = frozenset({
    ".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg", ".oga", ".opus", ".wma", ".aiff", ".aif",
    ".amr", ".mka", ".webm", ".mp4", ".m4v", ".mov", ".mkv", ".avi", ".wmv", ".mpg", ".mpeg",
    ".3gp", ".ts", ".mts",
})  # fmt: skip


@dataclass
class ExportOptions:
    formats: list[str] = field(default_factory=lambda: ["txt"])
    output_dir: str | None = None  # None: next to the media file
    automatic: bool = False  # export as soon as a job is done
    subtitles: SubtitleRules | None = None  # SRT/VTT's rules; None: the settings' at export


@dataclass
class JobOutcome:
    item_id: int
    status: str  # done / failed / cancelled (/ running: stopped with the app, unfinished)
    error: str | None = None
    transcript: Transcript | None = None
    exported: list[Path] = field(default_factory=list)


@dataclass
class Queued:
    """A file as it entered the queue: a new job, one done before (skipped), or one that
    failed at once (not media)."""

    item_id: int
    path: Path
    status: str  # queued / skipped / failed
    duration: float | None = None
    error: str | None = None


class Eta:
    """Seconds left from the average speed so far (None until there is something to go on)."""

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        """Count from now (call when the real work starts, after the model has loaded)."""
        self._t0 = time.monotonic()

    def update(self, fraction: float) -> float | None:
        elapsed = time.monotonic() - self._t0
        if fraction <= 0.01 or elapsed < 0.5:
            return None
        return max(0.0, elapsed * (1.0 - fraction) / fraction)


def media_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files to queue for ``paths``: files as given (whatever their name: the decoder says
    if one is not media), folders searched recursively for files with a media suffix."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = (f for f in p.rglob("*") if f.suffix.lower() in MEDIA_SUFFIXES)
            out += sorted((f for f in found if f.is_file() and not f.name.startswith(".")), key=str)
        else:
            out.append(p)
    return list(dict.fromkeys(out))


def job_options(
    model: str | None, language: str | None, speakers: str, languages: Sequence[str] = ()
) -> dict[str, Any]:
    """What makes two transcriptions of a file the same (and so skippable), as the library
    keeps it. ``speakers``: "off", "auto", a count or range (by voice), or "channels" (one
    speaker per channel). ``languages``: detection limited to these codes (kept only when no
    language is forced, and only when given, so jobs from before stay comparable)."""
    options = {"model": model, "language": language or None, "speakers": speakers or "off"}
    if languages and not language:
        options["languages"] = list(languages)
    return options


def queue_files(
    library: Library, paths: Iterable[str | Path], options: dict[str, Any], redo: bool = False
) -> list[Queued]:
    """Add the media files of ``paths`` to the library as queued jobs with ``options``.

    A file already transcribed with the same options is not added again (``redo`` adds it all
    the same); one that is not readable media is added as failed, with the reason, at once.
    """
    out = []
    for path in media_files(paths):
        done = None if redo else library.find_done(path, options)
        if done is not None:
            out.append(Queued(done.id, path, "skipped", done.duration))
            continue
        entry = Queued(library.add_file(path, options), path, "queued")
        try:
            entry.duration = probe(path, untrusted=bool(options.get("untrusted"))).duration
            library.update(entry.item_id, duration=entry.duration)
        except MediaError as e:
            entry.status, entry.error = "failed", str(e)
            library.update(entry.item_id, status="failed", error=entry.error)
        out.append(entry)
    return out


def job_for_item(item: Item, device: str = "auto", exports: Sequence[str] = ()) -> FileJob:
    """The ``FileJob`` of a queued library item: its options, plus what the app's settings
    add (the batched path unless ``batched_files`` opts out; the vocabulary; word times).
    ``exports``: the formats its transcript goes to."""
    options = item.options
    batched = options.get("batched")
    return FileJob(
        source=Path(item.source),
        model=options.get("model") or None,
        device=device,
        language=options.get("language") or None,
        languages=tuple(options.get("languages") or ()),
        speakers=str(options.get("speakers") or "off"),
        batched=settings.flag("batched_files", True) if batched is None else bool(batched),
        vocabulary=options.get("vocabulary") or settings.get("vocabulary") or None,
        untrusted=bool(options.get("untrusted")),
        # Library transcripts are checked and corrected in the transcript view, which needs
        # the words' times (click a word, the word being heard, edits that keep the times,
        # subtitles cut at words).
        word_timestamps=True,
        exports=tuple(exports),
    )


def item_exports(item: Item, default: ExportOptions | None) -> ExportOptions | None:
    """Where an item's transcript goes: its own exports (a watched folder's files carry
    theirs, automatic, with their subtitle rules when the folder has its own), else the
    queue's."""
    own = item.options.get("export")
    if not isinstance(own, dict):
        return default
    formats = [str(f) for f in own.get("formats") or () if str(f) in FORMATS] or ["txt"]
    rules = None
    if isinstance(own.get("subtitles"), dict):
        try:
            rules = SubtitleRules.from_dict(own["subtitles"])
        except (TypeError, ValueError):  # written by hand, or by a newer version: the settings'
            log.warning("ignoring the subtitle rules of item %s: %r", item.id, own["subtitles"])
    return ExportOptions(formats, own.get("output_dir") or None, automatic=True, subtitles=rules)


Runner = Callable[..., FileJobResult]  # run(job, progress=..., cancel=...) -> result


def run_queued_item(
    library: Library,
    item_id: int,
    run: Runner,
    *,
    device: str = "auto",
    export_options: ExportOptions | None = None,
    progress: Callable[[float, float | None], None] | None = None,
    cancel: threading.Event | None = None,
) -> JobOutcome:
    """Run the job of library item ``item_id`` with ``run`` and store how it went: status and
    progress while it runs, then the transcript (kept in ``rescued/`` when the library cannot
    take it) and the automatic exports. ``progress(fraction, eta_seconds)`` for the caller."""
    item = library.get(item_id)
    source = Path(item.source)
    export_options = item_exports(item, export_options)
    library.update(item_id, status="running", progress=0.0, error=None)
    report = _Reporter(library, item_id, progress)
    formats = export_options.formats if export_options is not None else ()
    result = run(job_for_item(item, device, formats), progress=report, cancel=cancel)
    if result.duration is not None:
        with contextlib.suppress(LibraryError):
            library.update(item_id, duration=result.duration)
    if result.status == "running":  # stopped with the app: stays unfinished, offered again
        return JobOutcome(item_id, "running", error=result.error)
    if result.status != "done" or result.transcript is None:
        with contextlib.suppress(LibraryError):  # e.g. removed from the queue meanwhile
            library.update(item_id, status=result.status, error=result.error)
        return JobOutcome(item_id, result.status, error=result.error)
    transcript = result.transcript
    try:
        library.save_transcript(item_id, transcript)
    except (LibraryError, OSError) as e:  # the work is done: keep it somewhere, say where
        message = rescue_note(
            transcript, source, f"Transcribed, but the library could not save it ({e})"
        )
        with contextlib.suppress(LibraryError, OSError):
            library.update(item_id, status="failed", error=message)
        return JobOutcome(item_id, "failed", error=message, transcript=transcript)
    notes = " ".join(result.notes) or None
    outcome = JobOutcome(item_id, "done", error=notes, transcript=transcript)
    if export_options is not None and export_options.automatic:
        try:
            outcome.exported = export_all(transcript, source, export_options)
        except (OSError, ValueError) as e:
            outcome.error = f"Transcribed, but the export failed: {e}"
    with contextlib.suppress(LibraryError):  # removed from the queue meanwhile
        library.update(item_id, status="done", progress=1.0, error=outcome.error)
    return outcome


def export_all(transcript: Transcript, source: Path, options: ExportOptions) -> list[Path]:
    """Write ``transcript`` in every chosen format, named after ``source``; returns the files.
    SRT and VTT follow ``options.subtitles``, else the settings' rules."""
    folder = Path(options.output_dir) if options.output_dir else source.parent
    folder.mkdir(parents=True, exist_ok=True)
    rules = options.subtitles or settings.subtitle_rules()
    written = []
    for fmt in options.formats:
        if fmt not in FORMATS:
            raise ValueError(f"unknown export format {fmt!r}; one of {', '.join(FORMATS)}")
        for _attempt in range(5):  # another program may create the name in between
            with contextlib.suppress(FileExistsError):
                target = unique_path(folder / f"{source.stem}.{fmt}")
                written.append(export(transcript, target, subtitles=rules))
                break
    return written


class _Reporter:
    """Turns a job's (done, total, stage) into (fraction, eta) for the caller and, now and
    then, the library. With speakers, transcription is the first TRANSCRIBE_SHARE of it."""

    def __init__(self, library: Library, item_id: int, progress) -> None:
        self.library, self.item_id, self.progress = library, item_id, progress
        self.eta = Eta()
        self._started = False
        self._saved = 0.0

    def __call__(self, done: float, total: float, stage: str = "") -> None:
        if not self._started:  # the first report comes once the model has loaded
            self._started = True
            self.eta.restart()
        part = min(1.0, max(0.0, done / total)) if total and total > 0 else 0.0
        if stage == "transcribe":
            fraction = TRANSCRIBE_SHARE * part
        elif stage == "speakers":
            fraction = TRANSCRIBE_SHARE + (1.0 - TRANSCRIBE_SHARE) * part
        else:
            fraction = part
        eta = self.eta.update(fraction)
        if self.progress is not None:
            self.progress(fraction, eta)
        now = time.monotonic()
        if now - self._saved >= _DB_EVERY_S:
            self._saved = now
            with contextlib.suppress(Exception):  # progress in the library is a nicety
                self.library.update(self.item_id, progress=fraction)
