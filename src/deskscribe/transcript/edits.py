"""Transcript edits as command objects (apply/revert) and the undo history over them.

Every user change to a transcript is one :class:`Edit`, so undo/redo, autosave and the library
share one path. An edit works out its change when applied and keeps an exact (``to_dict``) copy
of what it replaces: revert restores the transcript exactly, and applying again repeats the
first result. Word timings survive wherever the words still match (see :class:`EditText`).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from collections import Counter, deque
from collections.abc import Callable, Iterable
from difflib import SequenceMatcher
from typing import Any, Protocol

from ..errors import DeskScribeError
from .model import Segment, SpeakerTurn, Transcript, Word

_TOKEN = re.compile(r"\s*\S+")  # a word with the space before it
_WORD = re.compile(r"\S+")
_ID_STYLE = re.compile(r"^(.*?)(\d+)$")


class Edit(Protocol):
    """One undoable change. ``label`` names it in a menu ("Undo Split line")."""

    label: str

    def apply(self, t: Transcript) -> None: ...

    def revert(self, t: Transcript) -> None: ...


# --- word and text helpers ---------------------------------------------------------------------


def _match_key(text: str) -> str:
    """A word as the aligner compares it: lower-case, letters and digits only."""
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def _text_tokens(text: str) -> list[str]:
    """The words of ``text``, Whisper style: a word after a space keeps one leading space."""
    return [(" " if m[0][0].isspace() else "") + m[0].strip() for m in _TOKEN.finditer(text)]


def _spread(
    texts: list[str], lo: float, hi: float, speaker: str | None, overlap: bool
) -> list[Word]:
    """New words for ``texts`` sharing ``lo``..``hi`` in proportion to their characters."""
    weights = list(itertools.accumulate(max(len(s.strip()), 1) for s in texts))
    bounds = [lo] + [lo + (hi - lo) * w / weights[-1] for w in weights[:-1]] + [hi]
    return [
        Word(a, b, s, speaker=speaker, overlap=overlap)
        for s, (a, b) in zip(texts, itertools.pairwise(bounds), strict=True)
    ]


def _replaced_run(old: list[Word], texts: list[str]) -> list[Word]:
    """Words typed over ``old``: one for one they take each old word's times; otherwise they
    share the old run's span. Probability 1: the user wrote them."""
    if len(old) == len(texts):
        pairs = zip(old, texts, strict=True)
        return [Word(w.start, w.end, s, 1.0, w.speaker, w.overlap) for w, s in pairs]
    overlap = any(w.overlap for w in old)
    return _spread(texts, old[0].start, old[-1].end, old[0].speaker, overlap)


def _inserted_run(
    seg: Segment, done: list[Word], old: list[Word], i: int, texts: list[str]
) -> list[Word]:
    """Words inserted before ``old[i]``: they fill the gap after the words placed so far."""
    after = old[i].start if i < len(old) else seg.end
    lo = done[-1].end if done else min(seg.start, after)
    neighbour = done[-1] if done else old[min(i, len(old) - 1)]
    return _spread(texts, lo, max(lo, after), neighbour.speaker, False)


def _retimed_words(seg: Segment, new_text: str) -> list[Word]:
    """The words of ``new_text`` timed from ``seg.words``: matched words keep everything but
    their spelling, replaced and inserted words are timed from their neighbours."""
    old, texts = seg.words, _text_tokens(new_text)
    keys_old, keys_new = [_match_key(w.text) for w in old], [_match_key(s) for s in texts]
    out: list[Word] = []
    for op, i1, i2, j1, j2 in SequenceMatcher(None, keys_old, keys_new, False).get_opcodes():
        if op == "equal":
            pairs = zip(old[i1:i2], texts[j1:j2], strict=True)
            out += [dataclasses.replace(w, text=s) for w, s in pairs]
        elif op == "replace":
            out += _replaced_run(old[i1:i2], texts[j1:j2])
        elif op == "insert":
            out += _inserted_run(seg, out, old, i1, texts[j1:j2])
    return out


def _word_text_starts(seg: Segment) -> list[int]:
    """Where each word's text begins in ``seg.text``, found left to right. A word the text does
    not contain (edited elsewhere) is placed at the next non-blank character."""
    starts, pos, text = [], 0, seg.text
    for w in seg.words:
        needle = w.text.strip()
        at = text.find(needle, pos) if needle else -1
        if at < 0:
            at = len(text) - len(text[pos:].lstrip())
        starts.append(at)
        pos = min(len(text), at + len(needle))
    return starts


