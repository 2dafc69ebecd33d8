"""Decode one 30 s window, faithful to openai/whisper's ``decoding.py``.

Each rule on the logits is a small :class:`LogitFilter`; greedy (with temperature sampling)
and beam search share them. A window also yields the no-speech probability (softmax at the
start-of-transcript position) and the detected language for multilingual models.
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import onnxruntime as ort

from ..errors import Cancelled, DeskScribeError
from .model import AudioFeatures, WhisperModel
from .runtime import CPU, engine_errors, session_options
from .tokenizer import WhisperTokenizer


class DecodingError(DeskScribeError):
    pass


class TranscriptionCancelled(Cancelled):
    pass


def _check(cancel: threading.Event | None) -> None:
    if cancel is not None and cancel.is_set():
        raise TranscriptionCancelled("transcription cancelled")


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
    prefix: list[int] | None = None  # text the window's transcript starts with (forced)
    stop_at: list[int] | None = None  # greedy only: a window stops once its text ends so
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
    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        """Set forbidden entries of ``logits [B, V]`` to -inf, in place; ``tokens [B, n]`` are
        the sequences so far (all of one length; a list of equal-length lists works too)."""
        raise NotImplementedError


class SuppressBlank(LogitFilter):
    """No blank or end-of-text as the first sampled token."""

    def __init__(self, tokenizer: WhisperTokenizer, sample_begin: int) -> None:
        self.ids = [*tokenizer.encode(" "), tokenizer.eot]
        self.sample_begin = sample_begin

    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        if len(tokens[0]) == self.sample_begin:
            logits[:, self.ids] = -np.inf


class SuppressTokens(LogitFilter):
    def __init__(self, ids: list[int]) -> None:
        self.ids = np.asarray(list(ids), dtype=np.int64)

    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        logits[:, self.ids] = -np.inf


class ApplyTimestampRules(LogitFilter):
    """Timestamps come in pairs, never go backwards, and the window starts with one.

    Vectorised over the rows: no Python work per row or per token of a row.
    """

    def __init__(
        self, tokenizer: WhisperTokenizer, sample_begin: int, max_initial_index: int | None
    ) -> None:
        self.tk = tokenizer
        self.sample_begin = sample_begin
        self.max_initial_index = max_initial_index

    def apply(self, logits: np.ndarray, tokens: np.ndarray) -> None:
        begin, eot = self.tk.timestamp_begin, self.tk.eot
        logits[:, self.tk.no_timestamps] = -np.inf
        sampled = np.asarray(tokens, dtype=np.int64).reshape(logits.shape[0], -1)
        sampled = sampled[:, self.sample_begin :]
        n = sampled.shape[1]
        if n == 0:
            logits[:, :begin] = -np.inf
            if self.max_initial_index is not None:
                logits[:, begin + self.max_initial_index + 1 :] = -np.inf
        else:
            is_ts = sampled >= begin
            last_ts = is_ts[:, -1]
            penultimate_ts = is_ts[:, -2] if n >= 2 else np.ones_like(last_ts)
            logits[last_ts & penultimate_ts, begin:] = -np.inf
            logits[last_ts & ~penultimate_ts, :eot] = -np.inf
            # Timestamps never decrease: the last one is the largest so far.
            last_stamp = np.where(is_ts, sampled, -1).max(axis=1)
            floor = np.where(last_ts & ~penultimate_ts, last_stamp, last_stamp + 1) - begin
            floor[last_stamp < 0] = 0
            if floor.any():
                cols = np.arange(logits.shape[1] - begin)
                logits[:, begin:][cols[None, :] < floor[:, None]] = -np.inf
        # When the timestamps together are likelier than any single text token, sample a
        # timestamp (compared on logits: the softmax normaliser cancels out).
        ts = logits[:, begin:].astype(np.float64)
        peak = ts.max(axis=1)
        with np.errstate(invalid="ignore", over="ignore"):
            ts_total = peak + np.log(np.exp(ts - peak[:, None]).sum(axis=1))
        ts_total = np.where(np.isfinite(peak), ts_total, -np.inf)
        text_max = logits[:, :begin].max(axis=1)
        logits[ts_total > text_max, :begin] = -np.inf


def looping_rows(sampled: np.ndarray, max_period: int = 24) -> np.ndarray:
    """Per row of ``sampled [R, n]``: True when its tail is one n-gram repeated many times
    (a hallucination loop)."""
    rows, n = sampled.shape
    out = np.zeros(rows, dtype=bool)
    if n < 2:
        return out
    # A tail repeating with period p has its last token equal to the one p back; only the
    # periods where some row has that are checked in full (called at every decoding step:
    # 62-70 -> 5-9 µs on rows of 100 tokens).
    reach = min(max_period, n - 1)
    back = sampled[:, -1 - reach : -1][:, ::-1]  # back[:, p - 1] is the token p before the last
    periods = np.flatnonzero((back == sampled[:, -1:]).any(axis=0)) + 1
    for period in periods.tolist():
        repeats = 12 if period == 1 else (6 if period < 4 else 4)
        span = period * repeats
        if n < span:
            break
        tail = sampled[:, -span:]
        out |= (tail[:, period:] == tail[:, :-period]).all(axis=1)
    return out


def _looping(seq: list[int], max_period: int = 24) -> bool:
    """True when the tail is one n-gram repeated many times (a hallucination loop)."""
    return bool(looping_rows(np.asarray([seq], dtype=np.int64).reshape(1, -1), max_period)[0])


def _logsumexp(logits: np.ndarray) -> np.ndarray:
    """Row-wise log-sum-exp of ``logits [R, V]`` in float32 (rows all -inf give -inf)."""
    peak = logits.max(axis=1)
    safe = np.where(np.isfinite(peak), peak, 0.0).astype(np.float32)
    with np.errstate(divide="ignore"):
        return safe + np.log(np.exp(logits - safe[:, None]).sum(axis=1))


@lru_cache(maxsize=4)
def _top_session(threads: int) -> ort.InferenceSession:
    """LogSoftmax and TopK per row, in ONNX Runtime: numpy's argpartition slows down ten
    times on rows that are mostly -inf (as the timestamp rules make them), and ORT's
    LogSoftmax (one vectorised pass) beat both its ReduceLogSumExp and max / exp / sum / log
    spelled out as operators (5 rows of 51,864: 0.30 against 0.40 ms; 20 rows: 1.20 against
    1.63 ms, one thread)."""
    from ..graph_cache import cached

    # The app's CPU options: a session left spinning after its run took the cores from the
    # decoder's next step.
    opts = session_options(CPU, threads)
    return cached(
        "top-candidates",
        _top_graph,
        lambda blobs: ort.InferenceSession(blobs[0], opts, providers=["CPUExecutionProvider"]),
    )


def _top_graph() -> list[bytes]:
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("LogSoftmax", ["logits"], ["all_logprobs"], axis=1),
        helper.make_node("TopK", ["all_logprobs", "k"], ["logprobs", "indices"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "top_candidates",
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["rows", "vocab"]),
            helper.make_tensor_value_info("k", TensorProto.INT64, [1]),
        ],
        [
            helper.make_tensor_value_info("indices", TensorProto.INT64, ["rows", "k"]),
            helper.make_tensor_value_info("logprobs", TensorProto.FLOAT, ["rows", "k"]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return [model.SerializeToString()]


def top_candidates(logits: np.ndarray, k: int, threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best tokens of each row of ``logits [R, V]`` and their log-probabilities."""
    with engine_errors():
        indices, logprobs = _top_session(threads).run(
            None, {"logits": logits, "k": np.array([k], dtype=np.int64)}
        )
    return indices, logprobs


