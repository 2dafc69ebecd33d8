"""Batched file transcription: speech regions packed into 30 s chunks, decoded many at once.

Silero VAD finds the speech; consecutive regions are packed (silence between them dropped)
into chunks of at most 30 s; chunks are encoded and decoded in batches (greedy or beam, one
decoder run per step for the whole batch); each chunk's segment and word times are mapped
back to the file. Chunks are independent (no previous-text conditioning), which is what
makes batching possible; the sequential seek loop in ``transcribe.py`` stays the path for
conditioning. The audio is streamed: only the speech not yet transcribed (at most about
one batch of chunks, plus the longest pause-free stretch of speech) is kept in memory, so
memory does not grow with the length of the file.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import threading
from collections.abc import Iterable, Iterator

import numpy as np

from ..errors import EngineError
from ..transcript import Segment, Word
from .alignment import WordTiming, find_alignment
from .chunking import Chunk, speech_chunks
from .decoding import (
    DecodingOptions,
    DecodingResult,
    TranscriptionCancelled,
    WindowDecoder,
    compression_ratio,
)
from .features import FRAME_SECONDS, N_SAMPLES, SAMPLE_RATE
from .language_runs import SURE, encode_windows, language_runs
from .languages import add_spoken, choose, main_language, settle
from .model import AudioFeatures, WhisperModel
from .options import (
    Progress,
    TranscribeOptions,
    TranscriptionInfo,
    decoding_options,
    forced_language,
    is_silence,
    needs_fallback,
)
from .prompt import plan_prompt

CPU_BATCH = 8  # chunks per batch on the CPU (split between the lanes)


# --------------------------------------------------------------------------- decoding


def encode_chunks(model: WhisperModel, chunks: list[Chunk]) -> AudioFeatures:
    """Encoder output for a batch of chunks."""
    return encode_windows(model, [c.audio for c in chunks])


def row(features: AudioFeatures, i: int) -> AudioFeatures:
    """Window ``i`` of a batch of encoder output (a view in host memory)."""
    return features.rows(i, i + 1)


def select(features: AudioFeatures, rows: list[int]) -> AudioFeatures:
    """The windows ``rows`` of a batch of encoder output (brought to host memory)."""
    host = features.to_host()
    idx = np.asarray(rows, dtype=np.int64)
    return AudioFeatures(
        [np.take(k, idx, axis=0) for k in host.cross_k],
        [np.take(v, idx, axis=0) for v in host.cross_v],
        len(rows),
    )


def decode_chunks(
    model: WhisperModel,
    features: AudioFeatures,
    language: str | None,
    options: TranscribeOptions,
    prompt: list[int],
    cancel: threading.Event | None = None,
    shared=None,
) -> list[DecodingResult]:
    """Decode a batch; windows that need it are retried together at the next temperature.
    With ``shared`` (a ``shared_batches.Member``), the batch may be decoded together with
    other transcriptions' (the team server); each caller still gets only its own windows'
    results."""
    if shared is not None:
        key = (
            language,
            tuple(prompt),
            repr(decoding_options(options, language, 0.0, prompt, True)),
            options.temperatures,
            options.silence_rms,
            options.compression_ratio_threshold,
            options.logprob_threshold,
            options.no_speech_threshold,
        )

        def alone(m, audio, halt):
            return _decode_chunks(m, audio, language, options, prompt, halt)

        return shared.decode(model, features, key, cancel, alone)
    return _decode_chunks(model, features, language, options, prompt, cancel)


def _decode_chunks(model, features, language, options, prompt, cancel) -> list[DecodingResult]:
    results: list[DecodingResult] = []
    todo = list(range(features.batch))
    for n, temperature in enumerate(options.temperatures):
        # without timestamps: see chunk_segments
        dopt = decoding_options(options, language, temperature, prompt, True)
        audio = features if n == 0 else select(features, todo)
        decoded = WindowDecoder(model, dopt).decode_batch(audio, language, cancel)
        if n == 0:
            results = decoded
        else:
            for i, r in zip(todo, decoded, strict=True):
                results[i] = r
        todo = [i for i in todo if needs_fallback(results[i], options)]
        if not todo:
            break
    return results


# --------------------------------------------------------------------------- the file path


def transcribe_batched(
    model: WhisperModel,
    blocks: Iterable[np.ndarray],
    options: TranscribeOptions,
    *,
    total_seconds: float | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    info: TranscriptionInfo | None = None,
    shared=None,
) -> Iterator[Segment]:
    """Segments of the speech in ``blocks``, in file order, decoded in batches (``shared``:
    see ``decode_chunks``).

    A pipeline: one thread streams the audio through the VAD into chunks; on the CPU one
    lane per thread of the model takes its share of each batch (``batch_size`` chunks in
    all; one chunk at a time for int8 with the language known, see ``lane_group``) and
    encodes, decodes and times it on single-threaded sessions; on a GPU one lane takes
    whole batches. Segments come out chunk by chunk, in order.
    """
    tk = model.tokenizer
    language = forced_language(tk, options)
    if language and info is not None:
        info.language = language
    spoken: dict[str, float] = {}  # seconds of segments per language
    batch_size = options.batch_size or auto_batch_size(model)
    lanes = decoding_lanes(model, batch_size)
    lane_model = model.single_threaded() if lanes > 1 else model
    plan = plan_prompt(tk, model.dims.n_text_ctx, options.vocabulary, options.initial_prompt)
    prompt = plan.prompt(plan.initial)  # the same in every chunk: vocabulary, initial prompt
    group = lane_group(model, batch_size, lanes, language)
    pipe = _Pipeline(lane_model, options, language, prompt, lanes, group, cancel, info, shared)
    total = total_seconds if total_seconds is not None else -1.0
    seg_id, done = 0, 0.0

    def report(seconds: float) -> None:
        nonlocal done
        if seconds > done:  # never backwards
            done = seconds
            if progress is not None:
                progress(min(done, total) if total > 0 else done, total)

    try:
        pipe.start(blocks)
        for chunk, segments in pipe.results(report):
            for seg in segments:
                seg.id = seg_id
                seg_id += 1
                add_spoken(spoken, seg.language, seg.end - seg.start)
            if not language and info is not None:
                info.language = main_language(spoken.items()) or info.language
            yield from segments
            report(chunk.file_end)
    finally:
        pipe.close()
    if progress is not None:
        progress(total if total > 0 else done, total)


class _Halt:
    """``cancel`` or the pipeline shutting down, as one event for the stages to check; and
    the run's shared-batch handle (``decode_chunks``), which travels with it to the lanes."""

    def __init__(self, cancel: threading.Event | None, shared=None) -> None:
        self.cancel = cancel
        self.shared = shared
        self.closing = threading.Event()

    def is_set(self) -> bool:
        return self.closing.is_set() or (self.cancel is not None and self.cancel.is_set())