def word_spans(seg: Segment) -> list[tuple[int, int]]:
    """(start, end) of each of ``seg.words`` in ``seg.text``: where the view marks the word
    being heard and finds the word clicked."""
    return [(a, a + len(w.text.strip())) for a, w in zip(_word_text_starts(seg), seg.words,
                                                         strict=True)]  # fmt: skip


def find_pattern(find: str, *, case_sensitive: bool = False, whole_word: bool = False):
    """The regular expression Find and Replace both use for ``find`` (matched literally)."""
    pattern = re.escape(find)
    if whole_word:
        pattern = rf"(?<!\w){pattern}(?!\w)"
    return re.compile(pattern, 0 if case_sensitive else re.IGNORECASE)


def _cut_before(text: str, at: int) -> int:
    """The cut for a line break before the word at ``at``: the space goes with that word."""
    while at > 0 and text[at - 1].isspace():
        at -= 1
    return at


# --- segment helpers ---------------------------------------------------------------------------


def _segment(t: Transcript, index: int) -> Segment:
    if not 0 <= index < len(t.segments):
        raise IndexError(f"no line {index} (the transcript has {len(t.segments)})")
    return t.segments[index]


def _copy(seg: Segment, **changes: Any) -> Segment:
    words = [dataclasses.replace(w) for w in changes.pop("words", seg.words)]
    tokens = list(changes.pop("tokens", seg.tokens))
    # A translation says what the old text said: a new text drops it.
    same = changes.get("text", seg.text) == seg.text
    translations = dict(seg.translations) if same else {}
    return dataclasses.replace(seg, words=words, tokens=tokens, translations=translations,
                               **changes)  # fmt: skip


def _with_speaker(seg: Segment, speaker: str) -> Segment:
    """``seg`` said by ``speaker``; words that carry a speaker carry the new one."""
    out = _copy(seg, speaker=speaker)
    for w in out.words:
        if w.speaker is not None:
            w.speaker = speaker
    return out


def _split_words(seg: Segment, at: list[int]) -> list[Segment]:
    """``seg`` cut before each word index in ``at``. Times follow the words (the outer ends
    keep the segment's own) and the tokens stay with the first piece, so joining the pieces
    back gives the segment again."""
    starts = _word_text_starts(seg)
    bounds = [0, *at, len(seg.words)]
    cuts = [0, *(_cut_before(seg.text, starts[k]) for k in at), len(seg.text)]
    pieces = []
    for n, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        words = seg.words[lo:hi]
        start = seg.start if lo == 0 else words[0].start
        end = seg.end if hi == len(seg.words) else words[-1].end
        text = seg.text[cuts[n] : cuts[n + 1]]
        pieces.append(_copy(seg, start=start, end=end, text=text, words=words, tokens=[]))
    pieces[0].tokens = list(seg.tokens)
    return pieces


def _split_text(seg: Segment, cut: int) -> list[Segment]:
    """A segment without words cut at character ``cut``, its time shared by characters."""
    at = seg.start + (seg.end - seg.start) * cut / max(len(seg.text), 1)
    first = _copy(seg, end=at, text=seg.text[:cut])
    return [first, _copy(seg, start=at, text=seg.text[cut:], tokens=[])]


def _joined(a: Segment, b: Segment) -> Segment:
    """``a`` and ``b`` as one segment; the exact inverse of a split."""
    gap = "" if a.text[-1:].isspace() or b.text[:1].isspace() or not a.text else " "
    na, nb = max(len(a.tokens), 1), max(len(b.tokens), 1)  # weights, as model._joined has
    logprob = (a.avg_logprob * na + b.avg_logprob * nb) / (na + nb)
    return _copy(
        a,
        end=b.end,
        text=a.text + gap + b.text,
        words=a.words + b.words,
        tokens=a.tokens + b.tokens,
        avg_logprob=a.avg_logprob if a.avg_logprob == b.avg_logprob else logprob,
        no_speech_prob=max(a.no_speech_prob, b.no_speech_prob),
        compression_ratio=max(a.compression_ratio, b.compression_ratio),
        temperature=max(a.temperature, b.temperature),
        language=a.language or b.language,
    )