# --------------------------------------------------------------------------- decoding


def check_task(tokenizer: WhisperTokenizer, task: str) -> None:
    """Refuse translation with an English-only model, which has no translate token to use."""
    if task == "translate" and not tokenizer.multilingual:
        raise DecodingError(
            "this model is English-only and cannot translate; pick a multilingual model"
        )


@dataclass
class _Search:
    """What a search hands back per window: tokens, their logprobs, the summed logprob
    (end-of-text included) and whether it stopped on a repetition loop."""

    tokens: list[int]
    logprobs: list[float]
    total: float
    looped: bool = False


class WindowDecoder:
    """Decodes 30 s windows: one (``decode``) or a batch of them at once (``decode_batch``),
    greedy or with beam search, all windows sharing one prompt and language."""

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
        if self.opt.prefix:
            seq += self.opt.prefix
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
        """The most probable language of the first window of ``audio``, and every language's
        probability."""
        probs = self.language_probs(audio)[0]
        return max(probs, key=lambda c: probs[c]), probs

    def language_probs(self, audio: AudioFeatures) -> list[dict[str, float]]:
        """Each window's language probabilities (one decoder step for the whole batch, or for
        each window where a batch's rows share their int8 scales)."""
        if not self.tk.multilingual:
            return [{"en": 1.0}] * audio.batch
        if audio.batch > 1 and self.model.batches_share_scales:
            return [
                p for i in range(audio.batch) for p in self.language_probs(audio.rows(i, i + 1))
            ]
        state = self.model.start(audio, audio.batch)
        logits, _ = state.step(np.array([[self.tk.sot]] * audio.batch))
        codes = list(self.tk.language_ids)
        ids = [self.tk.language_ids[c] for c in codes]
        out = []
        for row in logits:
            probs = np.exp(log_softmax(row[ids]))
            out.append(dict(zip(codes, probs.tolist(), strict=True)))
        return out

    def decode(self, audio: AudioFeatures, language: str | None) -> DecodingResult:
        """Decode one window (``audio`` has batch 1)."""
        return self.decode_batch(audio, language)[0]

    def decode_batch(
        self, audio: AudioFeatures, language: str | None, cancel: threading.Event | None = None
    ) -> list[DecodingResult]:
        """Decode the ``audio.batch`` windows of ``audio`` together (one at a time where a
        batch's rows share their int8 scales: ``WhisperModel.batches_share_scales``); one
        result per window. ``cancel`` is checked before every decoder step
        (TranscriptionCancelled)."""
        n_audio = audio.batch
        if n_audio > 1 and self.model.batches_share_scales:
            # each window as alone: its own decoder, so a temperature fallback samples as alone
            alone = [WindowDecoder(self.model, self.opt) for _ in range(n_audio)]
            one = [
                d.decode_batch(audio.rows(i, i + 1), language, cancel) for i, d in enumerate(alone)
            ]
            return [r for results in one for r in results]
        initial, sot_index = self.initial_tokens(language)
        filters = self.filters(len(initial))
        n_beams = self.opt.beam_size if self.opt.beam_size and self.opt.temperature == 0 else 1
        # The prompt is fed once per window; beam search fans the cache out to its beams on
        # the first step through cache_index, so identical copies are never computed.
        state = self.model.start(audio, n_audio)
        head = np.array([initial[: sot_index + 1]] * n_audio)
        logits, _ = state.step(head)
        # No-speech probability: the softmax at <|startoftranscript|>.
        head_lps = logits[:, self.tk.no_speech].astype(np.float64) - _logsumexp(
            logits.astype(np.float64)
        )
        no_speech = np.exp(head_lps)
        rest = initial[sot_index + 1 :]
        if rest:
            logits, _ = state.step(np.array([rest] * n_audio))
        if n_beams > 1:
            search = _BeamSearch(self, state, initial, filters, n_beams)
            found = search.run(logits, n_audio, cancel)
        else:
            found = self._greedy(state, logits, initial, filters, n_audio, cancel)
        results = []
        for k, f in enumerate(found):
            text = self.tk.decode([t for t in f.tokens if t < self.tk.eot])
            results.append(
                DecodingResult(
                    tokens=f.tokens,
                    token_logprobs=f.logprobs,
                    text=text,
                    avg_logprob=f.total / (len(f.tokens) + 1),
                    no_speech_prob=float(no_speech[k]),
                    temperature=self.opt.temperature,
                    compression_ratio=compression_ratio(text),
                    language=language,
                    looped=f.looped,
                )
            )
        return results

    def _pick(self, logits: np.ndarray) -> np.ndarray:
        """Next token per row of ``logits [R, V]``: argmax, or sampled at the temperature."""
        if self.opt.temperature == 0:
            return logits.argmax(axis=1)
        picks = []
        for row in logits:
            probs = np.exp(log_softmax(row.astype(np.float64) / self.opt.temperature))
            picks.append(int(self.rng.choice(len(probs), p=probs / probs.sum())))
        return np.array(picks, dtype=np.int64)

    def _greedy(
        self,
        state,
        logits: np.ndarray,
        initial: list[int],
        filters,
        n_audio: int,
        cancel: threading.Event | None = None,
    ) -> list[_Search]:
        """Greedy (or sampled) decoding of ``n_audio`` windows; finished windows leave the
        batch (their rows and audio are dropped) where the audio is in host memory."""
        eot, stop = self.tk.eot, self.opt.stop_at
        seq = np.array([initial] * n_audio, dtype=np.int64)  # rows of the current batch
        rows = np.arange(n_audio)  # window of each row
        out = [_Search([], [], 0.0) for _ in range(n_audio)]
        for _ in range(self.sample_len):
            _check(cancel)
            logits = np.asarray(logits, dtype=np.float32)  # a fresh array: filtered in place
            for f in filters:
                f.apply(logits, seq)
            tokens = self._pick(logits)
            lps = logits[np.arange(len(rows)), tokens] - _logsumexp(logits)
            live = []
            for r, w in enumerate(rows):
                if w < 0:
                    continue  # a finished window still in the batch (audio on a device)
                out[w].total += float(lps[r])
                if tokens[r] == eot:
                    rows[r] = -1
                    continue
                out[w].tokens.append(int(tokens[r]))
                out[w].logprobs.append(float(lps[r]))
                if stop and out[w].tokens[-len(stop) :] == stop:
                    rows[r] = -1
                    continue
                live.append(r)
            seq = np.concatenate([seq, tokens[:, None]], axis=1)
            looped = looping_rows(seq[:, len(initial) :]) & (rows >= 0)
            for r in np.flatnonzero(looped):
                out[rows[r]].looped = True
                rows[r] = -1
                live.remove(r)
            if not live or seq.shape[1] >= self.n_ctx:
                break
            keep = np.array(live)
            if len(live) < len(rows) and state.select_audio(keep):
                seq, rows, tokens = seq[keep], rows[keep], tokens[keep]
                logits, _ = state.step(tokens[:, None], keep)
            else:
                tokens = np.where(rows >= 0, tokens, eot)
                logits, _ = state.step(tokens[:, None])
        return out


