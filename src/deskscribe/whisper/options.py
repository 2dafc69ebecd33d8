"""What a file transcription is asked to do, and the rules both of its paths share.

``transcribe.py`` (the sequential seek loop) and ``batched.py`` (VAD chunks decoded in
batches) take the same :class:`TranscribeOptions`, fill the same :class:`TranscriptionInfo`
and decide silence and temperature fallback the same way; those live here, so that the two
paths import this module and ``transcribe.py`` imports ``batched.py``, never the reverse.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..audio.vad import VadOptions
from ..errors import Progress as Progress  # (seconds done, total seconds or -1), re-exported
from .decoding import DecodingOptions, DecodingResult


@dataclass(frozen=True)
class TranscribeOptions:
    """What a transcription is asked to do: plain values, frozen (a copy with changes is
    ``dataclasses.replace``). A live handle (batches shared with other transcriptions) is
    passed apart, as ``shared=``."""

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
    # A window shorter than 30 s is encoded with only its own audio plus this many seconds of
    # silence (rounded up to whole seconds, at least 10 s), not padded to 30 s: the encoder's
    # cost falls with the length (whisper.cpp's ``audio_ctx``). For live passes; None: always
    # 30 s, as Whisper was trained.
    context_pad_seconds: float | None = None
    # The batched path (batched.py): VAD speech packed into 30 s chunks, decoded
    # ``batch_size`` at a time (0: chosen for the device). Chunks are independent, so
    # previous-text conditioning does not apply there; ``initial_prompt`` does. When the
    # options ask for what batching cannot do, the sequential seek path runs instead.
    batched: bool = False
    batch_size: int = 0
    vad: VadOptions | None = None  # None: batched.default_vad_options()
    # As faster-whisper's: at most this many tokens per window (None: half the text context),
    # and the token ids never sampled (None: the non-speech symbols and the special tokens;
    # a list replaces that set). Benches suppress end-of-text to decode a fixed length.
    max_new_tokens: int | None = None
    suppress_tokens: tuple[int, ...] | None = None


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


def forced_language(tk, opt: TranscribeOptions) -> str | None:
    """The one language for the whole input (given, the only one allowed, or English for an
    English-only model); None: detected per part."""
    if not tk.multilingual:
        return "en"
    if opt.language:
        return opt.language
    return opt.languages[0] if len(opt.languages) == 1 else None


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
        sample_len=opt.max_new_tokens,
        suppress_tokens=None if opt.suppress_tokens is None else list(opt.suppress_tokens),
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