class _SegmentsEdit:
    """Base of the edits that replace a run of segments with new ones (``_rewrite``). Apply
    keeps the old run as dicts, and the old ids when the count changes (ids are renumbered
    then), so revert puts back exactly what was there."""

    label = ""

    def _rewrite(self, t: Transcript) -> tuple[int, int, list[Segment]]:
        """(first index, how many segments, what replaces them), leaving ``t`` untouched."""
        raise NotImplementedError

    def apply(self, t: Transcript) -> None:
        start, count, new = self._rewrite(t)
        old = [s.to_dict() for s in t.segments[start : start + count]]
        ids = [s.id for s in t.segments] if len(new) != count else None
        t.segments[start : start + count] = new
        if ids is not None:
            for k, seg in enumerate(t.segments):
                seg.id = k
        self._undo = (start, len(new), old, ids)

    def revert(self, t: Transcript) -> None:
        start, count, old, ids = self._undo
        t.segments[start : start + count] = [Segment.from_dict(d) for d in old]
        if ids is not None:
            for seg, old_id in zip(t.segments, ids, strict=True):
                seg.id = old_id


# --- the edits ---------------------------------------------------------------------------------


class EditText(_SegmentsEdit):
    """Set line ``index``'s text. Its words are re-timed by aligning old and new words; the
    segment's start/end move only when its first/last word's time moved."""

    label = "Edit text"

    def __init__(self, index: int, new_text: str) -> None:
        self.index, self.new_text = index, new_text

    def _rewrite(self, t: Transcript) -> tuple[int, int, list[Segment]]:
        seg = _segment(t, self.index)
        out = _copy(seg, text=self.new_text)
        if seg.words and self.new_text != seg.text:
            out.words = _retimed_words(seg, self.new_text)
        if out.words and out.words[0].start != seg.words[0].start:
            out.start = out.words[0].start
        if out.words and out.words[-1].end != seg.words[-1].end:
            out.end = out.words[-1].end
        return self.index, 1, [out]


def _retold_turns(turns: list[SpeakerTurn], spans: list[tuple[float, float, str]]):
    """``turns`` with each span (start, end, speaker) said by that speaker: the turns it
    overlaps are cut back, the span goes in, in time order. RTTM is written from the turns,
    so a speaker set by hand reaches it too."""
    out = list(turns)
    for lo, hi, speaker in spans:
        if hi <= lo:
            continue
        kept: list[SpeakerTurn] = []
        for x in out:
            if x.end <= lo or x.start >= hi:
                kept.append(x)
                continue
            if x.start < lo:
                kept.append(SpeakerTurn(x.start, lo, x.speaker))
            if x.end > hi:
                kept.append(SpeakerTurn(hi, x.end, x.speaker))
        kept.append(SpeakerTurn(lo, hi, speaker))
        out = sorted(kept, key=lambda x: (x.start, x.end))
    return out


class _SpeakerEdit(_SegmentsEdit):
    """A speaker change: the diarization turns under the changed lines follow it."""

    def apply(self, t: Transcript) -> None:
        self._turns = list(t.turns)
        super().apply(t)
        if t.turns:
            start, count, _old, _ids = self._undo
            spans = [(s.start, s.end, s.speaker) for s in t.segments[start : start + count]
                     if s.speaker and s.speaker in self._changed_to]  # fmt: skip
            t.turns = _retold_turns(t.turns, spans)

    def revert(self, t: Transcript) -> None:
        super().revert(t)
        t.turns = list(self._turns)

    @property
    def _changed_to(self) -> set[str]:
        return {self.speaker}


class SetSpeaker(_SpeakerEdit):
    """Say that whole lines ``indexes`` were spoken by ``speaker``."""

    label = "Set speaker"

    def __init__(self, indexes: Iterable[int], speaker: str) -> None:
        self.indexes, self.speaker = sorted(set(indexes)), speaker
        if not self.indexes:
            raise ValueError("No lines chosen to set the speaker of")

    def _rewrite(self, t: Transcript) -> tuple[int, int, list[Segment]]:
        lo, hi = self.indexes[0], self.indexes[-1]
        for i in (lo, hi):
            _segment(t, i)
        chosen = set(self.indexes)
        run = t.segments[lo : hi + 1]
        new = [_with_speaker(s, self.speaker) if lo + k in chosen else s for k, s in enumerate(run)]
        return lo, len(run), new


