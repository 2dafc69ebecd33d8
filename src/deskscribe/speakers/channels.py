"""Channels as speakers: each channel of a multichannel recording transcribed on its own.

Call recorders and podcast tools often put each party on a channel of their own. With
``--channels split`` (the app's "By channel") every channel is decoded apart
(``decode_blocks(keep_channels=True)``) and transcribed with the same engine as a mono file
(``transcribe_blocks``: batched or sequential, word timestamps on); its segments are labelled
``S1``, ``S2``, … named "Left" and "Right" (stereo), "Channel 3", … beyond, renamable like
any speaker, and merged in time order.

**Crosstalk.** A channel also hears the other parties, quieter (a headset picking up the
room, a phone line's echo), and Whisper transcribes that too. A word is dropped when another
channel was louder while it was spoken (frame energy, 20 ms, as meeting mode attributes
words in ``speakers/online.py``) and that channel has a word at the same time which reads the
same, or any word at all there while it was at least ``LEAK_RATIO`` louder (the copy heard
as crosstalk may be misheard). Real double talk keeps both parties' words: each is louder in
its own channel, and its words are marked ``overlap`` (``assign.mark_overlaps``). A channel
that is a copy of an earlier one (dual-mono files) is not transcribed again.

The file is decoded once to measure its channels and once more per channel transcribed, so
memory stays at about one block (plus 8 bytes per channel per 20 ms) whatever its length.

The speaker module sits above ``whisper/`` (as ``diarize.py`` does): it drives the engine and
labels what it wrote; nothing here knows about Qt.
"""

from __future__ import annotations

import bisect
import dataclasses
import difflib
import re
import threading
from collections import Counter
from pathlib import Path

import numpy as np

from ..audio.decode import decode_blocks, probe
from ..errors import Progress
from ..transcript import Segment, Transcript, Word
from .assign import mark_overlaps
from .online import ENERGY_FRAME, SAMPLE_RATE, frame_energy, span_energy

SAME_SOUND = 0.01  # a channel within -20 dB (difference energy) of an earlier one is a copy
LEAK_RATIO = 10.0  # another channel 10 dB louder over a word: the word is crosstalk from it
OVERLAP_SLACK = 0.25  # s: word times of the same speech in two channels differ this much
SIMILAR = 0.6  # difflib ratio at which two normalized words read the same
QUIET = 0.001  # -30 dB from a word's loudest frame: not speech (trim_to_speech)
_LONGEST_WORD = 30.0  # s: a word (or a segment without word times) is inside one window


def channel_name(index: int) -> str:
    """The default name of channel ``index`` (0-based): "Left", "Right", "Channel 3", …"""
    return ("Left", "Right")[index] if index < 2 else f"Channel {index + 1}"


def channel_speaker(index: int) -> str:
    """The speaker id of channel ``index`` (0-based): "S1", "S2", … like the diarizer's."""
    return f"S{index + 1}"


def mono_note(path: str | Path) -> str:
    name = Path(path).name
    return (
        f"'{name}' has one channel, so there are no channels to split; "
        "transcribed as usual, without channel labels."
    )


def same_sound_note(path: str | Path) -> str:
    name = Path(path).name
    return (
        f"The channels of '{name}' carry the same sound; transcribed once, without channel "
        "labels (use speaker detection to tell the voices apart)."
    )


@dataclasses.dataclass
class ChannelLevels:
    """What one pass over the file learns: per-channel loudness and duplicated channels."""

    energy: np.ndarray  # [channels, frames]: mean square per 20 ms frame
    copy_of: dict[int, int]  # channel -> the earlier channel it repeats


