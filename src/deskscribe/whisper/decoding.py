"""Decode one 30 s window, faithful to openai/whisper's ``decoding.py``.

Each rule on the logits is a small :class:`LogitFilter`; greedy (with temperature sampling)
and beam search share them. A window also yields the no-speech probability (softmax at the
start-of-transcript position) and the detected language for multilingual models.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from .model import AudioFeatures, WhisperModel
from .tokenizer import WhisperTokenizer


class DecodingError(Exception):
    pass


@dataclass
class DecodingOptions:
    task: str = "transcribe"
    language: str | None = None
    temperature: float = 0.0
    sample_len: int | None = None
    beam_size: int | None = None
    patience: float = 1.0
    length_penalty: float | None = None
    prompt: list[int] | None = None
    suppress_blank: bool = True
    suppress_tokens: list[int] | None = None  # None: the non-speech symbols + specials
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    seed: int = 0


@dataclass
class DecodingResult:
    tokens: list[int]
    token_logprobs: list[float] = field(default_factory=list)
    text: str = ""
    avg_logprob: float = float("nan")
    no_speech_prob: float = float("nan")
    temperature: float = 0.0
    compression_ratio: float = float("nan")
    language: str | None = None
    looped: bool = False


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    shifted = x - m
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


# --------------------------------------------------------------------------- logit filters


class LogitFilter:
    def apply(self, logits: np.ndarray, tokens: list[list[int]]) -> None:
        """Set forbidden entries of ``logits [B, V]`` to -inf, in place."""
        raise NotImplementedError


class SuppressBlank(LogitFilter):
    """No blank or end-of-text as the first sampled token."""

    def __init__(self, tokenizer: WhisperTokenizer, sample_begin: int) -> None:
        self.ids = [*tokenizer.encode(" "), tokenizer.eot]
        self.sample_begin = sample_begin

    def apply(self, logits: np.ndarray, tokens: list[list[int]]) -> None:
        if len(tokens[0]) == self.sample_begin:
            logits[:, self.ids] = -np.inf


class SuppressTokens(LogitFilter):
    def __init__(self, ids: list[int]) -> None:
        self.ids = list(ids)

    def apply(self, logits: np.ndarray, tokens: list[list[int]]) -> None:
        logits[:, self.ids] = -np.inf


class ApplyTimestampRules(LogitFilter):
    """Timestamps come in pairs, never go backwards, and the window starts with one."""

    def __init__(
        self, tokenizer: WhisperTokenizer, sample_begin: int, max_initial_index: int | None
    ) -> None:
        self.tk = tokenizer
        self.sample_begin = sample_begin
        self.max_initial_index = max_initial_index

    def apply(self, logits: np.ndarray, tokens: list[list[int]]) -> None:
        begin = self.tk.timestamp_begin
        logits[:, self.tk.no_timestamps] = -np.inf
        for k, seq in enumerate(tokens):
            sampled = seq[self.sample_begin :]
            last_ts = len(sampled) >= 1 and sampled[-1] >= begin
            penultimate_ts = len(sampled) < 2 or sampled[-2] >= begin
            if last_ts:
                if penultimate_ts:
                    logits[k, begin:] = -np.inf
                else:
                    logits[k, : self.tk.eot] = -np.inf
            stamps = [t for t in sampled if t >= begin]
            if stamps:
                floor = stamps[-1] if last_ts and not penultimate_ts else stamps[-1] + 1
                logits[k, begin:floor] = -np.inf
        if len(tokens[0]) == self.sample_begin:
            logits[:, :begin] = -np.inf
            if self.max_initial_index is not None:
                logits[:, begin + self.max_initial_index + 1 :] = -np.inf
        logprobs = log_softmax(logits)
        for k in range(logits.shape[0]):
            ts = logprobs[k, begin:]
            ts_total = np.logaddexp.reduce(ts) if np.isfinite(ts).any() else -np.inf
            if ts_total > np.max(logprobs[k, :begin]):
                logits[k, :begin] = -np.inf


def _looping(seq: list[int], max_period: int = 24) -> bool:
    """True when the tail is one n-gram repeated many times (a hallucination loop)."""
    n = len(seq)
    for period in range(1, max_period + 1):
        repeats = 12 if period == 1 else (6 if period < 4 else 4)
        span = period * repeats
        if n < span:
            break
        tail = seq[-span:]
        if all(tail[i] == tail[i % period] for i in range(span)):
            return True
    return False


# --------------------------------------------------------------------------- decoding


def check_task(tokenizer: WhisperTokenizer, task: str) -> None:
    """Refuse translation with an English-only model, which has no translate token to use."""
    if task == "translate" and not tokenizer.multilingual:
        raise DecodingError(
            "this model is English-only and cannot translate; pick a multilingual model"
        )


class WindowDecoder:
    def __init__(self, model: WhisperModel, options: DecodingOptions) -> None:
        self.model = model
        self.tk = model.tokenizer
        self.opt = options
        check_task(self.tk, options.task)
        self.n_ctx = model.dims.n_text_ctx
        self.sample_len = options.sample_len or self.n_ctx // 2
        self.rng = np.random.default_rng(options.seed)

    def initial_tokens(self, language: str | None) -> tuple[list[int], int]:
        """(prompt + start-of-transcript sequence, index of <|startoftranscript|>)."""
        seq: list[int] = []
        if self.opt.prompt:
            seq = [self.tk.sot_prev, *self.opt.prompt[-(self.n_ctx // 2 - 1) :]]
        sot_index = len(seq)
        seq += self.tk.sot_sequence(language, self.opt.task)
        if self.opt.without_timestamps:
            seq.append(self.tk.no_timestamps)
        return seq, sot_index

    def filters(self, sample_begin: int) -> list[LogitFilter]:
        out: list[LogitFilter] = []
        if self.opt.suppress_blank:
            out.append(SuppressBlank(self.tk, sample_begin))
        out.append(SuppressTokens(self.suppress_ids()))
        if not self.opt.without_timestamps:
            max_index = None
            if self.opt.max_initial_timestamp:
                max_index = round(self.opt.max_initial_timestamp / 0.02)
            out.append(ApplyTimestampRules(self.tk, sample_begin, max_index))
        return out

    def suppress_ids(self) -> list[int]:
        if self.opt.suppress_tokens is not None:
            return self.opt.suppress_tokens
        tk = self.tk
        ids = [
            *tk.non_speech_tokens,
            tk.transcribe,
            tk.translate,
            tk.sot,
            tk.sot_prev,
            tk.no_speech,
        ]
        if tk.sot_lm is not None:
            ids.append(tk.sot_lm)
        return sorted(set(ids))

    def detect_language(self, audio: AudioFeatures) -> tuple[str, dict[str, float]]:
        if not self.tk.multilingual:
            return "en", {"en": 1.0}
        state = self.model.start(audio, 1)
        logits, _ = state.step(np.array([[self.tk.sot]]))
        codes = list(self.tk.language_ids)
        ids = [self.tk.language_ids[c] for c in codes]
        probs = np.exp(log_softmax(logits[0, ids]))
        best = codes[int(np.argmax(probs))]
        return best, dict(zip(codes, probs.tolist(), strict=True))

    def decode(self, audio: AudioFeatures, language: str | None) -> DecodingResult:
        """Decode one window (``audio`` has batch 1)."""
        initial, sot_index = self.initial_tokens(language)
        sample_begin = len(initial)
        filters = self.filters(sample_begin)
        n_beams = self.opt.beam_size if self.opt.beam_size and self.opt.temperature == 0 else 1
        # The prompt is fed once (batch 1); beam search fans the cache out to its beams on the
        # first step through cache_index, so identical copies are never computed.
        state = self.model.start(audio, 1)

        # Feed everything up to <|startoftranscript|> first: its logits give no-speech.
        head = np.array([initial[: sot_index + 1]])
        logits, _ = state.step(head)
        no_speech_prob = float(np.exp(log_softmax(logits[0].astype(np.float64))[self.tk.no_speech]))
        rest = initial[sot_index + 1 :]
        if rest:
            logits, _ = state.step(np.array([rest]))

        if n_beams > 1:
            tokens, logprobs, total, looped = self._beam_search(
                state, logits, initial, filters, n_beams
            )
        else:
            tokens, logprobs, total, looped = self._greedy(state, logits, initial, filters)

        text = self.tk.decode([t for t in tokens if t < self.tk.eot])
        avg = total / (len(tokens) + 1)
        return DecodingResult(
            tokens=tokens,
            token_logprobs=logprobs,
            text=text,
            avg_logprob=avg,
            no_speech_prob=no_speech_prob,
            temperature=self.opt.temperature,
            compression_ratio=compression_ratio(text),
            language=language,
            looped=looped,
        )

    def _pick(self, logits: np.ndarray) -> int:
        if self.opt.temperature == 0:
            return int(np.argmax(logits))
        probs = np.exp(log_softmax(logits.astype(np.float64) / self.opt.temperature))
        return int(self.rng.choice(len(probs), p=probs / probs.sum()))

    def _greedy(
        self, state, logits, initial, filters
    ) -> tuple[list[int], list[float], float, bool]:
        """Returns (tokens, their logprobs, sum of logprobs incl. end-of-text, looped)."""
        seq = list(initial)
        out: list[int] = []
        logprobs: list[float] = []
        total = 0.0
        for _ in range(self.sample_len):
            logits = logits.astype(np.float32, copy=True)
            for f in filters:
                f.apply(logits, [seq])
            token = self._pick(logits[0])
            lp = float(log_softmax(logits[0].astype(np.float64))[token])
            total += lp
            if token == self.tk.eot:
                break
            out.append(token)
            logprobs.append(lp)
            seq.append(token)
            if _looping(out):
                return out, logprobs, total, True
            if len(seq) >= self.n_ctx:
                break
            logits, _ = state.step(np.array([[token]]))
        return out, logprobs, total, False

    def _beam_search(
        self, state, logits, initial, filters, n_beams
    ) -> tuple[list[int], list[float], float, bool]:
        beams: list[list[int]] = [list(initial) for _ in range(n_beams)]
        scores = [0.0] * n_beams
        token_lps: list[list[float]] = [[] for _ in range(n_beams)]
        finished: list[tuple[list[int], float, list[float]]] = []
        max_candidates = max(1, round(n_beams * self.opt.patience))
        for _ in range(self.sample_len):
            logits = logits.astype(np.float32, copy=True)
            for f in filters:
                f.apply(logits, beams[: logits.shape[0]])
            lps = log_softmax(logits.astype(np.float64))
            candidates = []
            rows = logits.shape[0]  # 1 at the first step, where all beams are still the prompt
            for b in range(rows):
                top = np.argpartition(-lps[b], n_beams)[: n_beams + 1]
                for t in top:
                    if np.isfinite(lps[b, t]):
                        candidates.append(
                            (scores[b] + float(lps[b, t]), b, int(t), float(lps[b, t]))
                        )
            candidates.sort(key=lambda c: -c[0])
            next_beams, next_scores, next_lps, origin = [], [], [], []
            for score, b, t, lp in candidates:
                if t == self.tk.eot:
                    if len(finished) < max_candidates:
                        finished.append((beams[b][len(initial) :], score, token_lps[b]))
                    continue
                next_beams.append([*beams[b], t])
                next_scores.append(score)
                next_lps.append([*token_lps[b], lp])
                origin.append(b)
                if len(next_beams) == n_beams:
                    break
            if (
                len(finished) >= max_candidates
                or not next_beams
                or len(next_beams[0]) >= self.n_ctx
            ):
                break
            beams, scores, token_lps = next_beams, next_scores, next_lps
            if any(_looping(b_[len(initial) :]) for b_ in beams[:1]):
                return beams[0][len(initial) :], token_lps[0], scores[0], True
            logits, _ = state.step(np.array([[b_[-1]] for b_ in beams]), np.array(origin))
        # Like openai/whisper: unfinished beams make up the numbers, best first, and sequences
        # are ranked by summed log-probability over their length (end-of-text not counted).
        for b_, sc, lp in sorted(zip(beams, scores, token_lps, strict=True), key=lambda x: -x[1]):
            if len(finished) >= n_beams:
                break
            finished.append((b_[len(initial) :], sc, lp))

        def rank(item: tuple[list[int], float, list[float]]) -> float:
            tokens, score, _ = item
            length = max(1, len(tokens))
            penalty = (
                length
                if self.opt.length_penalty is None
                else ((5 + length) / 6) ** self.opt.length_penalty
            )
            return score / penalty

        best = max(finished, key=rank)
        return best[0], best[2], best[1], False