class SetWordsSpeaker(_SpeakerEdit):
    """Say that words ``first_word``..``last_word`` (inclusive) of line ``index`` were spoken by
    ``speaker``: they become their own line; the words around them keep their speaker."""

    label = "Set speaker of words"

    def __init__(self, index: int, first_word: int, last_word: int, speaker: str) -> None:
        self.index, self.first, self.last, self.speaker = index, first_word, last_word, speaker

    def _rewrite(self, t: Transcript) -> tuple[int, int, list[Segment]]:
        seg = _segment(t, self.index)
        if not 0 <= self.first <= self.last < len(seg.words):
            raise ValueError(f"Choose words 0 to {len(seg.words) - 1} of this line")
        at = [k for k in (self.first, self.last + 1) if 0 < k < len(seg.words)]
        pieces = _split_words(seg, at)
        chosen = 1 if self.first > 0 else 0
        pieces[chosen] = _with_speaker(pieces[chosen], self.speaker)
        return self.index, 1, pieces


class SplitSegment(_SegmentsEdit):
    """Split line ``index`` before word ``word_index``; times follow the words."""

    label = "Split line"

    def __init__(self, index: int, word_index: int) -> None:
        self.index, self.word_index = index, word_index

    def _rewrite(self, t: Transcript) -> tuple[int, int, list[Segment]]:
        seg = _segment(t, self.index)
        if not 0 < self.word_index < len(seg.words):
            raise ValueError("A line can only be split between two of its words")
        return self.index, 1, _split_words(seg, [self.word_index])


class SplitSegmentAt(_SegmentsEdit):
    """Split line ``index`` at a cursor position in its text: before the first word that
    starts at or after ``char_offset``. A line without word times shares its time out by
    characters."""

    label = "Split line"

    def __init__(self, index: int, char_offset: int) -> None:
        self.index, self.char_offset = index, char_offset

    def _rewrite(self, t: Transcript) -> tuple[int, int, list[Segment]]:
        seg = _segment(t, self.index)
        words = seg.words
        starts = _word_text_starts(seg) if words else [m.start() for m in _WORD.finditer(seg.text)]
        if not starts or self.char_offset <= starts[0]:
            raise ValueError("Put the cursor after the first word to split the line there")
        after = [k for k in range(1, len(starts)) if self.char_offset <= starts[k]]
        if not after:
            raise ValueError("There is no word after the cursor to move to a new line")
        if words:
            return self.index, 1, _split_words(seg, [after[0]])
        return self.index, 1, _split_text(seg, _cut_before(seg.text, starts[after[0]]))


class JoinSegments(_SegmentsEdit):
    """Join line ``index`` with the next one; both must have the same speaker."""

    label = "Join lines"

    def __init__(self, index: int) -> None:
        self.index = index

    def _rewrite(self, t: Transcript) -> tuple[int, int, list[Segment]]:
        a, b = _segment(t, self.index), _segment(t, self.index + 1)
        if a.speaker != b.speaker:
            names = [t.speaker_name(s) if s else "no speaker" for s in (a.speaker, b.speaker)]
            raise ValueError(
                f"Can't join lines of different speakers ({names[0]} and {names[1]}); "
                "give them the same speaker first"
            )
        return self.index, 2, [_joined(a, b)]


class RenameSpeaker:
    """Show ``speaker_id`` as ``name`` (``Transcript.rename_speaker``)."""

    label = "Rename speaker"

    def __init__(self, speaker_id: str, name: str | None) -> None:
        self.speaker_id, self.name = speaker_id, name

    def apply(self, t: Transcript) -> None:
        self._names = dict(t.speakers)  # the whole map, so its order comes back too
        t.rename_speaker(self.speaker_id, self.name)

    def revert(self, t: Transcript) -> None:
        t.speakers = dict(self._names)


class MergeSpeakers:
    """Relabel ``from_id`` as ``into_id`` (``Transcript.merge_speakers``). Merging touches
    segments, words, names and turns, so undo restores a snapshot of the whole transcript."""

    label = "Merge speakers"

    def __init__(self, from_id: str, into_id: str, *, join: bool = True) -> None:
        self.from_id, self.into_id, self.join = from_id, into_id, join

    def apply(self, t: Transcript) -> None:
        self._before = t.to_dict()
        t.merge_speakers(self.from_id, self.into_id, join=self.join)

    def revert(self, t: Transcript) -> None:
        before = Transcript.from_dict(self._before)
        for f in dataclasses.fields(Transcript):
            setattr(t, f.name, getattr(before, f.name))


class NothingFound(DeskScribeError, ValueError):
    """Replace found nothing to replace (so there is nothing to undo either)."""