def channel_levels(path: str | Path, cancel: threading.Event | None = None) -> ChannelLevels:
    """Decode ``path`` keeping its channels and measure each one (about one block in memory)."""
    from ..whisper.decoding import TranscriptionCancelled

    frames: list[np.ndarray] = []
    power: np.ndarray | None = None  # per channel, whole file
    apart: np.ndarray | None = None  # [i, j]: energy of channel i minus channel j
    with decode_blocks(path, keep_channels=True) as blocks:
        for block in blocks:  # 30 s blocks: whole 20 ms frames except in the last one
            if cancel is not None and cancel.is_set():
                raise TranscriptionCancelled("cancelled")
            x = block.astype(np.float64)
            frames.append(np.stack([frame_energy(row) for row in x]))
            if power is None or apart is None:
                power, apart = np.zeros(x.shape[0]), np.zeros((x.shape[0],) * 2)
            power += np.sum(x**2, axis=1)
            for i in range(1, x.shape[0]):
                for j in range(i):
                    apart[i, j] += np.sum((x[i] - x[j]) ** 2)
    assert power is not None and apart is not None  # decode_blocks raises on no audio
    copy_of: dict[int, int] = {}
    for i in range(1, power.shape[0]):
        for j in range(i):
            if j not in copy_of and apart[i, j] <= SAME_SOUND * max(power[j], 1e-12):
                copy_of[i] = j
                break
    return ChannelLevels(np.concatenate(frames, axis=1), copy_of)


def transcribe_channels(
    model,
    path: str | Path,
    options=None,
    *,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
    notes: list[str] | None = None,
) -> Transcript:
    """Transcribe each channel of ``path`` on its own; one transcript, labelled by channel.

    ``model`` is a ``WhisperModel``, ``options`` a ``TranscribeOptions`` (word timestamps are
    switched on: crosstalk is judged word by word). ``progress(done, total)`` counts seconds
    of audio over all channels transcribed. A file with one channel, or whose channels are
    copies of each other, is transcribed as usual and a note saying so is added to ``notes``.
    """
    from ..whisper.transcribe import (
        TranscribeOptions,
        TranscriptionInfo,
        transcribe_blocks,
        transcribe_file,
    )

    info = probe(path)
    if info.channels < 2:
        _note(notes, mono_note(path))
        return transcribe_file(model, path, options, progress=progress, cancel=cancel)
    levels = channel_levels(path, cancel)
    channels = [c for c in range(info.channels) if c not in levels.copy_of]
    if len(channels) < 2:
        _note(notes, same_sound_note(path))
        return transcribe_file(model, path, options, progress=progress, cancel=cancel)
    topt = dataclasses.replace(options or TranscribeOptions(), word_timestamps=True)
    duration = info.duration
    if duration is None:
        duration = levels.energy.shape[1] * ENERGY_FRAME / SAMPLE_RATE
    total = duration * len(channels)
    per_channel: list[list[Segment]] = []
    languages: Counter[str] = Counter()
    for k, channel in enumerate(channels):

        def report(
            done: float, _total: float, stage: str = "", offset: float = k * duration
        ) -> None:
            if progress is not None:
                progress(offset + min(done, duration), total)

        tinfo = TranscriptionInfo(language=topt.language, duration=duration)
        with decode_blocks(path, keep_channels=True) as blocks:
            segments = list(
                transcribe_blocks(
                    model,
                    (block[channel] for block in blocks),
                    topt,
                    total_seconds=duration,
                    progress=report,
                    cancel=cancel,
                    info=tinfo,
                )
            )
        sid = channel_speaker(channel)
        for seg in segments:
            seg.speaker = sid
            for w in seg.words:
                w.speaker = sid
        per_channel.append(segments)
        if tinfo.language:
            languages[tinfo.language] += sum(len(s.words) or 1 for s in segments)
    kept = drop_crosstalk(per_channel, levels.energy[channels])
    trim_to_speech(kept, levels.energy[channels])
    segments = sorted(
        (seg for segs in kept for seg in segs), key=lambda s: (s.start, int(s.speaker[1:]))
    )
    for i, seg in enumerate(segments):
        seg.id = i
    mark_overlaps(segments)  # double talk: both parties' words, each marked
    used = {seg.speaker for seg in segments}
    names = {channel_speaker(c): channel_name(c) for c in channels}
    return Transcript(
        segments=segments,
        language=languages.most_common(1)[0][0] if languages else topt.language,
        duration=info.duration,
        source=str(path),
        model=model.name,
        speakers={sid: name for sid, name in names.items() if sid in used},
    )


