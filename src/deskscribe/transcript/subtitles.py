"""Subtitle cues from a transcript, laid out by the usual subtitle rules.

The defaults are the usual ones (Netflix's timed-text style guide; WhisperX's and
whisper.cpp's line width and line count options): at most two lines of at most 42 characters,
at most 7 s on screen, at least 0.8 s (about Netflix's 5/6 s: a cue flashed for a tenth of a
second cannot be read) and 0.08 s between cues (two frames), so that players show them apart.
``cues`` cuts each segment's words into such cues:

- where to cut, best first: after a sentence end (``. ? !``), at the longest pause between
  words (``PAUSE`` s or more), after a comma, semicolon or colon, else wherever the text
  divides most evenly; always between words, never across a speaker change or a segment;
- each cue's text is broken into balanced lines, preferring a break after punctuation; a word
  wider than a line keeps a line to itself, whole;
- a cue runs from its first word's start to its last word's end; only its end may then move,
  within the silence before the next cue: later, up to ``min_cue_seconds``, and earlier, to
  leave ``min_cue_gap`` before the next cue.

Word times are used when a segment's words spell its text; a segment without them (or whose
text was edited since) is cut by the same rules, its time shared out by characters.
"""

from __future__ import annotations

import dataclasses
import math
import unicodedata
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from .model import Segment, Transcript

PAUSE = 0.5  # seconds between words that count as a pause worth cutting at
SENTENCE_END = (".", "?", "!", "…")
CLAUSE_END = (",", ";", ":")
_CLOSERS = "\"'”’»)]"
OVERLAP_MARK = "[overlapping]"  # before text said while someone else spoke
DEGENERATE_CUE = 0.1  # seconds given to a cue whose words left it none (overlapping word times)


