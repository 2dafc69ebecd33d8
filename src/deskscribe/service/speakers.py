"""Speaker labels as every front end gets them: diarize, then name the voices saved as profiles.

One place for "label the speakers of this file" (the file queue, ``deskscribe transcribe
--speakers``, the server) and "label the speakers of this recording" (a live session at Stop).
A broken profile file never costs the transcript: the voices then keep their "Speaker N" names
and the caller is told why. Nor does a speaker model that fails while it runs: the words are
kept without speaker labels, and the caller is told which model and why. Asking for more
speakers than the recording holds (``--speakers 5`` on a two-person call) labels the voices
found, not inventions, and says so.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ..errors import Cancelled, EngineError, Progress, first_line
from ..speakers.assign import assign_speakers, mark_overlapped_speech
from ..speakers.diarize import (
    Diarization,
    DiarizeOptions,
    diarize,
    parse_speakers,
    transcribe_words,
)
from ..speakers.encoder import SpeakerEncoder, SpeakerModelError
from ..speakers.growing import GrowingTrack, diarize_track
from ..speakers.profiles import ProfileError, apply_profiles, match_threshold_for, voice_of
from ..transcript import Transcript

log = logging.getLogger(__name__)


def name_known_voices(
    transcript: Transcript,
    centroids: dict[str, np.ndarray],
    encoder: SpeakerEncoder,
    warn: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """Name the speakers of ``transcript`` whose voice matches a saved profile (profiles of
    ``encoder``'s model, at its kind's threshold); {speaker id: name}. A profile file that
    cannot be read is reported to ``warn`` (else logged) and nobody is renamed."""
    try:
        return apply_profiles(
            transcript, centroids, match_threshold_for(encoder.kind), model=encoder.name
        )
    except ProfileError as err:
        if warn is not None:
            warn(f"voice profiles not used: {err}")
        else:
            log.exception("voice profiles not used")
        return {}


def label_file(
    model,
    path: str | Path,
    encoder: SpeakerEncoder,
    options: DiarizeOptions | None = None,
    transcribe_options=None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    warn: Callable[[str], None] | None = None,
    shared=None,
) -> Transcript:
    """Transcribe ``path`` with word timestamps, label every word with its speaker and name
    the known voices. ``progress`` reports the "transcribe" stage in seconds of audio, then
    "speakers" in windows embedded. When the speaker model fails, the transcript comes back
    without labels and ``warn`` (else the log) says why; fewer voices than asked is said too."""
    transcript, audio = transcribe_words(
        model, path, transcribe_options, progress=progress, cancel=cancel, shared=shared
    )
    pipeline = segmentation_pipeline(warn)
    if pipeline is not None:
        labelled = label_with_segmentation(
            pipeline, transcript, audio, encoder, options, progress, cancel, warn
        )
        if labelled is not None:
            return labelled
    try:
        result = diarize(audio, encoder, options, progress=progress, cancel=cancel)
    except (SpeakerModelError, EngineError, MemoryError) as err:
        _say(warn, f"speaker labels not added: the speaker model {encoder.name} failed "
                   f"({first_line(err)})")  # fmt: skip
        return transcript
    note = fewer_than_asked(result, options)
    if note:
        _say(warn, note)
    labelled = assign_speakers(transcript, result)
    name_known_voices(labelled, result.centroids, encoder, warn)
    return labelled


# --------------------------------------------------------------------------- with overlap

SETTING = "speaker_pipeline"  # "auto": with overlap when installed; "voices": never


def segmentation_pipeline(warn: Callable[[str], None] | None = None):
    """The overlap-aware pipeline (``speakers/segmentation.py``) when its models are in the
    store and the ``speaker_pipeline`` setting allows it, loaded once per installed folder;
    None otherwise (labels then come from the voice encoder's pipeline). A folder that fails
    to load is said to ``warn`` and skipped."""
    from .. import settings
    from ..models.store import find_segmentation_model

    if settings.get(SETTING, "auto") == "voices":
        return None
    folder = find_segmentation_model()
    if folder is None:
        return None
    if importlib.util.find_spec("scipy") is None:  # the AHC start (not in the bundle)
        _say(warn, f"overlap-aware speaker labels not used: {folder.name} needs scipy, which "
                   "this installation lacks (pip install 'deskscribe[segmentation]'); labelled "
                   "by voice instead")  # fmt: skip
        return None
    try:
        return _load_segmentation(str(folder), (folder / "manifest.json").stat().st_mtime)
    except Exception as err:
        _say(warn, f"overlap-aware speaker labels not used: {folder.name} cannot be loaded "
                   f"({first_line(err)}); labelled by voice instead")  # fmt: skip
        return None


@functools.lru_cache(maxsize=1)
def _load_segmentation(folder: str, _stamp: float):
    from ..speakers.segmentation import SegmentationPipeline

    root = Path(folder)
    return SegmentationPipeline(root / "segmentation.onnx", root / "embedding.onnx", root)


def segmentation_options(options: DiarizeOptions | None):
    """The speaker count asked for, as the segmentation pipeline takes it."""
    from ..speakers.segmentation import SegmentationOptions

    if options is None:
        return SegmentationOptions()
    return SegmentationOptions(
        num_speakers=options.num_speakers,
        min_speakers=options.min_speakers,
        max_speakers=options.max_speakers,
    )


def label_with_segmentation(
    pipeline,
    transcript: Transcript,
    audio: np.ndarray,
    encoder: SpeakerEncoder | None,
    options: DiarizeOptions | None,
    progress: Progress | None,
    cancel: threading.Event | None,
    warn: Callable[[str], None] | None,
    *,
    cache=None,
    voices: dict[str, np.ndarray] | None = None,
    voice_seconds: float = 60.0,
) -> Transcript | None:
    """Words labelled from the exclusive timeline, words said under another voice marked
    ``overlap``, known voices named with ``encoder``'s profiles; None when the pipeline
    failed (said to ``warn``), so that the caller labels by voice instead. ``cache``: the
    pipeline's windows from earlier passes over the same growing recording. ``voices``: when
    given, each speaker's voice in ``encoder``'s space (from up to ``voice_seconds`` of their
    words) goes there and known voices are not named (a live revision keeps the names shown)."""
    stage_share = {"segmentation": (0.0, 0.3), "embeddings": (0.3, 0.7)}

    def report(done: float, total: float, stage: str = "") -> None:
        if progress is not None and total:
            base, share = stage_share.get(stage, (0.0, 1.0))
            progress(base + share * done / total, 1.0, "speakers")

    try:
        result = pipeline(
            audio, segmentation_options(options), progress=report, cancel=cancel, cache=cache
        )
    except Cancelled:
        raise
    except Exception as err:
        _say(warn, f"overlap-aware speaker labels failed ({first_line(err)}); labelled by "
                   "voice instead")  # fmt: skip
        return None
    note = fewer_than_asked(result.diarization, options)
    if note:
        _say(warn, note)
    labelled = assign_speakers(transcript, result.diarization)
    mark_overlapped_speech(labelled.segments, result.overlapping)
    if encoder is not None:
        centroids = {} if voices is None else voices
        for sid in labelled.speakers:
            try:
                centroids[sid] = voice_of(audio, labelled, sid, encoder, max_seconds=voice_seconds)
            except ProfileError:
                continue  # no stretch of 1 s: nobody to name
            except (SpeakerModelError, EngineError, MemoryError) as err:
                _say(warn, f"voice profiles not used: the speaker model {encoder.name} "
                           f"failed ({first_line(err)})")  # fmt: skip
                break
        if voices is None:
            name_known_voices(labelled, centroids, encoder, warn)
    return labelled


def fewer_than_asked(result: Diarization, options: DiarizeOptions | None) -> str | None:
    """What to tell the user when the recording holds fewer distinct voices than asked for
    (diarization labels only the voices it can tell apart); None otherwise."""
    wanted = options and (options.num_speakers or options.min_speakers)
    found = len(result.speakers)
    if not wanted or found >= wanted or not result.turns:
        return None
    return (
        f"asked for {wanted} speakers, but only {found} distinct "
        f"voice{'s' if found != 1 else ''} could be told apart; labelled {found}"
    )


def _say(warn: Callable[[str], None] | None, message: str) -> None:
    if warn is not None:
        warn(message)
    else:
        log.warning("%s", message)


def participants_options(participants: str, beside_you: bool = False) -> DiarizeOptions | None:
    """The diarization options for "how many people spoke?" (``""``/``auto``, ``3`` or
    ``2-4``; None when not given; ValueError with what to type otherwise). ``beside_you``:
    meeting mode, where the microphone's owner is labelled "You" and the count of voices on
    the system-audio track is one less."""
    text = (participants or "").strip().lower()
    if text in ("", "auto"):
        return None
    try:
        opt = parse_speakers(text)
    except ValueError:
        raise ValueError(
            f"How many people spoke: {participants!r} is not a number of people; type a "
            "number such as 3, a range such as 2-4, or leave it empty"
        ) from None
    if beside_you:
        less = lambda n: None if n is None else max(1, n - 1)  # noqa: E731
        opt.num_speakers = less(opt.num_speakers)
        opt.min_speakers, opt.max_speakers = less(opt.min_speakers), less(opt.max_speakers)
    return opt


def label_recording(
    transcript: Transcript,
    audio: np.ndarray,
    encoder: SpeakerEncoder,
    cancel: threading.Event | None = None,
    growing: GrowingTrack | None = None,
    options: DiarizeOptions | None = None,
) -> Transcript:
    """A copy of ``transcript`` (of 16 kHz ``audio``) with speakers from one offline pass over
    the whole recording, the known voices named (``DiarizationCancelled`` once ``cancel`` is
    set). ``growing``: what earlier passes over the same recording computed (a live session's
    revisions). ``options``: the speaker count asked for, if any (None: ``growing``'s)."""
    pipeline = segmentation_pipeline()
    if pipeline is not None:
        labelled = _segmentation_within(
            pipeline, transcript, audio, encoder, options, cancel, SEGMENTATION_AT_STOP_SECONDS,
            None if growing is None else growing.segmentation,
        )  # fmt: skip
        if labelled is not None:
            return labelled
    turns = diarize_track(audio, encoder, growing, options=options, cancel=cancel)
    labelled = assign_speakers(transcript, turns)
    name_known_voices(labelled, turns.centroids, encoder)
    return labelled


# The pass at Stop: the overlap-aware pipeline gets this long, then the voice pipeline (whose
# embeddings the live revisions already computed) labels instead, within the pass's budget.
SEGMENTATION_AT_STOP_SECONDS = 45.0


def _segmentation_within(pipeline, transcript, audio, encoder, options, cancel, seconds, cache):
    """``label_with_segmentation`` given ``seconds``; None when it ran out or failed.
    ``cancel`` (the caller's) still cancels everything. ``cache``: the live revisions'
    windows, when they ran the pipeline."""
    own = threading.Event()
    timer = threading.Timer(seconds, own.set)
    timer.daemon = True
    timer.start()
    try:
        return label_with_segmentation(
            pipeline, transcript, audio, encoder, options, None, _Either(own, cancel), None,
            cache=cache,
        )  # fmt: skip
    except Cancelled:
        if cancel is not None and cancel.is_set():
            raise
        log.warning("overlap-aware labels at Stop ran past %.0f s: labelled by voice", seconds)
        return None
    finally:
        timer.cancel()


class _Either:
    """Set when either event is (what the pipeline's ``cancel`` is asked)."""

    def __init__(self, *events: threading.Event | None) -> None:
        self.events = [e for e in events if e is not None]

    def is_set(self) -> bool:
        return any(e.is_set() for e in self.events)
