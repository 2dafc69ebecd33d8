"""Speech for batched decoding: Silero VAD over a stream of audio, regions packed into
windows of at most 30 s.

``speech_chunks`` streams blocks in and chunks out; only the audio of regions not yet packed
is kept, so memory does not grow with the length of the input. The probabilities come from
``vad.SequenceVAD`` a block at a time (the same as one frame at a time); ``RegionTracker`` is
``vad.regions_from_probabilities`` one block of probabilities at a time (same result).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from ..audio.vad import FRAME, SequenceVAD, VadOptions
from .decoding import TranscriptionCancelled
from .features import N_SAMPLES, SAMPLE_RATE

PAD_MS = 400


def default_vad_options() -> VadOptions:
    """Regions short enough that each fits one chunk with its padding."""
    return VadOptions(
        speech_pad_ms=PAD_MS, max_speech_s=(N_SAMPLES / SAMPLE_RATE) - 2 * PAD_MS / 1000
    )


# --------------------------------------------------------------------------- regions


class RegionTracker:
    """``vad.regions_from_probabilities``, fed a stream of frame probabilities.

    ``push`` takes the next frames' probabilities and returns the regions that can no longer
    change; ``finish`` returns the rest. The result equals ``regions_from_probabilities`` on
    the whole signal.
    """

    def __init__(self, options: VadOptions) -> None:
        self.opt = options
        self.on, self.off = options.threshold, options.off_threshold
        self.min_silence = options.min_silence_ms * SAMPLE_RATE // 1000
        self.min_speech = options.min_speech_ms * SAMPLE_RATE // 1000
        self.pad = options.speech_pad_ms * SAMPLE_RATE // 1000
        self.limit = (
            None
            if options.max_speech_s == float("inf")
            else int(options.max_speech_s * SAMPLE_RATE)
        )
        self.frames = 0
        self.start: int | None = None
        self.silence_since: int | None = None
        self.probs = np.zeros(0, dtype=np.float32)  # probabilities since the open region began
        self.probs_from = 0  # frame index of probs[0]
        self.closed: list[list[int]] = []  # kept regions (unpadded) not yet handed out
        self.prev_end: int | None = None  # padded end of the last region handed out

    def push(self, probs: np.ndarray) -> list[tuple[int, int]]:
        probs = np.asarray(probs, dtype=np.float32).reshape(-1)
        if self.start is None:
            self.probs, self.probs_from = probs, self.frames
        else:
            self.probs = np.concatenate([self.probs, probs])
        first = self.frames
        for i, p in enumerate(probs.tolist()):
            self._frame(first + i, p)
        self.frames += len(probs)
        self._split_open()
        return self._ready(self.frames * FRAME, final=False)

    def finish(self, n_samples: int) -> list[tuple[int, int]]:
        if self.start is not None:
            end = n_samples if self.silence_since is None else self.silence_since
            self._close(self.start, end)
            self.start = None
        return self._ready(n_samples, final=True)

    def _frame(self, index: int, p: float) -> None:
        pos = index * FRAME
        if self.start is None:
            if p >= self.on:
                self.start, self.silence_since = pos, None
                self.probs, self.probs_from = self.probs[index - self.probs_from :], index
            return
        if p >= self.on:
            self.silence_since = None
        elif p < self.off:
            if self.silence_since is None:
                self.silence_since = pos
            if pos + FRAME - self.silence_since >= self.min_silence:
                self._close(self.start, self.silence_since)
                self.start, self.silence_since = None, None

    def _close(self, start: int, end: int) -> None:
        """A raw region ended: cut it at its quietest frames if too long, keep the long enough."""
        while self.limit is not None and end - start > self.limit:
            cut = self._cut(start)
            self._keep(start, cut)
            start = cut
        self._keep(start, end)

    def _cut(self, start: int) -> int:
        lo, hi = (start + self.limit // 2) // FRAME, (start + self.limit) // FRAME
        window = self.probs[lo - self.probs_from : hi - self.probs_from]
        return (lo + int(np.argmin(window))) * FRAME

    def _split_open(self) -> None:
        """Cut an open region as soon as it is surely longer than the limit."""
        while self.start is not None and self.limit is not None:
            # Where the region ends at the earliest (the last frame may be a partial one).
            known_end = (
                (self.frames - 1) * FRAME + 1 if self.silence_since is None else self.silence_since
            )
            if known_end - self.start <= self.limit:
                return
            cut = self._cut(self.start)
            self._keep(self.start, cut)
            self.start = cut

    def _keep(self, start: int, end: int) -> None:
        if end - start >= self.min_speech:
            self.closed.append([start, end])

    def _ready(self, position: int, final: bool) -> list[tuple[int, int]]:
        """Pad the closed regions whose neighbours are known (padding stops halfway to them)."""
        out = []
        while self.closed:
            start, end = self.closed[0]
            nxt = self.closed[1][0] if len(self.closed) > 1 else None
            if nxt is None and not final:
                # A region that starts later may still pull this one's padding back.
                open_start = self.start if self.start is not None else None
                if position < end + 2 * self.pad or (
                    open_start is not None and open_start < end + 2 * self.pad
                ):
                    break
            lo = 0 if self.prev_end is None else (self.prev_end + start) // 2
            hi = position if nxt is None and final else None
            if nxt is not None:
                hi = (end + nxt) // 2
            padded_end = end + self.pad if hi is None else min(hi, end + self.pad)
            out.append((int(max(lo, start - self.pad)), int(padded_end)))
            self.prev_end = padded_end  # as in vad.py, the next region pads up to halfway to it
            self.closed.pop(0)
        return out


def probabilities_stream(
    blocks: Iterable[np.ndarray], vad: SequenceVAD | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(block, speech probabilities of the frames judged since the previous block)."""
    vad = vad or SequenceVAD()
    for block in blocks:
        yield block, vad.feed(block)
    yield np.zeros(0, dtype=np.float32), vad.finish()


