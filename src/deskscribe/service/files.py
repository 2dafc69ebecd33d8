"""One file job: decode, transcribe, label speakers (by voice or by channel), name known voices.

``transcribe_media`` is the work itself, shared by ``deskscribe transcribe`` and the file
queue. ``run_file_job`` runs a typed ``FileJob`` and returns a ``FileJobResult``: every way one
file can fail ends in its ``status``/``error``, with a message fit for the user, and never in an
exception, so a queue always goes on. Nothing here stores anything: the caller does (the file
queue in the library, see ``service.queue``).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from pathlib import Path

from ..audio.decode import probe
from ..errors import Cancelled, Progress
from ..fsutil import private_dir
from ..models.store import ModelNotInstalledError
from ..speakers.channels import transcribe_channels
from ..speakers.diarize import parse_speakers
from ..speakers.encoder import SpeakerModelError
from ..transcript import Transcript
from ..transcript.export import SUBTITLE_FORMATS
from ..whisper.model import WhisperModel
from ..whisper.transcribe import TranscribeOptions, transcribe_file
from .failures import describe_failure
from .jobs import FileJob, FileJobResult
from .speakers import label_file

log = logging.getLogger(__name__)


def transcribe_media(
    model: WhisperModel,
    source: str | Path,
    options: TranscribeOptions,
    *,
    speakers: str = "off",
    encoder=None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    notes: list[str] | None = None,
    warn: Callable[[str], None] | None = None,
    shared=None,
) -> Transcript:
    """The transcript of one media file. ``speakers``: "off"; "channels" (each channel apart,
    one speaker each; a note goes to ``notes`` when that cannot be, e.g. a mono file); or, with
    ``encoder``, "auto" / a count / a range (by voice; known voices named). Without an
    encoder, voices are not labelled. ``progress(done, total, stage)``: stage "" or
    "transcribe" in seconds of audio, then "speakers". ``shared``: batches shared with other
    transcriptions (the team server; see ``whisper.transcribe.transcribe_blocks``)."""
    if speakers == "channels":
        return transcribe_channels(
            model, source, options, progress=progress, cancel=cancel, notes=notes
        )
    if speakers == "off" or encoder is None:
        return transcribe_file(model, source, options, progress=progress, cancel=cancel,
                               shared=shared)  # fmt: skip
    return label_file(
        model, source, encoder, parse_speakers(speakers), options,
        progress=progress, cancel=cancel, warn=warn, shared=shared,
    )  # fmt: skip


LoadModel = Callable[[str | None, str], WhisperModel]  # (name, device) -> a loaded model
LoadEncoder = Callable[[str], object]  # (device) -> a speaker encoder; raises as ModelCache's


def run_file_job(
    job: FileJob,
    load_model: LoadModel,
    load_encoder: LoadEncoder | None = None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    on_duration: Callable[[float], None] | None = None,
) -> FileJobResult:
    """Run ``job``; ``load_model``/``load_encoder`` are a ``ModelCache``'s ``model`` and
    ``speaker_encoder`` (or anything alike). ``progress(done, total, stage)`` as in
    ``transcribe_media``; setting ``cancel`` stops at the next window."""
    result = FileJobResult("running")
    try:
        if cancel is not None and cancel.is_set():
            raise Cancelled("cancelled before it started")
        result.duration = probe(job.source, untrusted=job.untrusted).duration
        if on_duration is not None:
            on_duration(result.duration)
        model = load_model(job.model, job.device)
        wants_voices = job.speakers not in ("off", "channels")
        encoder = _encoder(load_encoder, job.device, result.notes) if wants_voices else None
        with _readable_source(job, cancel) as source:
            result.transcript = transcribe_media(
                model, source, transcribe_options(job),
                speakers=job.speakers, encoder=encoder, progress=progress, cancel=cancel,
                notes=result.notes,
            )  # fmt: skip
        result.transcript.source = str(job.source)
    except Cancelled:
        return FileJobResult("cancelled", duration=result.duration)
    except Exception as e:  # every failure ends in the result, so a queue always goes on
        return _failed(result, describe_failure(e).text)
    result.status = "done"
    return result


@contextlib.contextmanager
def _readable_source(job: FileJob, cancel: threading.Event | None):
    """The file to transcribe: the job's own, or, for an untrusted one (a watched folder's),
    a WAV it is decoded into first, safely (``audio.transcode``), removed afterwards."""
    if not job.untrusted:
        yield job.source
        return
    from ..audio.transcode import transcode
    from ..paths import data_dir

    folder = private_dir(data_dir() / "decoded")
    wav = folder / f"{uuid.uuid4().hex}.wav"
    try:
        transcode(job.source, wav, max_seconds=None, cancel=cancel)
        yield wav
    finally:
        wav.unlink(missing_ok=True)


def _encoder(load_encoder: LoadEncoder | None, device: str, notes: list[str]):
    """The speaker encoder, or None: none is installed (the labels stay off, as asked for in
    the settings), or the one installed cannot be used, which goes in ``notes`` with what to
    do, so that the user knows why this file has no speaker labels."""
    if load_encoder is None:
        return None
    try:
        return load_encoder(device)
    except ModelNotInstalledError as e:
        log.info("no speaker labels: %s", e)
    except SpeakerModelError as e:
        notes.append(f"Transcribed without speaker labels: {e}")
    return None


def local_runner(
    load_model: LoadModel, load_encoder: LoadEncoder | None = None
) -> Callable[..., FileJobResult]:
    """Run jobs in this process with these model loaders (e.g. a ``ModelCache``'s)."""

    def run(job: FileJob, progress=None, cancel=None) -> FileJobResult:
        return run_file_job(job, load_model, load_encoder, progress=progress, cancel=cancel)

    return run


def plan_outputs(
    files: list[Path], output_dir: Path | None, formats: list[str], overwrite: bool
) -> list[tuple[Path, list[Path], str | None]]:
    """(file, the exports it will write, why it is skipped or None) for a batch of files:
    ``deskscribe transcribe`` (here or ``--ray``) never lets two inputs of one run write the
    same export, and never replaces an existing export unless ``overwrite``."""
    planned = []
    claimed: dict[Path, Path] = {}  # output file -> the input that writes it in this run
    for path in files:
        out_dir = output_dir or path.parent
        targets = [out_dir / f"{path.stem}.{fmt}" for fmt in formats]
        clash = next((t for t in targets if t.resolve() in claimed), None)
        existing = [t for t in targets if t.exists()]
        if clash is not None:
            why = (
                f"{path}: skipped, its {clash.name} would replace the transcript of "
                f"{claimed[clash.resolve()]} from this run; give the files different names "
                "or transcribe them into different --output-dir folders"
            )
        elif existing and not overwrite:
            why = f"{path}: skipped, {existing[0]} already exists (pass --overwrite to replace it)"
        else:
            why = None
            claimed.update({t.resolve(): path for t in targets})
        planned.append((path, targets, why))
    return planned


def wants_word_times(formats) -> bool:
    """Whether exports in ``formats`` need word timestamps: subtitles (SRT, VTT) are cut into
    cues by word times (``transcript.subtitles``)."""
    return any(str(f).lower() in SUBTITLE_FORMATS for f in formats)


def transcribe_options(job: FileJob) -> TranscribeOptions:
    """The engine's options for ``job``: the one place a file job's wishes become them (the
    file queue, ``deskscribe transcribe``, ``deskscribe watch`` and ``sessions recover
    --transcribe``). Word timestamps when asked for, or when the job's exports hold
    subtitles."""
    return TranscribeOptions(
        language=job.language or None,
        languages=tuple(job.languages),
        task=job.task,
        beam_size=job.beam_size,
        word_timestamps=job.word_timestamps or wants_word_times(job.exports),
        initial_prompt=job.initial_prompt,
        vocabulary=job.vocabulary or None,
        condition_on_previous_text=job.condition_on_previous_text,
        batched=job.batched,
        batch_size=job.batch_size,
    )


def _failed(result: FileJobResult, message: str) -> FileJobResult:
    result.status, result.error, result.transcript = "failed", message, None
    return result
