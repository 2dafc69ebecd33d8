"""Running one file job of the library: transcribe (and label speakers), save, export.

The GUI's file queue runs `run_file_job` on a worker thread, one job at a time; nothing here
knows about Qt. Every way a single file can fail ends in the item's ``status``/``error``, with
a message fit for the user, and never in an exception: the queue always goes on.
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

from ..transcript import Transcript
from ..transcript.export import FORMATS, export
from .db import Library, LibraryError
from .rescue import rescue_note

log = logging.getLogger(__name__)

TRANSCRIBE_SHARE = 0.85  # of the progress bar, when speakers are labelled afterwards
_DB_EVERY_S = 1.0  # how often progress is written to the library


@dataclass
class ExportOptions:
    formats: list[str] = field(default_factory=lambda: ["txt"])
    output_dir: str | None = None  # None: next to the media file
    automatic: bool = False  # export as soon as a job is done


@dataclass
class JobOutcome:
    item_id: int
    status: str  # done / failed / cancelled
    error: str | None = None
    transcript: Transcript | None = None
    exported: list[Path] = field(default_factory=list)


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


MEDIA_SUFFIXES = frozenset({
    ".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg", ".oga", ".opus", ".wma", ".aiff", ".aif",
    ".amr", ".mka", ".webm", ".mp4", ".m4v", ".mov", ".mkv", ".avi", ".wmv", ".mpg", ".mpeg",
    ".3gp", ".ts", ".mts",
})  # fmt: skip


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


@dataclass
class Queued:
    """A file as it entered the queue: a new job, one done before (skipped), or one that
    failed at once (not media)."""

    item_id: int
    path: Path
    status: str  # queued / skipped / failed
    duration: float | None = None
    error: str | None = None


def default_model_name(choice: str | None, default: str | None) -> str | None:
    """The model a job will use, fixed when it is queued: the chosen one, else the default
    setting, else the newest installed (None when none is: the job then says how to get one)."""
    from ..models.store import ModelNotInstalledError, resolve_model

    if choice:
        return choice
    for wanted in (default, None) if default else (None,):
        try:
            folder = resolve_model(wanted)
        except ModelNotInstalledError:
            continue
        return wanted or folder.name
    return None


def queue_files(
    library: Library, paths: Iterable[str | Path], options: dict[str, Any], redo: bool = False
) -> list[Queued]:
    """Add the media files of ``paths`` to the library as queued jobs with ``options``.

    A file already transcribed with the same options is not added again (``redo`` adds it all
    the same); one that is not readable media is added as failed, with the reason, at once.
    """
    from ..audio.decode import MediaError, probe

    out = []
    for path in media_files(paths):
        done = None if redo else library.find_done(path, options)
        if done is not None:
            out.append(Queued(done.id, path, "skipped", done.duration))
            continue
        entry = Queued(library.add_file(path, options), path, "queued")
        try:
            entry.duration = probe(path).duration
            library.update(entry.item_id, duration=entry.duration)
        except MediaError as e:
            entry.status, entry.error = "failed", str(e)
            library.update(entry.item_id, status="failed", error=entry.error)
        out.append(entry)
    return out


def job_options(
    model: str, language: str | None, speakers: str, languages: Sequence[str] = ()
) -> dict[str, Any]:
    """What makes two transcriptions of a file the same (and so skippable). ``speakers``:
    "off", "auto", a count or range (by voice), or "channels" (one speaker per channel).
    ``languages``: detection limited to these codes (kept only when no language is forced,
    and only when given, so jobs from before stay comparable)."""
    options = {"model": model, "language": language or None, "speakers": speakers or "off"}
    if languages and not language:
        options["languages"] = list(languages)
    return options


def unique_path(path: Path) -> Path:
    """``path``, or ``name (2).ext``, ``name (3).ext``, … if it exists: never overwrite."""
    if not path.exists():
        return path
    n = 2
    while (candidate := path.with_name(f"{path.stem} ({n}){path.suffix}")).exists():
        n += 1
    return candidate


def export_all(transcript: Transcript, source: Path, options: ExportOptions) -> list[Path]:
    """Write ``transcript`` in every chosen format, named after ``source``; returns the files."""
    folder = Path(options.output_dir) if options.output_dir else source.parent
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in options.formats:
        if fmt not in FORMATS:
            raise ValueError(f"unknown export format {fmt!r}; one of {', '.join(FORMATS)}")
        for _attempt in range(5):  # another program may create the name in between
            with contextlib.suppress(FileExistsError):
                written.append(export(transcript, unique_path(folder / f"{source.stem}.{fmt}")))
                break
    return written


def run_file_job(
    library: Library,
    item_id: int,
    load_model: Callable[[str | None], Any],
    *,
    load_encoder: Callable[[], Any] | None = None,
    export_options: ExportOptions | None = None,
    progress: Callable[[float, float | None], None] | None = None,
    cancel: threading.Event | None = None,
) -> JobOutcome:
    """Transcribe the library item ``item_id`` (a queued file) and record how it went.

    ``load_model(name)`` returns a loaded ``WhisperModel``; ``progress(fraction, eta_seconds)``
    is called as work proceeds; setting ``cancel`` stops at the next window.
    """
    from ..audio.decode import MediaError, probe
    from ..models.store import ModelNotInstalledError
    from ..speakers.diarize import DiarizationCancelled
    from ..whisper.decoding import DecodingError
    from ..whisper.model import RUN_ERRORS, ModelNotBuiltError
    from ..whisper.runtime import DeviceError
    from ..whisper.transcribe import TranscriptionCancelled

    item = library.get(item_id)
    source = Path(item.source)
    library.update(item_id, status="running", progress=0.0, error=None)
    report = _Reporter(library, item_id, progress)
    notes: list[str] = []  # e.g. "By channel" on a mono file: shown with the finished item
    try:
        if cancel is not None and cancel.is_set():
            raise TranscriptionCancelled("cancelled before it started")
        library.update(item_id, duration=probe(source).duration)
        model = load_model(item.options.get("model"))
        report.eta.restart()
        transcript = _transcribe(model, source, item.options, load_encoder, report, cancel, notes)
    except (TranscriptionCancelled, DiarizationCancelled):
        library.update(item_id, status="cancelled", error=None)
        return JobOutcome(item_id, "cancelled")
    except (MediaError, DecodingError, ModelNotInstalledError, ModelNotBuiltError) as e:
        return _failed(library, item_id, str(e))
    except DeviceError as e:
        return _failed(library, item_id, f"The chosen device cannot be used: {e}")
    except RUN_ERRORS as e:
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        return _failed(library, item_id, f"The transcription engine failed on this file: {first}")
    except MemoryError:
        return _failed(library, item_id, "Not enough memory for this file; close other programs.")
    except Exception as e:  # a bug: still, this file fails alone and the queue goes on
        log.exception("file job %s failed", item_id)
        return _failed(library, item_id, f"Unexpected error ({type(e).__name__}: {e})")

    try:
        library.save_transcript(item_id, transcript)
    except (LibraryError, OSError) as e:  # the work is done: keep it somewhere, say where
        message = rescue_note(
            transcript, source, f"Transcribed, but the library could not save it ({e})"
        )
        with contextlib.suppress(LibraryError, OSError):
            library.update(item_id, status="failed", error=message)
        return JobOutcome(item_id, "failed", error=message, transcript=transcript)
    outcome = JobOutcome(item_id, "done", error=" ".join(notes) or None, transcript=transcript)
    if export_options is not None and export_options.automatic:
        try:
            outcome.exported = export_all(transcript, source, export_options)
        except (OSError, ValueError) as e:
            outcome.error = f"Transcribed, but the export failed: {e}"
    library.update(item_id, status="done", progress=1.0, error=outcome.error)
    return outcome


def _failed(library: Library, item_id: int, message: str) -> JobOutcome:
    library.update(item_id, status="failed", error=message)
    return JobOutcome(item_id, "failed", error=message)


def _transcribe(model, source, options, load_encoder, report, cancel, notes) -> Transcript:
    from ..whisper.transcribe import TranscribeOptions, transcribe_file

    # The batched path unless the settings opt out (``batched_files``): same accuracy on
    # the bench audio, several times faster (bench/README.md).
    batched = options.get("batched")
    if batched is None:
        from .. import settings

        batched = settings.flag("batched_files", True)
    from .. import settings

    topt = TranscribeOptions(
        language=options.get("language") or None,
        languages=tuple(options.get("languages") or ()),  # "Detect among several…"
        batched=bool(batched),
        vocabulary=settings.get("vocabulary") or None,  # the app's Settings: names, jargon
    )
    speakers = str(options.get("speakers") or "off")
    if speakers == "channels":  # "By channel": each channel transcribed apart, one speaker each
        from ..speakers.channels import transcribe_channels

        return transcribe_channels(
            model, source, topt, progress=lambda d, t: report(d, t), cancel=cancel, notes=notes
        )
    encoder = load_encoder() if speakers != "off" and load_encoder is not None else None
    if encoder is None:
        return transcribe_file(
            model, source, topt, progress=lambda d, t: report(d, t), cancel=cancel
        )
    from ..speakers.diarize import diarize_file, parse_speakers

    def staged(stage: str, done: float, total: float) -> None:
        share = TRANSCRIBE_SHARE if stage == "transcribe" else 1.0 - TRANSCRIBE_SHARE
        offset = 0.0 if stage == "transcribe" else TRANSCRIBE_SHARE
        report(offset + share * (done / total if total > 0 else 0.0), 1.0)

    result = diarize_file(
        model, source, encoder, parse_speakers(speakers), topt, progress=staged, cancel=cancel
    )
    from ..speakers.profiles import ProfileError, apply_profiles, match_threshold_for

    try:  # known voices get their names; a broken profile file must not cost the transcript
        apply_profiles(
            result.transcript,
            result.diarization.centroids,
            match_threshold_for(encoder.kind),
            model=encoder.name,
        )
    except ProfileError:
        log.exception("voice profiles not used")
    return result.transcript


class _Reporter:
    """Turns (done, total) into (fraction, eta) for the caller and, now and then, the library."""

    def __init__(self, library: Library, item_id: int, progress) -> None:
        self.library, self.item_id, self.progress = library, item_id, progress
        self.eta = Eta()
        self._saved = 0.0

    def __call__(self, done: float, total: float) -> None:
        fraction = min(1.0, max(0.0, done / total)) if total and total > 0 else 0.0
        eta = self.eta.update(fraction)
        if self.progress is not None:
            self.progress(fraction, eta)
        now = time.monotonic()
        if now - self._saved >= _DB_EVERY_S:
            self._saved = now
            with contextlib.suppress(Exception):  # progress in the library is a nicety
                self.library.update(self.item_id, progress=fraction)