# --------------------------------------------------------------------------- chunks


def quiet_points(audio: np.ndarray, every: float, search: float = 1.0) -> list[int]:
    """Sample positions about ``every`` seconds apart, each moved to the quietest 20 ms within
    ``search`` seconds (a pause between words rather than the middle of one)."""
    frame = SAMPLE_RATE // 50
    n = audio.shape[0] // frame
    if n == 0:
        return []
    energy = np.square(audio[: n * frame].reshape(n, frame)).mean(axis=1)
    step, reach = int(every * 50), int(search * 50)
    points = []
    for centre in range(step, n - step // 2, step):
        lo, hi = max(centre - reach, 1), min(centre + reach, n - 1)
        points.append((lo + int(np.argmin(energy[lo:hi]))) * frame)
    return sorted(set(points))


@dataclass
class Chunk:
    """Speech regions joined into one window of at most 30 s."""

    audio: np.ndarray
    # (start in the chunk, start in the file, end in the file), samples, in order
    pieces: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.audio.shape[0] / SAMPLE_RATE

    @property
    def file_end(self) -> float:
        return self.pieces[-1][2] / SAMPLE_RATE

    def file_time(self, t: float, is_end: bool = False, piece: int | None = None) -> float:
        """Chunk time ``t`` (s) → file time (s): in the piece holding ``t`` (for an end that
        falls exactly on a joint, the earlier piece), or in ``piece`` when given."""
        sample = t * SAMPLE_RATE
        if piece is None:
            piece = self.piece_at(t, is_end)
        offset, start, end = self.pieces[piece]
        return min(start + max(0.0, sample - offset), end) / SAMPLE_RATE

    def speech_between(self, start: float, end: float) -> float:
        """Seconds of this chunk's speech between file times ``start`` and ``end``."""
        lo, hi = start * SAMPLE_RATE, end * SAMPLE_RATE
        total = sum(max(0.0, min(e, hi) - max(s, lo)) for _, s, e in self.pieces)
        return total / SAMPLE_RATE

    def cut(self, lo: int, hi: int) -> Chunk:
        """The chunk's samples ``lo`` … ``hi - 1`` as a chunk of their own (pieces clipped)."""
        pieces = [
            (max(o, lo) - lo, s + max(0, lo - o), min(e, s + hi - o))
            for o, s, e in self.pieces
            if o < hi and o + (e - s) > lo
        ]
        return Chunk(self.audio[lo:hi], pieces)

    def piece_at(self, t: float, is_end: bool = False) -> int:
        sample = t * SAMPLE_RATE
        offsets = [p[0] for p in self.pieces]
        i = (
            bisect.bisect_left(offsets, sample) - 1
            if is_end
            else bisect.bisect_right(offsets, sample) - 1
        )
        return min(max(i, 0), len(self.pieces) - 1)


class ChunkPacker:
    """Keeps the audio from the first region not yet packed; packs regions into chunks."""

    def __init__(self) -> None:
        self.buffer = np.zeros(0, dtype=np.float32)
        self.buffer_start = 0  # file sample of buffer[0]
        self.current: list[tuple[int, int]] = []

    def add_audio(self, block: np.ndarray) -> None:
        if block.size:
            self.buffer = np.concatenate([self.buffer, block]) if self.buffer.size else block

    def add_region(self, start: int, end: int) -> list[Chunk]:
        """Take one region (file samples); returns the chunks it completed."""
        out = []
        while end - start > N_SAMPLES:  # longer than a window (custom VAD options): cut it
            out += self.add_region(start, start + N_SAMPLES)
            start += N_SAMPLES
        used = sum(e - s for s, e in self.current)
        if self.current and used + end - start > N_SAMPLES:
            out.append(self._pack())
        self.current.append((start, end))
        return out

    def flush(self) -> list[Chunk]:
        return [self._pack()] if self.current else []

    def _pack(self) -> Chunk:
        parts, pieces, offset = [], [], 0
        for s, e in self.current:
            parts.append(self.buffer[s - self.buffer_start : e - self.buffer_start])
            pieces.append((offset, s, e))
            offset += e - s
        last_end = self.current[-1][1]
        self.current = []
        chunk = Chunk(np.concatenate(parts).astype(np.float32, copy=True), pieces)
        self.drop_before(last_end)
        return chunk

    def drop_before(self, sample: int) -> None:
        """Forget audio before ``sample`` (nothing there will be packed)."""
        if self.current:
            sample = min(sample, self.current[0][0])
        if sample > self.buffer_start:
            cut = min(sample - self.buffer_start, self.buffer.shape[0])
            self.buffer = self.buffer[cut:].copy()
            self.buffer_start += cut


def speech_chunks(
    blocks: Iterable[np.ndarray],
    vad_options: VadOptions | None = None,
    cancel: threading.Event | None = None,
) -> Iterator[Chunk]:
    """Stream 16 kHz mono blocks in, chunks of packed speech out."""
    tracker = RegionTracker(vad_options or default_vad_options())
    packer = ChunkPacker()
    seen = 0
    for block, probs in probabilities_stream(blocks):
        if cancel is not None and cancel.is_set():
            raise TranscriptionCancelled("transcription cancelled")
        packer.add_audio(block)
        seen += block.shape[0]
        for start, end in tracker.push(probs):
            yield from packer.add_region(start, end)
        # No region still to come starts (padding included) before this sample.
        keep_from = tracker.frames * FRAME - tracker.pad
        if tracker.start is not None:
            keep_from = min(keep_from, tracker.start - tracker.pad)
        if tracker.closed:
            keep_from = min(keep_from, tracker.closed[0][0] - tracker.pad)
        packer.drop_before(max(0, keep_from))
    for start, end in tracker.finish(seen):
        yield from packer.add_region(start, min(end, seen))
    yield from packer.flush()
