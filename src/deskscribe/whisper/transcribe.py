"""Long-form transcription: 30 s windows over audio of any length, segments streamed out.

The seek loop follows openai/whisper's ``transcribe.py``: timestamp tokens split a window
into segments and say where the next window starts; a window is retried at higher
temperatures when its text is too repetitive (gzip compression ratio) or too unlikely
(average log-probability); a window is silence when the no-speech probability is high and
the text unlikely. Audio comes in as a stream of blocks and only about one window is kept
in memory, so a 3-hour file costs no more RAM than a 30 s one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..audio.decode import decode_blocks
from ..audio.vad import VadOptions
from ..transcript import Segment, Transcript, Word
from .alignment import find_alignment
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
from .prompt import plan_prompt


@dataclass
class TranscribeOptions:
    # None: detected per part (each window, each batched chunk) on multilingual models, so
    # a file that changes language is written in each of its languages; a code forces one.
    language: str | None = None
    languages: tuple[str, ...] = ()  # detection limited to these codes (empty: any)
    task: str = "transcribe"
    beam_size: int | None = 5
    patience: float = 1.0
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float | None = 2.4
    logprob_threshold: float | None = -1.0
    no_speech_threshold: float | None = 0.6
    # None: Whisper's default, conditioned on the sequential path (the batched path has no
    # previous text to condition on). True, asked for explicitly: the sequential path is used
    # even when ``batched`` is set (see ``batching_fits``).
    condition_on_previous_text: bool | None = None
    initial_prompt: str | None = None
    # Names and jargon to spell right ("ComfyUI, Kubernetes, Dr. Okafor"): the prompt of every
    # window, chunk and live pass, before the initial prompt and earlier text (prompt.py).
    vocabulary: str | None = None
    word_timestamps: bool = False
    without_timestamps: bool = False
    silence_rms: float = 1e-4  # windows quieter than this are not decoded at all
    # The batched path (batched.py): VAD speech packed into 30 s chunks, decoded
    # ``batch_size`` at a time (0: chosen for the device). Chunks are independent, so
    # previous-text conditioning does not apply there; ``initial_prompt`` does. When the
    # options ask for what batching cannot do, the sequential seek path runs instead.
    batched: bool = False
    batch_size: int = 0
    vad: VadOptions | None = None  # None: batched.default_vad_options()


@dataclass
class TranscriptionInfo:
    language: str | None
    language_probability: float = 1.0
    duration: float | None = None
    all_language_probs: dict[str, float] = field(default_factory=dict)
    path: str = ""  # "batched" or "sequential": the path that ran
    notes: list[str] = field(default_factory=list)  # e.g. why batching was not used


def batching_fits(opt: TranscribeOptions) -> str | None:
    """None when the batched path can honour ``opt``; otherwise why it cannot."""
    if opt.condition_on_previous_text:
        return "conditioning on the previous text needs the sequential path"
    return None


Progress = Callable[[float, float], None]  # (seconds done, total seconds or -1 if unknown)


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
        from .batched import transcribe_batched

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

        features = model.encode(log_mel(chunk, model.n_mels)[None])
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
                    features = model.encode(log_mel(chunk, model.n_mels)[None])
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
        all_tokens += [t for s in window_segments for t in s.tokens]
        if not conditioned or result.temperature > 0.5:
            prompt_reset = len(all_tokens)
        advance(advance_frames)
        for s in window_segments:
            add_spoken(spoken, s.language, s.end - s.start)
        if not forced:
            info.language = main_language(spoken.items()) or info.language
        yield from window_segments


def forced_language(tk, opt: TranscribeOptions) -> str | None:
    """The one language for the whole input (given, the only one allowed, or English for an
    English-only model); None: detected per part."""
    if not tk.multilingual:
        return "en"
    if opt.language:
        return opt.language
    return opt.languages[0] if len(opt.languages) == 1 else None


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


def is_silence(result: DecodingResult, opt: TranscribeOptions) -> bool:
    """The model says "no speech" and what it decoded is improbable, or has no words at all."""
    if not any(ch.isalnum() for ch in result.text):
        return True
    # Whisper's classic hallucinations on hum or room tone ("You", "Thank you.") come with a
    # very high no-speech probability and a few words; real short replies come with a low one.
    if (
        opt.no_speech_threshold is not None
        and result.no_speech_prob > max(opt.no_speech_threshold, 0.8)
        and len(result.text.split()) <= 3
    ):
        return True
    return (
        opt.no_speech_threshold is not None
        and result.no_speech_prob > opt.no_speech_threshold
        and (opt.logprob_threshold is None or result.avg_logprob < opt.logprob_threshold)
    )


def _report(progress: Progress | None, done: float, total: float) -> None:
    if progress is not None:
        progress(done, total)


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


def decoding_options(
    opt: TranscribeOptions,
    language: str | None,
    temperature: float,
    prompt: list[int],
    without_timestamps: bool,
) -> DecodingOptions:
    """One decoding pass of the temperature fallback: beam search at 0, sampling above."""
    return DecodingOptions(
        task=opt.task,
        language=language,
        temperature=temperature,
        beam_size=opt.beam_size if temperature == 0 else None,
        patience=opt.patience,
        prompt=prompt or None,
        without_timestamps=without_timestamps,
    )


def needs_fallback(result: DecodingResult, opt: TranscribeOptions) -> bool:
    """Too repetitive or too unlikely to keep: decode again at the next temperature."""
    if is_silence(result, opt):
        return False  # the caller skips the window: no point retrying
    if result.looped:
        return True
    if (
        opt.compression_ratio_threshold is not None
        and result.compression_ratio > opt.compression_ratio_threshold
    ):
        return True
    return opt.logprob_threshold is not None and result.avg_logprob < opt.logprob_threshold


def _split_window(
    tokens: list[int], ts_begin: int, segment_frames: int
) -> tuple[list[tuple[float, float, int, int]], int]:
    """Cut a window's tokens at consecutive timestamp pairs.

    Returns ([(start s, end s, first token index, end token index)], frames to advance by).
    """
    window_seconds = segment_frames * FRAME_SECONDS
    is_ts = [t >= ts_begin for t in tokens]
    single_ending = len(is_ts) >= 2 and is_ts[-1] and not is_ts[-2]
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