class _LaneSteps:
    """The lane's view of ``_Halt``: decoding checks it before every step, which is counted
    (progress within a batch: a batch of chunks comes out all at once)."""

    TOKENS_PER_SECOND = 4.0  # a generous estimate of tokens per second of speech

    def __init__(self, halt: _Halt) -> None:
        self.halt = halt
        self.shared = halt.shared
        self.steps = 0
        self.chunks = 0
        self.expected = 1
        self.span = (0.0, 0.0)  # file time from the last chunk out before this batch to its end

    def start(self, chunks: list[Chunk], after: float, one_by_one: bool = False) -> None:
        """A batch of ``chunks`` begins; ``one_by_one``: its windows are decoded one after the
        other (``WhisperModel.batches_share_scales``), not side by side."""
        self.steps = 0
        self.chunks = len(chunks)
        seconds = [c.seconds for c in chunks]
        spoken = sum(seconds) if one_by_one else max(seconds)
        self.expected = max(1, int(self.TOKENS_PER_SECOND * spoken))
        self.span = (after, chunks[-1].file_end)

    def outstanding(self) -> float:
        """Chunks of this lane's batch still to decode (by its steps)."""
        return self.chunks * (1.0 - min(1.0, self.steps / self.expected))

    def estimate(self) -> float:
        """File time up to which this lane's batch is (by its steps) about done."""
        lo, hi = self.span
        return lo + (hi - lo) * 0.9 * min(1.0, self.steps / self.expected)

    def is_set(self) -> bool:
        self.steps += 1
        return self.halt.is_set()