@dataclass(frozen=True)
class SubtitleRules:
    """How cues are cut and timed; ``None`` (or 0 for the last two numbers) turns a rule off.

    ``SubtitleRules(max_line_chars=None, max_lines=None, max_cue_seconds=None, min_cue_gap=0,
    min_cue_seconds=0)`` gives one cue per segment, one line each, as exports did before.
    """

    max_line_chars: int | None = 42
    max_lines: int | None = 2
    max_cue_seconds: float | None = 7.0
    min_cue_gap: float | None = 0.08
    min_cue_seconds: float | None = 0.8
    # The speaker's name before the first line of a segment's first cue and at each change.
    speaker_names: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The rules as JSON-ready values (kept with a watched folder's queued files)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SubtitleRules:
        """Rules from ``to_dict``'s values; a rule missing is the default, ``None`` keeps it
        off, a number outside ``LIMITS`` is a ValueError; unknown keys are left out."""
        rules: dict[str, Any] = {}
        for name, value in data.items():
            if name in LIMITS:
                rules[name] = None if value is None else rule_value(name, value)
            elif name == "speaker_names":
                rules[name] = bool(value)
        return cls(**rules)


# The values a user may give each number (the CLI, the settings and the dialogs check them
# here; ``min_cue_seconds`` is offered by none of them, only checked when rules are read back):
# (whole number or not, lowest, highest).
LIMITS: dict[str, tuple[bool, float, float]] = {
    "max_line_chars": (True, 1, 1000),
    "max_lines": (True, 1, 10),
    "max_cue_seconds": (False, 0.5, 600.0),
    "min_cue_gap": (False, 0.0, 1.0),
    "min_cue_seconds": (False, 0.0, 10.0),
}


def rule_value(name: str, value: Any) -> int | float:
    """``value`` (a number, or text such as "42") as the rule ``name`` of ``LIMITS`` takes it;
    ValueError saying what it may be ("must be a whole number from 1 to 10, not 0") when it is
    not one of those."""
    whole, low, high = LIMITS[name]
    what = (f"a whole number from {low} to {high}" if whole
            else f"a number of seconds from {low:g} to {high:g}")  # fmt: skip
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(str(value).strip()) if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be {what}, not {value!r}") from None
    if not low <= number <= high or (whole and not number.is_integer()):  # NaN fails too
        raise ValueError(f"must be {what}, not {value}")
    return int(number) if whole else number


@dataclass
class Cue:
    """One subtitle: its times, its text lines (without the name) and who says it."""

    start: float
    end: float
    lines: list[str]
    speaker: str | None = None  # the display name of who speaks (on one line), when known
    named: bool = False  # the name is shown before the first line (``Name: text``)
    language: str | None = None  # the language of the segment it comes from
    overlap: bool = False  # a word of it was said while another speaker spoke

    @property
    def first_line(self) -> str:
        """The first line as SRT writes it: ``[overlapping]`` and the name before it."""
        text = f"{self.label}: {self.lines[0]}" if self.label else self.lines[0]
        return f"{OVERLAP_MARK} {text}" if self.overlap else text

    @property
    def label(self) -> str | None:
        """The name shown before the first line, or ``None``."""
        return self.speaker if self.named else None


@dataclass
class _Token:
    """A unit that is never cut: a word with the punctuation Whisper glued to it."""

    text: str
    start: float
    end: float
    speaker: str | None = None
    space: bool = True  # a space before it when it follows another token on a line
    overlap: bool = False


@dataclass
class _Run:
    """Tokens of one segment and one speaker: what a cue may never cross."""

    tokens: list[_Token]
    segment: Segment
    speaker: str | None


# --- tokens ------------------------------------------------------------------------------------


def _wide(char: str) -> bool:
    return unicodedata.east_asian_width(char) in ("W", "F")


def _word_tokens(segment: Segment) -> list[_Token] | None:
    """The segment's words as tokens, or None when they do not spell its text (edited)."""
    words = [w for w in segment.words if w.text.strip()]
    spelled = "".join(w.text for w in words).split()
    if not words or spelled != segment.text.split():
        return None
    tokens: list[_Token] = []
    for w in words:
        text, speaker = " ".join(w.text.split()), w.speaker or segment.speaker
        glued = bool(tokens) and not w.text[0].isspace()
        if glued and not (_wide(text[0]) and _wide(tokens[-1].text[-1])):
            tokens[-1].text += text
            tokens[-1].end = max(tokens[-1].end, w.end)
            tokens[-1].overlap |= w.overlap
            continue
        tokens.append(_Token(text, w.start, max(w.start, w.end), speaker, not glued, w.overlap))
    return tokens


def _text_tokens(segment: Segment) -> list[_Token]:
    """The segment's words from its text, its time shared out in proportion to characters."""
    words = segment.text.split()
    total = sum(len(w) + 1 for w in words)
    duration = max(0.0, segment.end - segment.start)
    tokens, done = [], 0
    for w in words:
        start = segment.start + duration * done / total
        done += len(w) + 1
        tokens.append(_Token(w, start, segment.start + duration * done / total, segment.speaker))
    return tokens


def _runs(segment: Segment) -> list[_Run]:
    """The segment's tokens, cut at each change of speaker."""
    tokens = _word_tokens(segment) or _text_tokens(segment)
    runs: list[_Run] = []
    for token in tokens:
        if not runs or runs[-1].speaker != token.speaker:
            runs.append(_Run([], segment, token.speaker))
        runs[-1].tokens.append(token)
    return runs


# --- lines -------------------------------------------------------------------------------------


def _join(tokens: list[_Token]) -> str:
    return "".join((" " if t.space and i else "") + t.text for i, t in enumerate(tokens))


def _offsets(tokens: list[_Token]) -> list[int]:
    """``len(_join(tokens[:i]))`` for every ``i`` from 0 to ``len(tokens)``."""
    out = [0]
    for i, t in enumerate(tokens):
        out.append(out[-1] + len(t.text) + (1 if t.space and i else 0))
    return out


def _ends_with(token: _Token, marks: tuple[str, ...]) -> bool:
    return token.text.rstrip(_CLOSERS).endswith(marks)


def _layout(tokens: list[_Token], rules: SubtitleRules, reserve: int) -> list[str] | None:
    """The tokens as at most ``max_lines`` balanced lines of at most ``max_line_chars`` (the
    first ``reserve`` characters narrower, for the name), or None when they do not fit. One
    line when it fits; a token wider than a line fits on a line of its own."""
    width, text = rules.max_line_chars, _join(tokens)
    if width is None or len(text) + reserve <= width:
        return [text]
    most = min(rules.max_lines or len(tokens), len(tokens))
    for count in range(2, most + 1):
        breaks = _balanced_breaks(tokens, count, width, reserve)
        if breaks is not None:
            return [_join(tokens[a:b]) for a, b in pairwise([0, *breaks, len(tokens)])]
    return None


def _balanced_breaks(tokens: list[_Token], count: int, width: int, reserve: int):
    """Where to break ``tokens`` into ``count`` lines, None when no way fits. Each line's
    length is kept close to the mean; a break after punctuation is worth a quarter line.
    Dynamic programming: ``best[(lines, end)]`` is the cost and breaks of ``tokens[:end]``."""
    n, at = len(tokens), _offsets(tokens)
    target = (at[n] + reserve) / count
    best: dict[tuple[int, int], tuple[float, tuple[int, ...]]] = {(0, 0): (0.0, ())}
    for line in range(1, count + 1):
        for end in range(line, n - count + line + 1):
            options = []
            for begin in range(end - 1, line - 2, -1):
                size = at[end] - at[begin] - (1 if begin and tokens[begin].space else 0)
                size += reserve if line == 1 else 0
                if size > width and end - begin > 1:
                    break  # longer lines only grow
                if (line - 1, begin) in best:
                    cost, breaks = best[(line - 1, begin)]
                    options.append((cost + abs(size - target), (*breaks, end)))
            if options:
                cost, breaks = min(options)
                punctuated = end < n and _ends_with(tokens[end - 1], SENTENCE_END + CLAUSE_END)
                best[(line, end)] = (cost - width / 4 if punctuated else cost, breaks)
    found = best.get((count, n))
    return None if found is None else list(found[1][:-1])


# --- cutting -----------------------------------------------------------------------------------


def _seconds(tokens: list[_Token]) -> float:
    """How long a cue of these tokens lasts: to the last word's end (the latest, should word
    times overlap)."""
    return max(t.end for t in tokens) - tokens[0].start


def _fits(tokens: list[_Token], rules: SubtitleRules, reserve: int) -> bool:
    limit = rules.max_cue_seconds
    if limit is not None and len(tokens) > 1 and _seconds(tokens) > limit:
        return False
    return _layout(tokens, rules, reserve) is not None


def _nearest(tokens: list[_Token], candidates: list[int], chars: float) -> int:
    """The candidate cut that leaves a first part closest to ``chars`` characters long."""
    at = _offsets(tokens)
    return min(candidates, key=lambda i: abs(at[i] - chars))


def _cut(tokens: list[_Token], rules: SubtitleRules, reserve: int) -> int:
    """Where to cut tokens that do not fit one cue (the index of the first token after):
    a sentence end, else the longest pause, else a clause end, else an even cut."""
    places = range(1, len(tokens))
    middle = len(_join(tokens)) / 2
    sentence = [i for i in places if _ends_with(tokens[i - 1], SENTENCE_END)]
    if sentence:
        return _nearest(tokens, sentence, middle)
    gaps = {i: tokens[i].start - tokens[i - 1].end for i in places}
    paused = [i for i in places if gaps[i] >= PAUSE]
    if paused:
        return max(paused, key=gaps.__getitem__)
    clause = [i for i in places if _ends_with(tokens[i - 1], CLAUSE_END)]
    if clause:
        return _nearest(tokens, clause, middle)
    return _even_cut(tokens, rules, reserve)


def _even_cut(tokens: list[_Token], rules: SubtitleRules, reserve: int) -> int:
    """The cut into as few, as even cues as fit: the first piece of the fewest even pieces
    whose first piece fits (the rest is cut again the same way)."""
    per_cue = (rules.max_line_chars or math.inf) * (rules.max_lines or math.inf)
    chars = len(_join(tokens))
    pieces = max(2, math.ceil(chars / per_cue))
    if rules.max_cue_seconds:
        pieces = max(pieces, math.ceil(_seconds(tokens) / rules.max_cue_seconds))
    places = list(range(1, len(tokens)))
    for count in range(pieces, len(tokens) + 1):
        at = _nearest(tokens, places, chars / count)
        if _fits(tokens[:at], rules, reserve):
            return at
    return 1


def _split(tokens: list[_Token], rules: SubtitleRules, reserve: int) -> list[list[_Token]]:
    """``tokens`` cut into pieces that each fit a cue (the first with ``reserve`` for a name)."""
    if len(tokens) == 1 or _fits(tokens, rules, reserve):
        return [tokens]
    at = _cut(tokens, rules, reserve)
    return _split(tokens[:at], rules, reserve) + _split(tokens[at:], rules, 0)


def _run_cues(run: _Run, transcript: Transcript, rules: SubtitleRules) -> list[Cue]:
    name = None if run.speaker is None else " ".join(transcript.speaker_name(run.speaker).split())
    shown = bool(name) and rules.speaker_names
    reserve = len(f"{name}: ") if shown else 0
    out = []
    for i, piece in enumerate(_split(run.tokens, rules, reserve)):
        first = shown and i == 0
        lines = _layout(piece, rules, reserve if first else 0) or [_join(piece)]
        end = piece[0].start + _seconds(piece)
        overlap = any(t.overlap for t in piece)
        out.append(Cue(piece[0].start, end, lines, name, first, run.segment.language, overlap))
    return out


# --- timing ------------------------------------------------------------------------------------


def _retime(cues: list[Cue], rules: SubtitleRules, duration: float | None) -> None:
    """Move each cue's end within the silence after it: later up to ``min_cue_seconds``, earlier
    to leave ``min_cue_gap`` before the next cue. Only overlapping word times make a cue with
    no time left; it gets ``DEGENERATE_CUE`` s and the cues after it move later."""
    gap = rules.min_cue_gap or 0.0
    for cue, after in pairwise([*cues, None]):
        limit = after.start - gap if after else (duration or math.inf)
        if rules.min_cue_seconds:
            cue.end = max(cue.end, min(cue.start + rules.min_cue_seconds, limit))
        if not gap:
            continue
        if after is not None:
            cue.end = min(cue.end, limit)
        if cue.end <= cue.start:
            cue.end = cue.start + DEGENERATE_CUE
        if after is not None and after.start < cue.end + gap:
            after.start = cue.end + gap
            after.end = max(after.end, after.start + DEGENERATE_CUE)


def cues(transcript: Transcript, rules: SubtitleRules | None = None) -> list[Cue]:
    """The transcript's subtitle cues, in order, by ``rules`` (None: the defaults).
    Segments without text give none."""
    rules = rules or SubtitleRules()
    out: list[Cue] = []
    for segment in transcript.segments:
        for run in _runs(segment):
            out += _run_cues(run, transcript, rules)
    _retime(out, rules, transcript.duration)
    return out
