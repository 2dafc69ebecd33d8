"""Long-form transcription: 30 s windows over audio of any length, segments streamed out.

The seek loop follows openai/whisper's ``transcribe.py``: timestamp tokens split a window
into segments and say where the next window starts; a window is retried at higher
temperatures when its text is too repetitive (gzip compression ratio) or too unlikely
(average log-probability); a window is silence when the no-speech probability is high and
the text unlikely. Audio comes in as a stream of blocks and only about one window is kept
in memory, so a 3-hour file costs no more RAM than a 30 s one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..audio.decode import decode_blocks
from ..transcript import Segment, Transcript, Word
from .alignment import find_alignment
from .batched import transcribe_batched
from .decoding import (
    DecodingError,
    DecodingOptions,
    DecodingResult,
    TranscriptionCancelled,
    WindowDecoder,
    check_task,
)
from .features import FRAME_SECONDS, HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, log_mel
from .language_runs import SURE, language_runs
from .languages import add_spoken, choose, main_language, parse_languages
from .model import AudioFeatures, WhisperModel
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


class _AudioWindow:
    """Keeps only the samples from the current seek onward, pulling blocks as needed."""

    def __init__(self, blocks: Iterable[np.ndarray]) -> None:
        self._blocks = iter(blocks)
        self._buffer = np.zeros(0, dtype=np.float32)
        self._start = 0  # absolute sample index of _buffer[0]
        self.exhausted = False

    def fill_to(self, end: int) -> None:
        pending = [self._buffer]
        have = self._start + self._buffer.shape[0]
        while have < end and not self.exhausted:
            block = next(self._blocks, None)
            if block is None:
                self.exhausted = True
                break
            pending.append(np.asarray(block, dtype=np.float32).reshape(-1))
            have += pending[-1].shape[0]
        if len(pending) > 1:
            self._buffer = np.concatenate(pending)

    @property
    def end(self) -> int:
        return self._start + self._buffer.shape[0]

    def read(self, start: int, n: int) -> np.ndarray:
        self.fill_to(start + n)
        return self._buffer[start - self._start : start - self._start + n]

    def drop_before(self, sample: int) -> None:
        if sample > self._start:
            self._buffer = self._buffer[sample - self._start :].copy()
            self._start = sample


def transcribe_blocks(
    model: WhisperModel,
    blocks: Iterable[np.ndarray],
    options: TranscribeOptions | None = None,
    *,
    total_seconds: float | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    info: TranscriptionInfo | None = None,
) -> Iterator[Segment]:
    """Yield segments as they are decoded from a stream of 16 kHz mono float32 blocks."""
    opt = options or TranscribeOptions()
    tk = model.tokenizer
    check_task(tk, opt.task)
    turbo = model.dims.n_text_layer <= 4 and model.dims.n_audio_layer >= 32
    if opt.task == "translate" and turbo:
        raise DecodingError(
            "large-v3-turbo was not trained to translate and gives poor results; "
            "use large-v3 or medium for translation"
        )
    if opt.language and not tk.multilingual and opt.language != "en":
        raise DecodingError(
            f"this model is English-only; it cannot transcribe {opt.language!r}. "
            "Pick a multilingual model, or leave the language out"
        )
    if opt.language and tk.multilingual and opt.language not in tk.language_ids:
        raise DecodingError(
            f"unknown language {opt.language!r}; use a code such as "
            f"{', '.join(sorted(tk.language_ids)[:12])}, …"
        )
    check_languages(tk, opt.languages)
    info = info or TranscriptionInfo(language=opt.language, duration=total_seconds)
    plan = plan_prompt(tk, model.dims.n_text_ctx, opt.vocabulary, opt.initial_prompt)
    if plan.note:
        info.notes.append(plan.note)
    unfit = batching_fits(opt) if opt.batched else None
    if unfit is not None:
        info.notes.append(f"batched transcription not used: {unfit}")
    if opt.batched and unfit is None:
        info.path = "batched"

        yield from transcribe_batched(
            model,
            blocks,
            opt,
            total_seconds=total_seconds,
            progress=progress,
            cancel=cancel,
            info=info,
        )
        return
    info.path = "sequential"
    conditioned = opt.condition_on_previous_text is not False
    audio = _AudioWindow(blocks)
    forced = forced_language(tk, opt)
    if forced:
        info.language = forced
    language = last_language = forced
    spoken: dict[str, float] = {}  # seconds of segments per language
    last_text = ""  # the newest segment's text (for _copies_prompt)
    all_tokens: list[int] = list(plan.initial)
    prompt_reset = 0
    seek = 0  # in samples
    seg_id = 0
    total = total_seconds if total_seconds is not None else -1.0

    def advance(frames: int) -> None:
        nonlocal seek
        seek += frames * HOP_LENGTH
        audio.drop_before(seek)
        done = seek / SAMPLE_RATE
        _report(progress, min(done, total) if total > 0 else done, total)

    while True:
        if cancel is not None and cancel.is_set():
            raise TranscriptionCancelled("transcription cancelled")
        chunk = audio.read(seek, N_SAMPLES)
        frames_left = chunk.shape[0] // HOP_LENGTH  # openai counts whole frames only
        if frames_left == 0:
            break
        segment_frames = min(N_FRAMES, frames_left)
        window_seconds = segment_frames * FRAME_SECONDS
        time_offset = seek / SAMPLE_RATE
        if float(np.sqrt(np.mean(chunk.astype(np.float64) ** 2))) < opt.silence_rms:
            advance(segment_frames)
            continue

        features = model.encode(_window_mel(chunk, model.n_mels, opt)[None])
        if not forced:
            _, probs = WindowDecoder(model, DecodingOptions()).detect_language(features)
            found = choose(probs, opt.languages)
            if info.language is None:
                info.language_probability = found.probability
                info.all_language_probs = found.probs
            if found.probability >= SURE and found.language in (language, None):
                language = found.language
            else:  # the language may change in this window: decode up to the change only
                runs = language_runs(model, chunk, opt.languages, language)
                language = runs[0][2]
                if len(runs) > 1:
                    chunk = chunk[: runs[0][1]]
                    segment_frames = chunk.shape[0] // HOP_LENGTH
                    window_seconds = segment_frames * FRAME_SECONDS
                    features = model.encode(_window_mel(chunk, model.n_mels, opt)[None])
            info.language = info.language or language
            if last_language is not None and language != last_language:
                prompt_reset = len(all_tokens)  # text in another language would be copied
            last_language = language
        prompt = plan.prompt(all_tokens[prompt_reset:])
        result = _decode_with_fallback(model, features, language, opt, prompt)

        if is_silence(result, opt):
            advance(segment_frames)
            continue

        pieces, advance_frames = _split_window(result.tokens, tk.timestamp_begin, segment_frames)
        window_segments: list[Segment] = []
        piece_logprobs: list[list[float]] = []
        for start_s, end_s, lo, hi in pieces:
            toks = result.tokens[lo:hi]
            text = tk.decode([t for t in toks if t < tk.eot])
            if not any(ch.isalnum() for ch in text) or start_s >= window_seconds:
                continue  # punctuation alone, or a timestamp past the end of the audio
            if _copies_prompt(text, last_text, result, opt):
                continue
            last_text = text
            window_segments.append(
                Segment(
                    id=seg_id,
                    start=round(time_offset + start_s, 3),
                    end=round(time_offset + min(end_s, window_seconds), 3),
                    text=text,
                    tokens=toks,
                    avg_logprob=result.avg_logprob,
                    no_speech_prob=result.no_speech_prob,
                    compression_ratio=result.compression_ratio,
                    temperature=result.temperature,
                    language=language,
                )
            )
            piece_logprobs.append(result.token_logprobs[lo:hi])
            seg_id += 1
        if opt.word_timestamps and window_segments:
            _add_words(
                model,
                features,
                language,
                opt,
                window_segments,
                piece_logprobs,
                time_offset,
                segment_frames,
            )
            ends = [w.end - time_offset for seg in window_segments for w in seg.words]
            last_word_end = ends[-1] if ends else None
        elif window_segments and advance_frames < segment_frames:
            # The same check without word timestamps: the window's words are aligned (one
            # decoder run over its tokens), not kept.
            last_word_end = _last_word_end(
                model, features, language, opt, window_segments, piece_logprobs, segment_frames
            )
        else:
            last_word_end = None
        # The next window starts after the last word when the last timestamp token falls
        # behind it (as openai/whisper with word timestamps, which also moves back to an
        # earlier word end: here that re-decoded the last word of live passes). Timestamp
        # tokens can lag far behind the words (base int8 on the real call, on a VNNI CPU:
        # 30 s of speech stamped 0-24 s), and a seek on them decodes the window's last
        # sentences a second time.
        if last_word_end is not None and not _single_ending(result.tokens, tk.timestamp_begin):
            after_words = round(last_word_end / FRAME_SECONDS)
            advance_frames = max(advance_frames, min(after_words, segment_frames))
        all_tokens += [t for s in window_segments for t in s.tokens]
        if not conditioned or result.temperature > 0.5:
            prompt_reset = len(all_tokens)
        advance(advance_frames)
        for s in window_segments:
            add_spoken(spoken, s.language, s.end - s.start)
        if not forced:
            info.language = main_language(spoken.items()) or info.language
        yield from window_segments


def _copies_prompt(
    text: str, previous: str, result: DecodingResult, opt: TranscribeOptions
) -> bool:
    """The segment repeats the one before it word for word while the model itself says the
    window holds no speech: Whisper copying its prompt over silence or noise (on the real
    call, "Oh, I don't hear that in New Jersey now." twice at the end), not a second saying."""
    if opt.no_speech_threshold is None or result.no_speech_prob <= opt.no_speech_threshold:
        return False
    words = [w.strip(".,!?;:").lower() for w in text.split()]
    return bool(words) and words == [w.strip(".,!?;:").lower() for w in previous.split()]


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


def _report(progress: Progress | None, done: float, total: float) -> None:
    if progress is not None:
        progress(done, total)


# A shorter context is never shorter than this. Below about 8 s Whisper garbles real speech:
# the JFK recording, streamed in live passes with 2 s of padding and no minimum, began "And so
# my fellow Awakens and my fellow militia migrants! SO, SO, MY CL AS NOT" (tiny.en int8); from
# 10 s on, the text was the 30 s window's.
CONTEXT_MIN_SECONDS = 10


def _window_mel(chunk: np.ndarray, n_mels: int, opt: TranscribeOptions) -> np.ndarray:
    """The window's log-mel: 30 s, or (``context_pad_seconds``) only the audio there is plus
    that much silence, in whole seconds, at least ``CONTEXT_MIN_SECONDS``. Both give the same
    frames where they overlap: the padding is silence either way, and the clamp follows the
    loudest frame, which is speech."""
    if opt.context_pad_seconds is None:
        return log_mel(chunk, n_mels)
    seconds = math.ceil(chunk.shape[0] / SAMPLE_RATE + opt.context_pad_seconds)
    seconds = max(CONTEXT_MIN_SECONDS, seconds)
    return log_mel(chunk, n_mels, pad_to=min(N_SAMPLES, seconds * SAMPLE_RATE))


def _decode_with_fallback(
    model: WhisperModel,
    features: AudioFeatures,
    language: str | None,
    opt: TranscribeOptions,
    prompt: list[int],
) -> DecodingResult:
    result: DecodingResult | None = None
    for temperature in opt.temperatures:
        dopt = decoding_options(opt, language, temperature, prompt, opt.without_timestamps)
        result = WindowDecoder(model, dopt).decode(features, language)
        if not needs_fallback(result, opt):
            break
    assert result is not None
    return result


def _single_ending(tokens: list[int], ts_begin: int) -> bool:
    """The window's tokens end on one timestamp (not a pair): the speech ran to its end."""
    return len(tokens) >= 2 and tokens[-1] >= ts_begin and tokens[-2] < ts_begin