def drop_crosstalk(channels: list[list[Segment]], energy: np.ndarray) -> list[list[Segment]]:
    """The segments of each channel without the words that are another channel's crosstalk.

    ``channels[i]`` are the time-ordered segments transcribed from the channel whose frame
    energies are ``energy[i]``. A word goes when another channel was louder over it (ties go
    to the earlier channel) and, at the same time, that channel has the same word, or any word
    while it was ``LEAK_RATIO`` louder. Segments keep their surviving words (text and times
    follow them); segments left without words go.
    """
    words = [sorted((w for seg in segs for w in _words(seg)), key=_start) for segs in channels]
    starts = [[w.start for w in ws] for ws in words]
    out: list[list[Segment]] = []
    for a, segs in enumerate(channels):
        kept_segments = []
        for seg in segs:
            kept = [w for w in _words(seg) if not _is_crosstalk(w, a, words, starts, energy)]
            if not kept:
                continue
            if len(kept) == len(_words(seg)):
                kept_segments.append(seg)
            elif seg.words:
                kept_segments.append(
                    dataclasses.replace(
                        seg,
                        words=kept,
                        text="".join(w.text for w in kept),
                        start=kept[0].start,
                        end=max(kept[-1].end, kept[0].start),
                    )
                )
        out.append(kept_segments)
    return out


def trim_to_speech(channels: list[list[Segment]], energy: np.ndarray) -> None:
    """Pull each segment's first word start and last word end in to where its own channel is
    speaking (within ``QUIET`` of the word's loudest frame, and louder than every other
    channel). Word times are least sure at segment edges, most of all next to crosstalk that
    was dropped: the aligner gives a first word the silence before it. Only ever shrinks."""
    for a, segs in enumerate(channels):
        others = np.delete(energy, a, axis=0)
        for seg in segs:
            if not seg.words:
                continue
            first, last = seg.words[0], seg.words[-1]
            first.start = _speech_span(first, energy[a], others)[0]
            last.end = max(_speech_span(last, energy[a], others)[1], last.start)
            seg.start, seg.end = first.start, max(last.end, first.start)


def _speech_span(word: Word, own: np.ndarray, others: np.ndarray) -> tuple[float, float]:
    lo = int(word.start * SAMPLE_RATE) // ENERGY_FRAME
    hi = max(lo + 1, int(np.ceil(word.end * SAMPLE_RATE / ENERGY_FRAME)))
    e = own[lo:hi]
    if not e.size:
        return word.start, word.end
    speech = e >= QUIET * e.max()
    if others.size:
        speech &= e > others[:, lo:hi].max(axis=0)
    found = np.flatnonzero(speech)
    if not found.size:
        return word.start, word.end
    start, end = (lo + found[0]) * ENERGY_FRAME, (lo + found[-1] + 1) * ENERGY_FRAME
    return max(word.start, start / SAMPLE_RATE), min(word.end, end / SAMPLE_RATE)


def _start(word: Word) -> float:
    return word.start


def _words(seg: Segment) -> list[Word]:
    """A segment's words; a segment without word times counts as one word."""
    return seg.words or [Word(seg.start, seg.end, seg.text, speaker=seg.speaker)]


def _is_crosstalk(
    word: Word, a: int, words: list[list[Word]], starts: list[list[float]], energy: np.ndarray
) -> bool:
    own = span_energy(energy[a], word.start, word.end)
    text = _normalize(word.text)
    for b in range(len(words)):
        if b == a:
            continue
        other = span_energy(energy[b], word.start, word.end)
        if not (other > own or (other == own and b < a)):
            continue
        # Words of channel b overlapping this one (give or take OVERLAP_SLACK).
        lo, hi = word.start - OVERLAP_SLACK, word.end + OVERLAP_SLACK
        near = []
        for w in words[b][bisect.bisect_left(starts[b], lo - _LONGEST_WORD) :]:
            if w.start >= hi:
                break
            if w.end > lo:
                near.append(w)
        if not near:
            continue
        if other >= LEAK_RATIO * own or _reads_the_same(text, near):
            return True
    return False


def _reads_the_same(text: str, near: list[Word]) -> bool:
    if not text:
        return True  # punctuation alone: it belongs with the words around it
    others = [_normalize(w.text) for w in near]
    if text in others or text in " ".join(others) or text.replace(" ", "") in "".join(others):
        return True
    return any(difflib.SequenceMatcher(None, text, o).ratio() >= SIMILAR for o in others if o)


def _normalize(text: str) -> str:
    return " ".join(re.sub(r"[^\w']+", " ", text.lower()).split())


def _note(notes: list[str] | None, note: str) -> None:
    if notes is not None:
        notes.append(note)
