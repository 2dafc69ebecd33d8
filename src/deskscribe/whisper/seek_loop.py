"""The sequential path of a file (``transcribe.py`` chooses it when batching does not fit):
openai/whisper's seek loop. Timestamp tokens split a 30 s window into segments and say where
the next window starts; a window is retried at higher temperatures when its text is too
repetitive (gzip compression ratio) or too unlikely (average log-probability); a window is
silence when the no-speech probability is high and the text unlikely. Audio comes in as a
stream of blocks and only about one window is kept in memory.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ..transcript import Segment, Word
from .alignment import find_alignment
from .decoding import (
    DecodingOptions,
    DecodingResult,
    TranscriptionCancelled,
    WindowDecoder,
)
from .features import FRAME_SECONDS, HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, log_mel
from .language_runs import SURE, language_runs
from .languages import add_spoken, choose, main_language
from .model import AudioFeatures, WhisperModel
from .options import (
    Progress,
    TranscribeOptions,
    decoding_options,
    forced_language,
    is_silence,
    needs_fallback,
)


class AudioWindow:
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


class SeekLoop:
    """The sequential path: 30 s windows from ``seek``; each window's language, decode with
    temperature fallback, segments from its timestamp tokens, word times, and where the
    next window starts."""

    def __init__(self, model, opt: TranscribeOptions, plan, info, total_seconds, progress):
        self.model, self.opt, self.plan, self.info = model, opt, plan, info
        self.tk = model.tokenizer
        self.progress = progress
        self.total = total_seconds if total_seconds is not None else -1.0
        self.conditioned = opt.condition_on_previous_text is not False
        self.forced = forced_language(self.tk, opt)
        if self.forced:
            info.language = self.forced
        self.language = self.last_language = self.forced
        self.spoken: dict[str, float] = {}  # seconds of segments per language
        self.last_text = ""  # the newest segment's text (for _copies_prompt)
        self.all_tokens: list[int] = list(plan.initial)
        self.prompt_reset = 0
        self.seek = 0  # in samples
        self.seg_id = 0

    def _advance(self, audio: AudioWindow, frames: int) -> None:
        self.seek += frames * HOP_LENGTH
        audio.drop_before(self.seek)
        done = self.seek / SAMPLE_RATE
        _report(self.progress, min(done, self.total) if self.total > 0 else done, self.total)

    def run(self, blocks, cancel) -> Iterator[Segment]:
        model, opt = self.model, self.opt
        audio = AudioWindow(blocks)
        while True:
            if cancel is not None and cancel.is_set():
                raise TranscriptionCancelled("transcription cancelled")
            chunk = audio.read(self.seek, N_SAMPLES)
            frames_left = chunk.shape[0] // HOP_LENGTH  # openai counts whole frames only
            if frames_left == 0:
                break
            segment_frames = min(N_FRAMES, frames_left)
            if float(np.sqrt(np.mean(chunk.astype(np.float64) ** 2))) < opt.silence_rms:
                self._advance(audio, segment_frames)
                continue
            features = model.encode(_window_mel(chunk, model.n_mels, opt)[None])
            if not self.forced:
                chunk, segment_frames, features = self._window_language(chunk, segment_frames,
                                                                        features)  # fmt: skip
            prompt = self.plan.prompt(self.all_tokens[self.prompt_reset :])
            result = _decode_with_fallback(model, features, self.language, opt, prompt)
            if is_silence(result, opt):
                self._advance(audio, segment_frames)
                continue
            window = self._window(result, features, segment_frames)
            self._advance(audio, window.advance_frames)
            yield from window.segments

    def _window_language(self, chunk, segment_frames, features):
        """The window's language; a window that may change language is cut at the change."""
        model, opt, info = self.model, self.opt, self.info
        _, probs = WindowDecoder(model, DecodingOptions()).detect_language(features)
        found = choose(probs, opt.languages)
        if info.language is None:
            info.language_probability = found.probability
            info.all_language_probs = found.probs
        if found.probability >= SURE and found.language in (self.language, None):
            self.language = found.language
        else:  # the language may change in this window: decode up to the change only
            runs = language_runs(model, chunk, opt.languages, self.language)
            self.language = runs[0][2]
            if len(runs) > 1:
                chunk = chunk[: runs[0][1]]
                segment_frames = chunk.shape[0] // HOP_LENGTH
                features = model.encode(_window_mel(chunk, model.n_mels, opt)[None])
        info.language = info.language or self.language
        if self.last_language is not None and self.language != self.last_language:
            self.prompt_reset = len(self.all_tokens)  # text in another language is copied
        self.last_language = self.language
        return chunk, segment_frames, features

    def _window(self, result, features, segment_frames: int) -> _Window:
        """The window's segments (with words when asked) and the frames to move on by."""
        tk, opt = self.tk, self.opt
        time_offset = self.seek / SAMPLE_RATE
        window_seconds = segment_frames * FRAME_SECONDS
        pieces, advance_frames = _split_window(result.tokens, tk.timestamp_begin, segment_frames)
        segments: list[Segment] = []
        logprobs: list[list[float]] = []
        for start_s, end_s, lo, hi in pieces:
            toks = result.tokens[lo:hi]
            text = tk.decode([t for t in toks if t < tk.eot])
            if not any(ch.isalnum() for ch in text) or start_s >= window_seconds:
                continue  # punctuation alone, or a timestamp past the end of the audio
            if _copies_prompt(text, self.last_text, result, opt):
                continue
            self.last_text = text
            segments.append(Segment(
                id=self.seg_id, start=round(time_offset + start_s, 3),
                end=round(time_offset + min(end_s, window_seconds), 3), text=text, tokens=toks,
                avg_logprob=result.avg_logprob, no_speech_prob=result.no_speech_prob,
                compression_ratio=result.compression_ratio, temperature=result.temperature,
                language=self.language,
            ))  # fmt: skip
            logprobs.append(result.token_logprobs[lo:hi])
            self.seg_id += 1
        last_word_end = self._last_word_end(features, segments, logprobs, segment_frames,
                                            advance_frames, time_offset)  # fmt: skip
        # The next window starts after the last word when the last timestamp token falls
        # behind it (as openai/whisper with word timestamps, which also moves back to an
        # earlier word end: here that re-decoded the last word of live passes). Timestamp
        # tokens can lag far behind the words (base int8 on the real call, on a VNNI CPU:
        # 30 s of speech stamped 0-24 s), and a seek on them decodes the window's last
        # sentences a second time.
        if last_word_end is not None and not _single_ending(result.tokens, tk.timestamp_begin):
            after_words = round(last_word_end / FRAME_SECONDS)
            advance_frames = max(advance_frames, min(after_words, segment_frames))
        self.all_tokens += [t for s in segments for t in s.tokens]
        if not self.conditioned or result.temperature > 0.5:
            self.prompt_reset = len(self.all_tokens)
        for s in segments:
            add_spoken(self.spoken, s.language, s.end - s.start)
        if not self.forced:
            self.info.language = main_language(self.spoken.items()) or self.info.language
        return _Window(segments, advance_frames)

    def _last_word_end(self, features, segments, logprobs, segment_frames, advance_frames,
                       time_offset) -> float | None:  # fmt: skip
        """Where the window's last word ends (seconds into the window); None when unknown.
        With word timestamps the segments get their words here."""
        model, opt, language = self.model, self.opt, self.language
        if opt.word_timestamps and segments:
            _add_words(model, features, language, opt, segments, logprobs, time_offset,
                       segment_frames)  # fmt: skip
            ends = [w.end - time_offset for seg in segments for w in seg.words]
            return ends[-1] if ends else None
        if segments and advance_frames < segment_frames:
            # The same check without word timestamps: the window's words are aligned (one
            # decoder run over its tokens), not kept.
            return _last_word_end(model, features, language, opt, segments, logprobs,
                                  segment_frames)  # fmt: skip
        return None


class _Window(NamedTuple):
    segments: list[Segment]
    advance_frames: int


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