def _split_window(
    tokens: list[int], ts_begin: int, segment_frames: int
) -> tuple[list[tuple[float, float, int, int]], int]:
    """Cut a window's tokens at consecutive timestamp pairs.

    Returns ([(start s, end s, first token index, end token index)], frames to advance by).
    """
    window_seconds = segment_frames * FRAME_SECONDS
    is_ts = [t >= ts_begin for t in tokens]
    single_ending = _single_ending(tokens, ts_begin)
    cuts = [i for i in range(1, len(tokens)) if is_ts[i] and is_ts[i - 1]]
    if cuts:
        if single_ending:
            cuts.append(len(tokens))
        pieces = []
        last = 0
        for cut in cuts:
            start = (tokens[last] - ts_begin) * 0.02
            end = (tokens[cut - 1] - ts_begin) * 0.02
            pieces.append((start, end, last, cut))
            last = cut
        if single_ending:
            return pieces, segment_frames
        last_ts = tokens[last - 1] - ts_begin
        return pieces, max(1, last_ts * 2)
    stamps = [t for t in tokens if t >= ts_begin]
    duration = window_seconds
    if stamps and stamps[-1] != ts_begin:
        duration = (stamps[-1] - ts_begin) * 0.02
    return [(0.0, duration, 0, len(tokens))], segment_frames