class Together:
    """Several edits done and undone as one step ("New speaker": name it, give it the lines)."""

    def __init__(self, label: str, edits: list[Edit]) -> None:
        self.label, self.edits = label, edits

    def apply(self, t: Transcript) -> None:
        done: list[Edit] = []
        try:
            for edit in self.edits:
                edit.apply(t)
                done.append(edit)
        except Exception:
            for edit in reversed(done):
                edit.revert(t)
            raise

    def revert(self, t: Transcript) -> None:
        for edit in reversed(self.edits):
            edit.revert(t)


class Replace:
    """Replace ``find`` with ``replacement``: in every line, in line ``index`` only, or (with
    ``position``) the first match at or after that character of line ``index``. Each changed
    line is an :class:`EditText`, so a replaced word keeps its time. ``count`` is the number of
    matches replaced by the last apply."""

    label = "Replace"

    def __init__(
        self,
        find: str,
        replacement: str,
        *,
        case_sensitive: bool = False,
        whole_word: bool = False,
        index: int | None = None,
        position: int | None = None,
    ) -> None:
        if not find:
            raise ValueError("Type something to find")
        if position is not None and index is None:
            raise ValueError("A position needs the line it is in")
        self.replacement, self.index, self.position = replacement, index, position
        self.find = find
        self.pattern = find_pattern(find, case_sensitive=case_sensitive, whole_word=whole_word)
        self.count = 0
        self._edits: list[EditText] = []

    def _replaced(self, text: str) -> tuple[str, int]:
        if self.position is None:
            return self.pattern.subn(lambda _m: self.replacement, text)
        m = self.pattern.search(text, self.position)
        return (text[: m.start()] + self.replacement + text[m.end() :], 1) if m else (text, 0)

    def apply(self, t: Transcript) -> None:
        indexes = range(len(t.segments)) if self.index is None else [self.index]
        self._edits, self.count = [], 0
        for i in indexes:
            text, n = self._replaced(_segment(t, i).text)
            if n:
                self._edits.append(EditText(i, text))
                self.count += n
        if not self.count:
            raise NothingFound(f"“{self.find}” is not in the transcript")
        for edit in self._edits:
            edit.apply(t)

    def revert(self, t: Transcript) -> None:
        for edit in reversed(self._edits):
            edit.revert(t)


def new_speaker_id(t: Transcript) -> str:
    """An id no one in ``t`` has, in the style of the ids there ("S3" after "S1", "S2";
    "SPEAKER_02" after "SPEAKER_00", "SPEAKER_01"); "S1", "S2", … when there are none."""
    used = list(dict.fromkeys([*t.speaker_ids(), *t.speakers, *(x.speaker for x in t.turns)]))
    styled = [(m[1], m[2]) for m in map(_ID_STYLE.match, used) if m]
    prefixes = Counter(prefix for prefix, _ in styled)
    prefix = prefixes.most_common(1)[0][0] if prefixes else "S"
    digits = [d for p, d in styled if p == prefix]
    width = min((len(d) for d in digits), default=1)
    n = max((int(d) for d in digits), default=0) + 1
    while f"{prefix}{n:0{width}d}" in used:
        n += 1
    return f"{prefix}{n:0{width}d}"


class EditHistory:
    """Undo and redo over one transcript. ``changed`` callbacks run after every do, undo and
    redo (an autosave listens there). At most ``limit`` steps are kept for undo."""

    def __init__(self, transcript: Transcript, limit: int = 500) -> None:
        if limit < 1:
            raise ValueError("the undo limit must be at least one step")
        self.transcript, self.limit = transcript, limit
        self.changed: list[Callable[[], None]] = []
        self._done: deque[Edit] = deque(maxlen=limit)
        self._undone: list[Edit] = []

    def do(self, edit: Edit) -> None:
        """Apply ``edit``; if it raises, nothing is recorded."""
        edit.apply(self.transcript)
        self._done.append(edit)
        self._undone.clear()
        self._notify()

    def undo(self) -> Edit | None:
        if not self._done:
            return None
        edit = self._done.pop()
        edit.revert(self.transcript)
        self._undone.append(edit)
        self._notify()
        return edit

    def redo(self) -> Edit | None:
        if not self._undone:
            return None
        edit = self._undone.pop()
        edit.apply(self.transcript)
        self._done.append(edit)
        self._notify()
        return edit

    @property
    def can_undo(self) -> bool:
        return bool(self._done)

    @property
    def can_redo(self) -> bool:
        return bool(self._undone)

    @property
    def undo_label(self) -> str | None:
        return self._done[-1].label if self._done else None

    @property
    def redo_label(self) -> str | None:
        return self._undone[-1].label if self._undone else None

    def _notify(self) -> None:
        for callback in list(self.changed):
            callback()
