"""Live transcription policy: VAD-gated growing buffer, LocalAgreement-2 commits.

Audio arrives in small blocks. Silero VAD decides when someone is speaking; only then does a
buffer grow. Every ``step_seconds`` of new speech the whole buffer is decoded again (with word
timestamps), but only when the VAD heard speech since the last pass (a pause inside an
utterance costs nothing), and the step grows while decoding takes long (``decode_share``: the
share of real time the passes may take), so a slow machine does fewer, longer passes instead
of falling behind. A word is *committed* once two consecutive decodes agree on it (LocalAgreement-2,
as in whisper_streaming by Macháček et al.); the rest of the newest decode is *tentative*. When
the speaker pauses (VAD end of utterance) the utterance is decoded a last time and everything is
committed, and the buffer starts afresh. A buffer that grows past ``max_buffer_seconds`` (a long
monologue) is cut after its last committed sentence; one with nothing committed to cut after
(passes skipped while behind) is ended as an utterance at ``hard_buffer_seconds`` plus a
step, so no pass decodes more than that. The committed text is the prompt for the
next decode, so the model keeps the style and names it has seen. ``finish()`` commits whatever
is left: nothing spoken before Stop is dropped.

Committed words are grouped into segments (a sentence, an utterance, at most ~15 s, never two
speakers in one). The caller can label words with a speaker before grouping (``label_words``).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from ..audio.vad import SAMPLE_RATE, StreamingVAD, VadOptions
from ..transcript import Segment, Word
from .decoding import DecodingOptions, WindowDecoder
from .language_runs import encode_windows
from .languages import choose, settle
from .model import WhisperModel
from .prompt import plan_prompt
from .transcribe import TranscribeOptions, TranscriptionInfo, transcribe_blocks

LANGUAGE_SECONDS = 2.0  # an utterance's language is decided on this much of its audio


@dataclass
class StreamingOptions:
    language: str | None = None  # None: detected per utterance (multilingual models)
    languages: tuple[str, ...] = ()  # detection limited to these codes (empty: any)
    task: str = "transcribe"
    beam_size: int | None = None  # greedy by default: a decode every step must stay cheap
    step_seconds: float = 0.6  # decode again after this much new audio (the shortest step)
    max_step_seconds: float = 2.0  # ... and the longest, however slow the passes are
    # The step while ``sparse`` (a session that fell behind asks for fewer passes): a long
    # utterance still gets a pass this often, so its text commits and its buffer is trimmed.
    sparse_step_seconds: float = 4.0
    decode_share: float = 0.45  # passes may take this share of real time (0: fixed step)
    skip_silent_passes: bool = True  # no interim pass when the VAD heard nothing new
    end_of_utterance_ms: int = 600  # a pause this long ends an utterance (commits it)
    speech_pad_ms: int = 250  # audio kept before speech starts and after it ends
    max_buffer_seconds: float = 15.0  # cut a long buffer after its last committed sentence
    hard_buffer_seconds: float = 25.0  # ... and after its last committed word past this
    prompt_chars: int = 200  # committed text given to the model as the prompt
    vocabulary: str | None = None  # names and jargon, in the prompt of every pass (prompt.py)
    vad_threshold: float = 0.5
    segment_max_seconds: float = 15.0
    # Passes encode their audio plus this much silence, not a 30 s window (options.py's
    # ``context_pad_seconds``); None: 30 s.
    context_pad_seconds: float | None = 2.0


@dataclass
class StreamUpdate:
    """What one call changed: segments (new or grown, by id) and the current tentative words."""

    segments: list[Segment] = field(default_factory=list)
    tentative: list[Word] = field(default_factory=list)
    decode_seconds: float = 0.0  # time spent decoding in this call
    audio_end: float = 0.0  # stream time (s) the newest decode reached
    open_id: int | None = None  # id of the segment still growing, if any

    @property
    def tentative_text(self) -> str:
        return "".join(w.text for w in self.tentative).strip()


def drop_collapsed(words: list[Word], run: int = 3) -> list[Word]:
    """Words after the first of ``run`` or more that all start at the same instant with no
    duration: the alignment found no audio left for them. That is Whisper running on into the
    silence after the speech, mostly repeating what it just said (a live pass on a buffer
    of real meeting speech wrote "... project documents link. No, on the desktop, you'll find
    that there's a project documents link.", the second time all at one instant)."""
    kept: list[Word] = []
    i = 0
    while i < len(words):
        j = i + 1
        while (
            j < len(words)
            and abs(words[j].start - words[i].start) < 0.02
            and words[j - 1].end - words[j - 1].start < 0.02
        ):
            j += 1
        kept.append(words[i])
        if j - i < run:
            kept.extend(words[i + 1 : j])
        i = j
    return kept


def _key(text: str) -> str:
    """Word identity for agreement: case and punctuation do not count."""
    return re.sub(r"[^\w']+", "", text.lower())


RESYNC_WORDS = 3  # agreeing words after a local disagreement that let the commit go past it
RESYNC_SKIP = 2  # ... at most this many words apart in either hypothesis
RESYNC_SECONDS = 0.5  # ... and starting this close in time


def _agreed(new: list[Word], previous: list[Word]) -> int:
    """How many words of ``new`` the two hypotheses agree on, from the start.

    Strict LocalAgreement stops at the first word they differ on. On real speech that can
    stall for a whole utterance: one word read two ways ("need" / "needed") held back 15 s of
    text both passes had word for word, until the buffer was cut and the last pass, started
    mid-sentence, lost it (the stall test, 2026-12-03). So a disagreement of up to
    ``RESYNC_SKIP`` words is passed when ``RESYNC_WORDS`` words after it agree, at the same
    time in both; the newer hypothesis's reading of it is kept. Words only the older pass
    heard are not dropped on the newer one's say (the newer reading must be as long)."""
    keys_new = [_key(w.text) for w in new]
    keys_old = [_key(w.text) for w in previous]
    i = j = agreed = 0
    while i < len(new) and j < len(previous):
        if keys_new[i] == keys_old[j]:
            i, j = i + 1, j + 1
            agreed = i
            continue
        step = _resync(new, previous, keys_new, keys_old, i, j)
        if step is None:
            break
        i, j = i + step[0], j + step[1]
    return agreed


# (words passed in the newer hypothesis, in the older), fewest first
_SKIPS = sorted(
    ((a, b) for a in range(RESYNC_SKIP + 1) for b in range(RESYNC_SKIP + 1) if a and b <= a),
    key=sum,
)


def _resync(new, previous, keys_new, keys_old, i, j) -> tuple[int, int] | None:
    n = RESYNC_WORDS
    for a, b in _SKIPS:
        x, y = i + a, j + b
        if (
            keys_new[x : x + n] == keys_old[y : y + n]
            and len(keys_new[x : x + n]) == n
            and abs(new[x].start - previous[y].start) < RESYNC_SECONDS
        ):
            return a, b
    return None


class LocalAgreement:
    """LocalAgreement-2: commit the longest prefix two consecutive hypotheses share (passing
    a local disagreement when the words after it agree, ``_agreed``)."""

    def __init__(self) -> None:
        self.previous: list[Word] = []
        self.last_committed: list[Word] = []

    def _fresh(self, words: list[Word]) -> list[Word]:
        """Drop words of a new hypothesis that were already committed.

        The hypothesis is aligned on the newest committed word it has again (the same word,
        starting within 0.6 s; of the last three committed, the newest found, an older one
        within 0.3 s). By time alone a word boundary moving between passes lost the next
        word ("Texas" ended at 16.35 s in one pass, "originally" started at 16.15 s in the
        next). Where the newest committed
        words read differently now ("I need" committed, "I needed" in the next pass), as many
        words after the aligned one as were committed after it are taken for their new
        reading, if they start within the committed time (else the alignment is doubtful: a
        "the" 0.5 s later is another "the"). No word in common: by time."""
        if not self.last_committed:
            return words
        last = self.last_committed[-1]
        for back, done in enumerate(reversed(self.last_committed[-3:])):
            near = 0.6 if back == 0 else 0.3
            again = [
                i for i, w in enumerate(words)
                if _key(w.text) == _key(done.text) and abs(w.start - done.start) < near
            ]  # fmt: skip
            if again:
                rest = words[min(again, key=lambda i: abs(words[i].start - done.start)) + 1 :]
                if all(w.start < last.end + 0.3 for w in rest[:back]) and len(rest) >= back:
                    return rest[back:]
        end = last.end
        words = [w for w in words if w.start > end - 0.1]
        # A word straddling the cut may come back: drop an n-gram repeat of the committed tail.
        if words and abs(words[0].start - end) < 1.0:
            tail = [_key(w.text) for w in self.last_committed[-5:]]
            for n in range(min(len(tail), len(words)), 0, -1):
                if tail[-n:] == [_key(w.text) for w in words[:n]]:
                    return words[n:]
        return words

    def insert(self, hypothesis: list[Word]) -> list[Word]:
        """Take a new hypothesis; return the words it commits."""
        new = self._fresh(hypothesis)
        previous = self._fresh(self.previous)
        n = _agreed(new, previous)
        committed, self.previous = new[:n], new[n:]
        self._remember(committed)
        return committed

    def commit_all(self, hypothesis: list[Word]) -> list[Word]:
        """End of utterance: everything new in the final hypothesis is committed."""
        committed = self._fresh(hypothesis)
        self.previous = []
        self._remember(committed)
        return committed

    def _remember(self, committed: list[Word]) -> None:
        if committed:
            self.last_committed = (self.last_committed + committed)[-5:]

    @property
    def tentative(self) -> list[Word]:
        return list(self.previous)


class OnlineTranscriber:
    """Feed 16 kHz mono audio with ``add_audio``; call ``process`` to decode and commit."""

    def __init__(
        self,
        model: WhisperModel,
        options: StreamingOptions | None = None,
        *,
        label_words: Callable[[list[Word]], None] | None = None,
    ) -> None:
        self.model = model
        self.options = opt = options or StreamingOptions()
        self.label_words = label_words
        self.language = opt.language  # forced; otherwise each utterance's own
        self._utterance_language: str | None = None  # detected for the utterance being decoded
        self._previous_language: str | None = None  # the last utterance's
        self._last_language: str | None = None  # the newest pass's guess
        self.vad = StreamingVAD(
            VadOptions(threshold=opt.vad_threshold, min_silence_ms=opt.end_of_utterance_ms)
        )
        self._pad = opt.speech_pad_ms * SAMPLE_RATE // 1000
        self._audio = np.zeros(0, dtype=np.float32)
        self._start = 0  # stream sample of _audio[0]
        self.total = 0  # stream samples received
        self._decoded_to = 0  # stream sample the last decode reached
        self._ends: list[int] = []  # utterance ends not yet committed
        self._agreement = LocalAgreement()
        self._last_decode = (-1, -1)  # (start, end) samples of the newest decode
        self.decode_count = 0  # model runs so far (a pass that decodes nothing is not one)
        self.decoded_samples = 0  # audio those runs decoded, in all: the work done
        self.decode_seconds: list[float] = []  # seconds of each model run not yet collected
        self._pass_seconds = 0.0  # smoothed seconds of an interim pass (for the step)
        self.sparse = False  # fewer interim passes (``sparse_step_seconds``), set by the caller
        self._last_words: list[Word] = []  # ... and the words it gave
        self.segments: list[Segment] = []
        self._forgotten = 0  # segments dropped by ``forget_segments`` (ids keep counting)
        self._open: Segment | None = None  # the segment committed words are added to
        self._history: list[Word] = []  # recent committed words, for the prompt
        # The vocabulary is fitted to the prompt budget once; ``vocabulary_note`` says what
        # was left out (None: all of it is used).
        plan = plan_prompt(model.tokenizer, model.dims.n_text_ctx, opt.vocabulary)
        self.vocabulary_note = plan.note
        self._vocabulary = ", ".join(plan.kept) or None

    # ------------------------------------------------------------------ input

    def add_audio(self, samples: np.ndarray) -> list[tuple[str, int]]:
        """Take the samples; returns the VAD's changes they caused, [("start"|"end", stream
        sample)] (unpadded), for callers that report speech starts and ends themselves."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        self._audio = np.concatenate([self._audio, samples])
        self.total += samples.shape[0]
        changes = self.vad.feed(samples)
        for kind, at in changes:
            if kind == "start" and not self._ends:
                self._cut(max(self._start, at - self._pad))
            elif kind == "end":
                self._ends.append(min(at + self._pad, self.total))
        if not self.vad.speaking and not self._ends:
            self._cut(max(self._start, self.total - self._pad))
        return changes

    @property
    def behind_seconds(self) -> float:
        """Speech received but not yet decoded, in seconds (0 while nobody speaks)."""
        if not self.vad.speaking and not self._ends:
            return 0.0
        return max(0, self.total - max(self._decoded_to, self._start)) / SAMPLE_RATE

    # ------------------------------------------------------------------ decoding

    def process(self, interim: bool = True) -> StreamUpdate:
        """Commit finished utterances; decode the live one if enough new audio came in.

        ``interim=False`` skips the live decode (the caller is behind real time: utterances
        are still committed when they end, only the tentative text waits)."""
        update = StreamUpdate()
        t0 = time.perf_counter()
        if self.vad.speaking and not self._ends and self._buffer_over_limit:
            # No pause long enough to end the utterance, and no committed sentence or word to
            # cut after (passes skipped while behind, or none agreed): end it here, so a pass
            # never decodes more than this and the work stays linear in the audio.
            self._ends.append(self.total)
        while self._ends:
            end = self._ends.pop(0)
            if (
                self._last_decode == (self._start, self._decoded_to)
                and self._decoded_to >= end
                and self._last_words
            ):
                # The live decode already covered the whole utterance, and was not one that
                # would have needed a temperature fallback: no need to decode again.
                words = [w for w in self._last_words if w.start < end / SAMPLE_RATE]
            else:
                words = self._decode(self._start, end)
            self._commit(self._agreement.commit_all(words), update, utterance_end=True)
            self._cut(end)
            self._previous_language = self._utterance_language or self._previous_language
            self._utterance_language = None
        new_audio = self.total - max(self._decoded_to, self._start)
        heard = (  # the VAD heard speech since the last pass
            not self.options.skip_silent_passes
            or self.vad.last_speech > max(self._decoded_to, self._start)
        )
        if interim and self.vad.speaking and heard and new_audio >= self.step_samples:
            began = time.perf_counter()
            words = self._decode(self._start, self.total, final=False)
            took = time.perf_counter() - began
            self._pass_seconds = (
                took if not self._pass_seconds else 0.7 * self._pass_seconds + 0.3 * took
            )
            if self._language_decided:
                self._commit(self._agreement.insert(words), update, utterance_end=False)
                self._trim_long_buffer()
            else:  # nothing is committed in a language that may still change
                update.tentative = words
        if not update.tentative:
            update.tentative = self._agreement.tentative
        update.decode_seconds = time.perf_counter() - t0
        update.audio_end = self._decoded_to / SAMPLE_RATE
        update.open_id = self.open_segment_id
        return update

    @property
    def _buffer_over_limit(self) -> bool:
        opt = self.options
        # A pass is due at least every step: past a step beyond the hard cut, none could cut.
        limit = opt.hard_buffer_seconds + max(opt.max_step_seconds, opt.sparse_step_seconds) + 1
        return self.total - self._start > limit * SAMPLE_RATE

    @property
    def step_samples(self) -> int:
        """New audio an interim pass waits for: ``step_seconds``, longer while passes are slow,
        ``sparse_step_seconds`` while ``sparse``. Not while the utterance's language is still
        open: it is decided on the first pass with ``LANGUAGE_SECONDS`` of audio, and a longer
        first pass moved that decision (a German utterance after an English one was decided on
        2 s and came out English)."""
        if not self._language_decided:
            return int(self.options.step_seconds * SAMPLE_RATE)
        if self.sparse:
            return int(max(self.options.sparse_step_seconds, self._paced_step) * SAMPLE_RATE)
        return int(self._paced_step * SAMPLE_RATE)

    @property
    def _paced_step(self) -> float:
        opt = self.options
        if opt.decode_share > 0 and self._pass_seconds:
            return min(max(opt.step_seconds, self._pass_seconds / opt.decode_share),
                       opt.max_step_seconds)  # fmt: skip
        return opt.step_seconds

    @property
    def chosen_wait_seconds(self) -> float:
        """Undecoded speech that is the transcriber's own choice, not a sign of falling behind:
        while ``sparse``, up to a whole (long) step. (At full work the paced step counts as
        lag: passes slow enough to lengthen it are what a step down is for.)"""
        return self.step_samples / SAMPLE_RATE if self.sparse else 0.0

    def take_decode_seconds(self) -> list[float]:
        """The seconds of each model run since the last call (for health figures)."""
        taken, self.decode_seconds = self.decode_seconds, []
        return taken

    def set_model(self, model: WhisperModel) -> None:
        """Decode with ``model`` from the next pass on (a faster variant when behind); the
        audio, the committed text and the agreement state carry over."""
        self.model = model
        plan = plan_prompt(model.tokenizer, model.dims.n_text_ctx, self.options.vocabulary)
        self.vocabulary_note = plan.note
        self._vocabulary = ", ".join(plan.kept) or None
        self._pass_seconds = 0.0

    def finish(self) -> StreamUpdate:
        """Stop: decode and commit everything still buffered, speech or not yet judged."""
        if self.vad.speaking:
            self._ends.append(self.total)
            self.vad.speaking = False
        update = self.process()
        if self._open is not None:
            update.segments.append(self._close())
        update.tentative = []
        update.open_id = None
        return update

    def _decode(self, start: int, end: int, final: bool = True) -> list[Word]:
        """Words of the audio from ``start`` to ``end``. Interim passes (``final=False``) run at
        temperature 0 only: their text is checked by the next pass anyway, and a fallback
        retry on audio cut mid-word would double their cost."""
        audio = self._audio[start - self._start : end - self._start]
        self._decoded_to = end
        self._last_decode = (start, end)
        self._last_words = []
        if audio.shape[0] < SAMPLE_RATE // 10:
            return []
        info = TranscriptionInfo(language=None)
        language = self.language or self._language_of(audio)
        # Text in another language as the prompt would be translated into this one.
        same = self.language or language in (self._previous_language, None)
        options = TranscribeOptions(
            language=language,
            task=self.options.task,
            beam_size=self.options.beam_size,
            word_timestamps=True,
            initial_prompt=(self._prompt_before(start) if same else "") or None,
            vocabulary=self._vocabulary,
            context_pad_seconds=self.options.context_pad_seconds,
            # Interim passes at temperature 0 only (see the docstring).
            **({} if final else {"temperatures": (0.0,)}),
        )
        offset = start / SAMPLE_RATE
        words: list[Word] = []
        confident = True
        began = time.perf_counter()
        for seg in transcribe_blocks(self.model, [audio], options, info=info):
            confident = confident and seg.compression_ratio <= 2.4 and seg.avg_logprob >= -1.0
            for w in seg.words:
                words.append(
                    replace(w, start=round(w.start + offset, 3), end=round(w.end + offset, 3))
                )
        words = drop_collapsed(words)
        self.decode_count += 1
        self.decoded_samples += audio.shape[0]
        self.decode_seconds = [*self.decode_seconds[-999:], time.perf_counter() - began]
        self._last_words = words if confident else []
        return words

    @property
    def _language_decided(self) -> bool:
        return bool(
            self.language or self._utterance_language or not self.model.tokenizer.multilingual
        )

    def _language_of(self, audio: np.ndarray) -> str | None:
        """The utterance's language: detected on each pass until the utterance has
        ``LANGUAGE_SECONDS`` of audio, then kept (an unsure guess takes the previous
        utterance's language where that is plausible); None for an English-only model."""
        if not self.model.tokenizer.multilingual:
            return None
        if self._utterance_language is None:
            probs = WindowDecoder(self.model, DecodingOptions()).language_probs(
                encode_windows(self.model, [audio])
            )[0]
            found = choose(probs, self.options.languages)
            language = settle([found], self._previous_language)[0]
            self._last_language = language
            if audio.shape[0] < LANGUAGE_SECONDS * SAMPLE_RATE:
                return language  # too short to decide the utterance on
            self._utterance_language = language
        return self._utterance_language

    def _prompt_before(self, start: int) -> str:
        """Committed text that ended before the buffer: text inside the buffer must not be in
        the prompt, or the model skips those words instead of transcribing them again."""
        start_s = start / SAMPLE_RATE
        text = "".join(w.text for w in self._history if w.end <= start_s + 0.05)
        return text[-self.options.prompt_chars :].strip()

    def _cut(self, sample: int) -> None:
        """Forget audio before ``sample`` (stream position)."""
        if sample > self._start:
            self._audio = self._audio[sample - self._start :].copy()
            self._start = sample

    def _trim_long_buffer(self) -> None:
        """A long monologue: restart the buffer after its last committed sentence (or word)."""
        opt = self.options
        length = (self.total - self._start) / SAMPLE_RATE
        if length < opt.max_buffer_seconds or self._open is None:
            return
        committed = [w for s in [*self.segments[-3:], self._open] for w in s.words]
        start_s = self._start / SAMPLE_RATE
        inside = [w for w in committed if w.end > start_s]
        ends = [w for w in inside if w.text.rstrip().endswith((".", "?", "!"))]
        if not ends and length >= opt.hard_buffer_seconds:
            ends = inside
        if ends:
            self._cut(int(ends[-1].end * SAMPLE_RATE))

    # ------------------------------------------------------------------ segments

    def _commit(self, words: list[Word], update: StreamUpdate, *, utterance_end: bool) -> None:
        if words and self.label_words is not None:
            self.label_words(words)
        for w in words:
            seg = self._open
            if seg is not None and (
                w.speaker != seg.speaker
                or w.start - seg.end > 1.0
                or w.end - seg.start > self.options.segment_max_seconds
            ):
                update.segments.append(self._close())
                seg = None
            if seg is None:
                seg = self._open = Segment(
                    start=w.start,
                    end=w.end,
                    text="",
                    speaker=w.speaker,
                    id=self._forgotten + len(self.segments),
                    language=self.language or self._utterance_language or self._last_language,
                )
                self.segments.append(seg)
            seg.words.append(w)
            seg.end = max(seg.end, w.end)
            seg.text = "".join(x.text for x in seg.words).strip()
            if w.text.rstrip().endswith((".", "?", "!")) and len(seg.words) >= 3:
                update.segments.append(self._close())
        self._history = (self._history + words)[-60:]
        if utterance_end and self._open is not None:
            update.segments.append(self._close())
        elif self._open is not None:
            update.segments.append(replace(self._open, words=list(self._open.words)))
        update.segments = _latest_by_id(update.segments)

    def _close(self) -> Segment:
        seg = self._open
        assert seg is not None
        self._open = None
        return replace(seg, words=list(seg.words))

    def forget_segments(self, keep: int = 3) -> None:
        """Drop all but the newest ``keep`` segments: a caller that has passed them on and
        runs for hours (a server session) keeps memory flat. Ids go on counting."""
        drop = max(0, len(self.segments) - max(keep, 3))  # the buffer trim reads the last 3
        if drop:
            del self.segments[:drop]
            self._forgotten += drop

    @property
    def open_segment_id(self) -> int | None:
        """The segment still growing (committed words may be added to it)."""
        return None if self._open is None else self._open.id


def _latest_by_id(segments: list[Segment]) -> list[Segment]:
    latest: dict[int, Segment] = {}
    for s in segments:
        latest[s.id] = s
    return sorted(latest.values(), key=lambda s: s.id)