class _Pipeline:
    """VAD thread → queue of chunks → decoding lanes → results in chunk order."""

    def __init__(self, model, options, language, prompt, lanes, group, cancel, info,
                 shared=None) -> None:  # fmt: skip
        self.model = model
        self.options = options
        self.language = language
        self.prompt = prompt
        self.lanes = lanes
        self.group = max(1, group)  # chunks a lane decodes together
        self.cancel = cancel
        self.info = info
        self.halt = _Halt(cancel, shared)
        # Bounded: the VAD runs at most one batch ahead of the lanes (memory stays flat).
        self.todo: queue.Queue = queue.Queue(maxsize=lanes * self.group)
        self.done: dict[int, tuple[Chunk, list[Segment]]] = {}
        self.n_chunks: int | None = None  # known once the VAD has been through the audio
        self.n_taken = 0  # chunks the lanes have taken
        self.started: set[int] = set()  # lanes that have taken a batch
        self.taking = threading.Lock()
        self.error: BaseException | None = None
        self.cond = threading.Condition()
        self.threads: list[threading.Thread] = []
        self.lane_steps = [_LaneSteps(self.halt) for _ in range(lanes)]
        self.busy: set[int] = set()  # lanes decoding a batch

    def start(self, blocks: Iterable[np.ndarray]) -> None:
        self.threads = [threading.Thread(target=self._produce, args=(blocks,), name="vad")]
        self.threads += [
            threading.Thread(target=self._work, args=(i,), name=f"lane-{i}")
            for i in range(self.lanes)
        ]
        for t in self.threads:
            t.daemon = True
            t.start()

    def close(self) -> None:
        self.halt.closing.set()
        for t in self.threads:
            t.join()

    def results(self, report=None) -> Iterator[tuple[Chunk, list[Segment]]]:
        """(chunk, its segments) in file order; ``report(seconds)`` is given an estimate of
        the file time done while the next chunk is decoded."""
        index = 0
        while True:
            with self.cond:
                while not self._ready(index):
                    self.cond.wait(timeout=0.1)
                    if report is not None and self.busy:
                        report(min(self.lane_steps[i].estimate() for i in self.busy))
                if self.cancel is not None and self.cancel.is_set():
                    raise TranscriptionCancelled("transcription cancelled")
                if self.error is not None:
                    raise self.error
                if index not in self.done:
                    return  # every chunk is out
                item = self.done.pop(index)
            yield item
            index += 1

    def _ready(self, index: int) -> bool:
        cancelled = self.cancel is not None and self.cancel.is_set()
        finished = self.n_chunks is not None and index >= self.n_chunks
        return index in self.done or self.error is not None or cancelled or finished

    def _fail(self, err: BaseException) -> None:
        with self.cond:
            if self.error is None and not self.halt.closing.is_set():
                self.error = err
            self.halt.closing.set()
            self.cond.notify_all()

    def _put(self, item) -> bool:
        while not self.halt.is_set():
            try:
                self.todo.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self, blocks: Iterable[np.ndarray]) -> None:
        count = 0
        try:
            for chunk in speech_chunks(blocks, self.options.vad, self.halt):
                if not self._put((count, chunk)):
                    return
                count += 1
        except BaseException as err:
            self._fail(err)
        finally:
            with self.cond:
                self.n_chunks = count
                self.cond.notify_all()
            for _ in range(self.lanes):
                self._put(None)

    def _share(self, lane: int, holding: int) -> int:
        """Chunks a lane should take now, holding ``holding`` of them already.

        While the VAD runs: ``group`` (a lane's first batch half a group, so that decoding
        starts sooner: on the bench the VAD hands out a chunk about every 0.1 s, and the
        second lane would wait 1.3 s for its first four). Once it has found every chunk:
        what evens out the work left, counting the chunks still being decoded by the other
        lanes (by their steps), so that the lanes finish together. Taking whole groups, one lane decoded the last group alone while
        the other sat idle: 2.6 s of a 13 s run on the bench recording.
        """
        if self.n_chunks is None:
            return self.group if lane in self.started else -(-self.group // 2)
        left = self.n_chunks - (self.n_taken - holding)
        busy = sum(self.lane_steps[i].outstanding() for i in self.busy if i != lane)
        return max(1, min(self.group, left, round((left + busy) / self.lanes + 0.25)))

    def _take(self, lane: int) -> list[tuple[int, Chunk]] | None:
        """Up to ``group`` chunks (waiting for them while the VAD still runs), or None once
        the input is exhausted. Each lane ends on one of the producer's end markers. One lane
        takes at a time: lanes taking side by side would each hold half a group and wait."""
        taken: list[tuple[int, Chunk]] = []
        with self.taking:
            while not self.halt.is_set():
                with self.cond:
                    if len(taken) >= self._share(lane, len(taken)):
                        break
                try:
                    item = self.todo.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is None:
                    if taken:  # decode these first; end on a marker next time
                        self._put(None)
                    break
                taken.append(item)
                with self.cond:
                    self.n_taken += 1
            with self.cond:
                if taken:
                    self.started.add(lane)
        return taken or None

    def _work(self, lane: int) -> None:
        steps = self.lane_steps[lane]
        try:
            while not self.halt.is_set():
                taken = self._take(lane)
                if not taken:
                    return
                chunks = [c for _, c in taken]
                with self.cond:
                    after = chunks[0].pieces[0][1] / SAMPLE_RATE
                    steps.start(chunks, after, self.model.batches_share_scales)
                    self.busy.add(lane)
                segments, fitted = _decode_fitting(
                    self.model, chunks, self.language, self.options, self.prompt, steps
                )
                if fitted < len(chunks):  # a GPU ran out of memory: smaller batches from now on
                    self.group = fitted
                with self.cond:
                    self.busy.discard(lane)
                    for (i, chunk), segs in zip(taken, segments, strict=True):
                        self.done[i] = (chunk, segs)
                    self.cond.notify_all()
        except BaseException as err:
            self._fail(err)


def _decode_fitting(model, chunks, language, options, prompt, halt):
    """``_lane`` on ``chunks``; on a GPU that runs out of memory, halve the batch and retry
    (down to one chunk; after that the model moves to the CPU itself). Returns ([segments
    of each chunk], the number of chunks to take from now on)."""
    if len(chunks) > 1 and model.sessions.on_gpu:
        try:
            with model.gpu_errors_raise():
                return _lane(model, chunks, language, options, prompt, halt), len(chunks)
        except (EngineError, MemoryError) as err:
            half = max(1, len(chunks) // 2)
            reason = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
            model.runtime.notes.append(
                f"a batch of {len(chunks)} chunks did not fit on the GPU ({reason}); using {half}"
            )
            first, size = _decode_fitting(model, chunks[:half], language, options, prompt, halt)
            rest, size = _decode_fitting(model, chunks[half:], language, options, prompt, halt)
            return first + rest, size
    return _lane(model, chunks, language, options, prompt, halt), len(chunks)


def decoding_lanes(model: WhisperModel, batch_size: int) -> int:
    """Lanes: one per CPU thread the model may use (at most one per chunk of a batch); one
    on a GPU. On the CPU each lane runs its own single-threaded sessions: a decoder step is
    many small operations, which threads of one session share poorly (they wait on each
    other, and on a busy machine for other processes too)."""
    if model.sessions.on_gpu:
        return 1
    threads = model.runtime.threads or os.cpu_count() or 1
    return max(1, min(threads, batch_size))


def lane_group(model: WhisperModel, batch_size: int, lanes: int, language: str | None) -> int:
    """Chunks a lane takes together: its share of the batch; one for int8 weights when the
    language is known. Such a model decodes each chunk on its own anyway
    (``WhisperModel.batches_share_scales``), so more chunks only hold more memory and even
    out the lanes' ends more coarsely; detecting the language, a lane still takes its share,
    since an unsurely detected chunk or one whose neighbour speaks another language is cut
    into language runs. Turbo's shape on 2 cores, the 10-minute bench recording
    (``bench/turbo_ct2.py``): 97 s and 1.48 GiB of peak memory, against 82-84 s and
    2.19-2.24 GiB when a lane's four chunks shared their batch (one thread, a beam-5 step:
    24.8 ms for one chunk, 59.5 ms for four); tiny.en the same."""
    if language and model.batches_share_scales:
        return 1
    return max(1, batch_size // lanes)


UNCOVERED_SECONDS = 1.5  # speech before the first or after the last word that is suspect


def _lane(model, chunks, language, options, prompt, halt):
    """Encode and decode some chunks; returns each chunk's segments in file time.

    With no language given, each chunk is decoded in the language detected on its own
    speech (an unsure chunk takes a sure neighbour's). A chunk that may hold a change of
    language (its detection is not sure, or a neighbour's language differs) is cut at pauses
    into ~6 s spans (``language_runs``), each span's language detected, and each run of one
    language decoded on its own: a meeting that moves from English to German gets both, neither
    translated. Chunks of one language are decoded together.
    """
    features = encode_chunks(model, chunks)
    if language:
        work = [(i, chunk, language, i) for i, chunk in enumerate(chunks)]
    else:
        work = _language_runs(model, chunks, features, options.languages)
    out: list[list[Segment]] = [[] for _ in chunks]
    for lang, whole in dict.fromkeys((w[2], w[3] is not None) for w in work):
        picked = [w for w in work if w[2] == lang and (w[3] is not None) == whole]
        group = [w[1] for w in picked]
        if whole:
            rows_ = [w[3] for w in picked]
            audio = features if rows_ == list(range(len(chunks))) else select(features, rows_)
        else:
            audio = encode_chunks(model, group)
        decoded = _decode_group(model, group, audio, lang, options, prompt, halt)
        for (i, *_), segs in zip(picked, decoded, strict=True):
            for seg in segs:
                seg.language = lang
            out[i] += segs
    for segs in out:
        segs.sort(key=lambda s: s.start)
    return out


def _language_runs(model, chunks, features, allowed):
    """(chunk index, chunk or part of it, language, feature row or None for a part)."""
    detector = WindowDecoder(model, DecodingOptions())
    found = [choose(p, allowed) for p in detector.language_probs(features)]
    languages = settle(found)
    work = []
    for i, chunk in enumerate(chunks):
        near = languages[max(0, i - 1) : i + 2]
        if found[i].probability >= SURE and len(set(near)) == 1:
            work.append((i, chunk, languages[i], i))
            continue
        runs = language_runs(model, chunk.audio, allowed, languages[i])
        if len(runs) == 1:
            work.append((i, chunk, runs[0][2], i))
        else:
            work += [(i, chunk.cut(a, b), lang, None) for a, b, lang in runs]
    return work


def _decode_group(model, chunks, features, language, options, prompt, halt):
    """Decode chunks of one language (``features``: their encoder output, in order).

    Beam search now and then leaves out a chunk's first or last sentence (a shorter text
    can score better; the sequential path's seek picks such a sentence up in the next
    window, nothing would here). A chunk whose words leave more than ``UNCOVERED_SECONDS``
    of speech untimed at its ends gets a second, greedy look (``_second_look``), whose text
    is kept when it times more of the speech. Measured on the bench recording (tiny.en):
    one sentence in ten minutes, 0.9 WER points.
    """
    shared = getattr(halt, "shared", None)
    results = decode_chunks(model, features, language, options, prompt, halt, shared)
    out = []
    for i, (chunk, result) in enumerate(zip(chunks, results, strict=True)):
        if is_silence(result, options):
            out.append([])
        else:
            out.append(chunk_segments(model, chunk, row(features, i), result, language, options))
    if not options.beam_size or options.beam_size < 2:
        return out
    again = []  # chunks untimed at both ends: decoded again greedily, together
    for i, chunk in enumerate(chunks):
        if _uncovered(chunk, out[i]) <= UNCOVERED_SECONDS:
            continue
        head, tail = _untimed_ends(chunk, out[i])
        if head > KEEP_MARGIN and tail > KEEP_MARGIN:
            again.append(i)
            continue
        result = _second_look(
            model, row(features, i), results[i], language, options, prompt, halt, head > tail
        )
        if result is not None:
            segs = chunk_segments(model, chunk, row(features, i), result, language, options)
            _keep_better(chunk, out, i, segs)
    if again:
        greedy = dataclasses.replace(options, beam_size=None)
        audio = select(features, again)
        redone = decode_chunks(model, audio, language, greedy, prompt, halt, shared)
        for j, (i, result) in enumerate(zip(again, redone, strict=True)):
            if not is_silence(result, options):
                segs = chunk_segments(model, chunks[i], row(audio, j), result, language, options)
                _keep_better(chunks[i], out, i, segs)
    return out


KEEP_MARGIN = 0.5  # seconds of speech a second look must time beyond the first to be kept
JOIN_TOKENS = 4  # a greedy start joins the beam text on this many of its first tokens


def _keep_better(chunk: Chunk, out: list[list[Segment]], i: int, segs: list[Segment]) -> None:
    if _uncovered(chunk, segs) < _uncovered(chunk, out[i]) - KEEP_MARGIN:
        out[i] = segs


def _second_look(model, features, result, language, options, prompt, halt, start):
    """Greedy text for the end of one chunk that its beam text ``result`` left untimed, with
    the beam text kept for the rest: the missing sentence costs its own tokens, not the
    chunk's. ``start`` False: the beam text is continued past where it ended (end-of-text
    not allowed as the first new token). ``start`` True: greedy decodes from the chunk's
    start until its text reaches the beam text's first ``JOIN_TOKENS`` tokens, and the beam
    text follows from there (greedy that never reaches them is the whole text, as a plain
    greedy decode). None when nothing sound comes of it: the new tokens' mean log
    probability under ``logprob_threshold``, a loop, or a text that compresses too well."""
    tk = model.tokenizer
    kept = [(t, lp) for t, lp in zip(result.tokens, result.token_logprobs, strict=False)
            if t < tk.eot]  # fmt: skip
    beam = [t for t, _ in kept]
    if not beam or len(beam) >= model.dims.n_text_ctx // 2 - 8:
        return None
    greedy = decoding_options(dataclasses.replace(options, beam_size=None), language, 0.0,
                              prompt, True)  # fmt: skip
    if start:
        stop = beam[:JOIN_TOKENS] if len(beam) > JOIN_TOKENS else None
        dopt = dataclasses.replace(greedy, stop_at=stop)
    else:
        dopt = dataclasses.replace(greedy, prefix=beam)
    more = WindowDecoder(model, dopt).decode_batch(features, language, halt)[0]
    new = [(t, lp) for t, lp in zip(more.tokens, more.token_logprobs, strict=True) if t < tk.eot]
    if more.looped or not new:
        return None
    if start and stop and [t for t, _ in new[-JOIN_TOKENS:]] == stop:
        new = new[:-JOIN_TOKENS]  # joined: the beam text follows
        if not new:
            return None  # greedy starts where the beam text does
        pairs = new + kept
    else:
        pairs = kept + new if not start else new
    threshold = options.logprob_threshold
    if threshold is not None and sum(lp for _, lp in new) / len(new) < threshold:
        return None  # the words found are too unlikely to trust (as the fallback's rule)
    text = tk.decode([t for t, _ in pairs])
    ratio = compression_ratio(text)
    if options.compression_ratio_threshold is not None and (
        ratio > options.compression_ratio_threshold
    ):
        return None
    return dataclasses.replace(
        result,
        tokens=[t for t, _ in pairs],
        token_logprobs=[lp for _, lp in pairs],
        text=text,
        compression_ratio=ratio,
    )


def _untimed_ends(chunk: Chunk, segments: list[Segment]) -> tuple[float, float]:
    """Seconds of the chunk's speech before its first segment, and after its last."""
    if not segments:
        return 0.0, 0.0  # silence, or nothing worth keeping: not a dropped sentence
    start = chunk.pieces[0][1] / SAMPLE_RATE
    return (
        chunk.speech_between(start, segments[0].start),
        chunk.speech_between(segments[-1].end, chunk.file_end),
    )


def _uncovered(chunk: Chunk, segments: list[Segment]) -> float:
    """Seconds of the chunk's speech before its first segment and after its last."""
    return sum(_untimed_ends(chunk, segments))


def chunk_segments(
    model: WhisperModel,
    chunk: Chunk,
    features: AudioFeatures,
    result: DecodingResult,
    language: str | None,
    options: TranscribeOptions,
) -> list[Segment]:
    """The chunk's text cut into segments, in file time.

    Chunks are decoded without timestamp tokens: with them, Whisper tends to stop early
    in a window whose speech runs close to its end (it takes the last sentence for one cut
    off by the window, which the sequential path would pick up in the next window; here
    nothing would). Words are timed from the cross-attention instead (as for word
    timestamps) and the text is cut after each sentence and wherever the speech had a pause
    (a joint between VAD regions).
    """
    tk = model.tokenizer
    text_tokens = [t for t in result.tokens if t < tk.eot]
    if not text_tokens:
        return []
    frames = min(round(chunk.seconds / FRAME_SECONDS), N_SAMPLES // 160)
    logprobs = [
        lp for t, lp in zip(result.tokens, result.token_logprobs, strict=False) if t < tk.eot
    ]
    timings = find_alignment(
        model, features, tk.sot_sequence(language, options.task), text_tokens, frames, logprobs
    )
    if not timings:  # one word, or nothing to align: the chunk is one segment
        start, end = chunk.pieces[0][1] / SAMPLE_RATE, chunk.file_end
        return [_segment(tk, text_tokens, round(start, 3), round(end, 3), result, [])]
    groups: list[list[tuple[WordTiming, int]]] = []
    for w in timings:
        piece = chunk.piece_at((w.start + w.end) / 2)
        if not groups or piece != groups[-1][-1][1] or _ends_sentence(groups[-1][-1][0].word):
            groups.append([])
        groups[-1].append((w, piece))
    segments = []
    for group in groups:
        words = [
            Word(
                start=round(chunk.file_time(w.start, piece=p), 3),
                end=round(chunk.file_time(max(w.end, w.start), piece=p), 3),
                text=w.word,
                probability=round(w.probability, 4),
            )
            for w, p in group
        ]
        tokens = [t for w, _ in group for t in w.tokens]
        start, end = words[0].start, max(words[-1].end, words[0].start)
        kept = words if options.word_timestamps else []
        segments.append(_segment(tk, tokens, start, end, result, kept))
    return [s for s in segments if any(ch.isalnum() for ch in s.text)]


def _ends_sentence(word: str) -> bool:
    return word.rstrip().endswith((".", "?", "!", "。", "？", "！"))


def _segment(tk, tokens: list[int], start: float, end: float, result, words) -> Segment:
    return Segment(
        start=start,
        end=end,
        text=tk.decode(tokens),
        words=words,
        tokens=tokens,
        avg_logprob=result.avg_logprob,
        no_speech_prob=result.no_speech_prob,
        compression_ratio=result.compression_ratio,
        temperature=result.temperature,
    )


def auto_batch_size(model: WhisperModel) -> int:
    """Chunks per batch: a fixed number on the CPU; on a GPU, what half its free memory holds
    (estimated from the encoder's attention and activations per 30 s window), at most 32."""
    if not model.sessions.on_gpu:
        return CPU_BATCH
    free = gpu_free_bytes()
    if free is None:
        return 8
    d = model.dims
    width = 2 if model.np_dtype == np.float16 else 4
    per_window = width * (
        2 * d.n_audio_head * d.n_audio_ctx**2  # attention scores and probabilities
        + 12 * 2 * d.n_audio_ctx * d.n_audio_state  # activations (MLP 4x, residuals, q/k/v)
        + 2 * d.n_text_layer * d.n_audio_ctx * d.n_text_state  # cross K/V kept for decoding
    )
    return int(max(1, min(32, free // 2 // per_window)))


def gpu_free_bytes() -> int | None:
    """Free memory of the first NVIDIA GPU (nvidia-smi), or None when it cannot be asked."""
    import shutil
    import subprocess

    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout
        return int(out.split()[0]) * 2**20
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
