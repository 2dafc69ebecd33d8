"""Long-form transcription: audio of any length, segments streamed out, on the batched path
(``batched.py``: VAD chunks decoded many at a time) or the sequential one (``seek_loop.py``:
openai/whisper's 30 s windows). Audio comes in as a stream of blocks and only about a window
(a batch) is kept in memory, so a 3-hour file costs no more RAM than a 30 s one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np

from ..audio.decode import decode_blocks
from ..transcript import Segment, Transcript
from .batched import transcribe_batched
from .decoding import (
    DecodingError,
    TranscriptionCancelled,
    check_task,
)
from .languages import language_problem, parse_languages
from .model import WhisperModel
from .options import (
    Progress,
    TranscribeOptions,
    TranscriptionInfo,
    batching_fits,
    decoding_options,
    forced_language,
    is_silence,
    needs_fallback,
)
from .prompt import plan_prompt
from .seek_loop import SeekLoop

__all__ = [
    "Progress",
    "TranscribeOptions",
    "TranscriptionCancelled",
    "TranscriptionInfo",
    "batching_fits",
    "check_languages",
    "decoding_options",
    "forced_language",
    "is_silence",
    "language_set",
    "needs_fallback",
    "transcribe_blocks",
    "transcribe_file",
]


def transcribe_blocks(
    model: WhisperModel,
    blocks: Iterable[np.ndarray],
    options: TranscribeOptions | None = None,
    *,
    total_seconds: float | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    info: TranscriptionInfo | None = None,
    shared=None,
) -> Iterator[Segment]:
    """Yield segments as they are decoded from a stream of 16 kHz mono float32 blocks.
    ``shared``: a ``shared_batches.Member`` (the batched path's batches may be decoded with
    other transcriptions'); the sequential path ignores it."""
    opt = options or TranscribeOptions()
    tk = model.tokenizer
    _check_request(model, opt)
    info = info or TranscriptionInfo(language=opt.language, duration=total_seconds)
    plan = plan_prompt(tk, model.dims.n_text_ctx, opt.vocabulary, opt.initial_prompt)
    if plan.note:
        info.notes.append(plan.note)
    unfit = batching_fits(opt) if opt.batched else None
    if unfit is not None:
        info.notes.append(f"batched transcription not used: {unfit}")
    if opt.batched and unfit is None:
        info.path = "batched"
        yield from transcribe_batched(model, blocks, opt, total_seconds=total_seconds,
                                      progress=progress, cancel=cancel, info=info, shared=shared)  # fmt: skip
        return
    info.path = "sequential"
    loop = SeekLoop(model, opt, plan, info, total_seconds, progress)
    yield from loop.run(blocks, cancel)


def _check_request(model: WhisperModel, opt: TranscribeOptions) -> None:
    """Refuse what this model cannot do, before any work (``DecodingError``: why)."""
    tk = model.tokenizer
    check_task(tk, opt.task)
    turbo = model.dims.n_text_layer <= 4 and model.dims.n_audio_layer >= 32
    if opt.task == "translate" and turbo:
        raise DecodingError(
            "large-v3-turbo was not trained to translate and gives poor results; "
            "use large-v3 or medium for translation"
        )
    problem = language_problem(tk, opt.language)
    if problem:
        raise DecodingError(problem)
    check_languages(tk, opt.languages)


def language_set(text: str | None, tk) -> tuple[str, ...]:
    """``--languages en,de`` → the codes, checked against the model (DecodingError: why not)."""
    try:
        codes = parse_languages(text)
    except ValueError as err:
        raise DecodingError(str(err)) from None
    check_languages(tk, codes)
    return codes


def check_languages(tk, languages: tuple[str, ...]) -> None:
    """``languages`` (a detection set) must be codes this model knows."""
    if not languages:
        return
    if not tk.multilingual:
        if set(languages) != {"en"}:
            raise DecodingError(
                "this model is English-only: it cannot detect or transcribe "
                f"{', '.join(c for c in languages if c != 'en')}. Pick a multilingual model "
                "(e.g. base or large-v3-turbo) for a recording in several languages"
            )
        return
    unknown = [c for c in languages if c not in tk.language_ids]
    if unknown:
        raise DecodingError(
            f"unknown language code{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
            f"this model knows: {', '.join(sorted(tk.language_ids))}"
        )


def transcribe_file(
    model: WhisperModel,
    path: str | Path,
    options: TranscribeOptions | None = None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    on_segment: Callable[[Segment], None] | None = None,
    shared=None,
) -> Transcript:
    """Transcribe a media file; segments are passed to ``on_segment`` as they are decoded
    (``shared``: see ``transcribe_blocks``)."""
    blocks = decode_blocks(path)
    info = TranscriptionInfo(language=None, duration=blocks.info.duration)
    segments: list[Segment] = []
    with blocks:
        for seg in transcribe_blocks(
            model,
            blocks,
            options,
            total_seconds=blocks.info.duration,
            progress=progress,
            cancel=cancel,
            info=info,
            shared=shared,
        ):
            segments.append(seg)
            if on_segment is not None:
                on_segment(seg)
    return Transcript(
        segments=segments,
        language=info.language,
        duration=blocks.info.duration,
        source=str(path),
        model=model.name,
    )