def _last_word_end(
    model: WhisperModel,
    features: AudioFeatures,
    language: str | None,
    opt: TranscribeOptions,
    segments: list[Segment],
    piece_logprobs: list[list[float]],
    segment_frames: int,
) -> float | None:
    """Where the window's last word ends (s from the window start), from the alignment."""
    copies = [replace(s, words=[]) for s in segments]
    _add_words(model, features, language, opt, copies, piece_logprobs, 0.0, segment_frames)
    ends = [w.end for s in copies for w in s.words]
    return ends[-1] if ends else None


def _add_words(
    model: WhisperModel,
    features: AudioFeatures,
    language: str | None,
    opt: TranscribeOptions,
    segments: list[Segment],
    piece_logprobs: list[list[float]],
    time_offset: float,
    segment_frames: int,
) -> None:
    """Time every word of the window's kept segments (``piece_logprobs[i]`` holds the
    log-probabilities of ``segments[i].tokens``)."""
    tk = model.tokenizer
    text_tokens: list[int] = []
    logprobs: list[float] = []
    for seg, lps in zip(segments, piece_logprobs, strict=True):
        for tok, lp in zip(seg.tokens, lps, strict=False):
            if tok < tk.eot:
                text_tokens.append(tok)
                logprobs.append(lp)
    timings = find_alignment(
        model, features, tk.sot_sequence(language, opt.task), text_tokens, segment_frames, logprobs
    )
    # Hand each word to the segment whose tokens it came from.
    bounds, acc = [], 0
    for s in segments:
        acc += sum(1 for t in s.tokens if t < tk.eot)
        bounds.append(acc)
    consumed, si = 0, 0
    for w in timings:
        while si < len(segments) - 1 and consumed >= bounds[si]:
            si += 1
        seg = segments[si]
        start = round(time_offset + w.start, 3)
        end = round(time_offset + max(w.end, w.start), 3)
        seg.words.append(
            Word(start=start, end=end, text=w.word, probability=round(w.probability, 4))
        )
        consumed += len(w.tokens)
    for seg in segments:
        if seg.words:
            seg.start, seg.end = seg.words[0].start, max(seg.words[-1].end, seg.words[0].start)


def transcribe_file(
    model: WhisperModel,
    path: str | Path,
    options: TranscribeOptions | None = None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    on_segment: Callable[[Segment], None] | None = None,
) -> Transcript:
    """Transcribe a media file; segments are passed to ``on_segment`` as they are decoded."""
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