class _BeamSearch:
    """Beam search over a batch of windows, as openai/whisper's ``BeamSearchDecoder``.

    Rows are grouped by window (one row per window on the first step, ``n_beams`` after);
    per step, the candidates are the ``n_beams + 1`` best tokens of every row of a window.
    Windows that are done leave the batch where their audio is in host memory.
    """

    def __init__(self, decoder: WindowDecoder, state, initial, filters, n_beams: int) -> None:
        self.d = decoder
        self.state = state
        self.n_init = len(initial)
        self.initial = initial
        self.filters = filters
        self.k = n_beams
        self.max_candidates = max(1, round(n_beams * decoder.opt.patience))

    def run(
        self, logits: np.ndarray, n_audio: int, cancel: threading.Event | None = None
    ) -> list[_Search]:
        k, eot, n_init = self.k, self.d.tk.eot, self.n_init
        seq = np.array([self.initial] * n_audio, dtype=np.int64)
        scores = np.zeros(n_audio)
        token_lps: list[list[float]] = [[] for _ in range(n_audio)]
        windows = list(range(n_audio))  # window in each audio slot of the state (-1: done)
        finished: list[list[tuple[list[int], float, list[float]]]] = [[] for _ in range(n_audio)]
        results: list[_Search | None] = [None] * n_audio
        group = 1  # rows per window in the current batch
        for _ in range(self.d.sample_len):
            _check(cancel)
            logits = np.asarray(logits, dtype=np.float32)  # a fresh array: filtered in place
            for f in self.filters:
                f.apply(logits, seq)
            top, cand_lp = top_candidates(logits, k + 1, self.d.model.runtime.threads)
            cand_score = scores[:, None] + cand_lp
            origin, new_tokens, new_scores, new_lps = [], [], [], []
            for j, w in enumerate(windows):
                lo = j * group
                if w < 0:  # done, but its rows stay (the audio is on a device)
                    origin += [lo] * k
                    new_tokens += [eot] * k
                    new_scores += [-np.inf] * k
                    new_lps += [0.0] * k
                    continue
                picked = self._update(
                    w, lo, group, seq, scores, token_lps, top, cand_lp, cand_score, finished
                )
                if picked is None:  # the window is done: its best beams made up the numbers
                    results[w] = self._best(
                        w, finished[w], seq[lo : lo + group], scores, lo, token_lps
                    )
                    windows[j] = -1
                    origin += [lo] * k
                    new_tokens += [eot] * k
                    new_scores += [-np.inf] * k
                    new_lps += [0.0] * k
                    continue
                for r, t, sc, lp in picked:
                    origin.append(r)
                    new_tokens.append(t)
                    new_scores.append(sc)
                    new_lps.append(lp)
            origin_a = np.array(origin, dtype=np.int64)
            seq = np.concatenate([seq[origin_a], np.array(new_tokens)[:, None]], axis=1)
            scores = np.array(new_scores)
            token_lps = [
                [*token_lps[r], lp] if sc > -np.inf else []
                for r, lp, sc in zip(origin, new_lps, new_scores, strict=True)
            ]
            group = k
            # A loop in a window's best beam ends that window (openai/whisper's guard).
            best_rows = np.arange(0, len(windows) * k, k)
            looped = looping_rows(seq[best_rows, n_init:])
            for j in np.flatnonzero(looped):
                w = windows[j]
                if w >= 0:
                    r = j * k
                    results[w] = _Search(seq[r, n_init:].tolist(), token_lps[r], scores[r], True)
                    windows[j] = -1
            live = [j for j, w in enumerate(windows) if w >= 0]
            if not live:
                break
            rows = np.array([j * k + b for j in live for b in range(k)], dtype=np.int64)
            if len(live) < len(windows) and self.state.select_audio(np.array(live)):
                windows = [windows[j] for j in live]
                seq, scores = seq[rows], scores[rows]
                token_lps = [token_lps[r] for r in rows]
                logits, _ = self.state.step(seq[:, -1:], origin_a[rows])
            else:
                logits, _ = self.state.step(seq[:, -1:], origin_a)
        for j, w in enumerate(windows):  # out of steps: rank what there is
            if w >= 0:
                lo = j * group
                results[w] = self._best(w, finished[w], seq[lo : lo + group], scores, lo, token_lps)
        return [r if r is not None else _Search([], [], 0.0) for r in results]

    def _update(self, w, lo, group, seq, scores, token_lps, top, cand_lp, cand_score, finished):
        """The window's next beams [(row, token, score, logprob)], or None when it is done."""
        k, eot = self.k, self.d.tk.eot
        sc = cand_score[lo : lo + group].ravel()
        order = np.argsort(-sc, kind="stable")
        picked = []
        for idx in order:
            if not np.isfinite(sc[idx]):
                break
            r, c = lo + idx // (k + 1), idx % (k + 1)
            t = int(top[r, c])
            if t == eot:
                if len(finished[w]) < self.max_candidates:
                    finished[w].append(
                        (seq[r, self.n_init :].tolist(), float(sc[idx]), token_lps[r])
                    )
                continue
            picked.append((r, t, float(sc[idx]), float(cand_lp[r, c])))
            if len(picked) == k:
                break
        if (
            len(finished[w]) >= self.max_candidates
            or not picked
            or seq.shape[1] + 1 >= self.d.n_ctx
        ):
            return None
        while len(picked) < k:  # too few finite candidates: pad with a beam that never wins
            r, t, _, lp = picked[-1]
            picked.append((r, t, -np.inf, lp))
        return picked

    def _best(self, w, finished, beams, scores, lo, token_lps) -> _Search:
        """Rank a window's finished sequences (unfinished beams make up the numbers, best
        first) by summed log-probability over length, as openai/whisper does."""
        found = list(finished)
        order = np.argsort(-scores[lo : lo + len(beams)], kind="stable")
        for b in order:
            if len(found) >= self.k:
                break
            if np.isfinite(scores[lo + b]):
                found.append(
                    (beams[b, self.n_init :].tolist(), float(scores[lo + b]), token_lps[lo + b])
                )
        if not found:
            return _Search([], [], 0.0)
        penalty_exp = self.d.opt.length_penalty

        def rank(item: tuple[list[int], float, list[float]]) -> float:
            tokens, score, _ = item
            length = max(1, len(tokens))
            penalty = length if penalty_exp is None else ((5 + length) / 6) ** penalty_exp
            return score / penalty

        tokens, score, lps = max(found, key=rank)
        return _Search(tokens, lps, score, False)
