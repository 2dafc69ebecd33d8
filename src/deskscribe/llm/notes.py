"""Meeting notes from a transcript: a summary, key points, decisions, action items and
chapters, each point citing the lines of the transcript it comes from, checked against the
transcript before anyone sees it.

The reply is asked for as JSON that follows ``SCHEMA``, whose every string and list is
bounded: a server that turns the schema into a grammar (llama.cpp does) then closes the JSON
within ``max_tokens`` even when a small model repeats itself, which SmolLM2-135M does until it
runs out of tokens.

The model reads the transcript as numbered lines (``[12] 3:05 Anna: …``) and cites line
numbers, never times: a number is easy to check and maps to the line's own start time, so
every time in the notes lies inside the line that supports it. A citation of a line that
does not exist (or lies outside the part the model was shown) is dropped; a point left with
none is kept apart as unsupported (``Notes.unsupported``), never shown as fact; an owner who
is not a speaker of the transcript is cleared. A transcript longer than the model's context
is read in parts that each get notes, then the parts' summaries are summarised once more (the
points of every part are kept as they are).

Templates (meeting, interview, lecture, one-to-one) say what to look for; a user's own text
in ``<data dir>/notes-templates/NAME.txt`` replaces or adds one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..transcript import Transcript
from ..transcript.export import format_timestamp
from .endpoint import Endpoint, LLMCancelled, LLMError, chat_json

KINDS = ("key_points", "decisions", "action_items")


def schema_for(reply_tokens: int) -> dict:
    """The JSON schema of one reply, its bounds sized so that even a reply that fills every
    string and list (a small model repeating itself) closes within ``reply_tokens``, taking
    a token as 3 characters: a server that turns the schema into a grammar then always ends
    with valid JSON."""
    room = reply_tokens * 3
    fill = min(1.0, room / 5400)  # 5400: what the full-size schema can hold
    summary, text = max(100, int(600 * fill)), max(60, int(200 * fill))
    items, chapters = 5, 6

    def worst() -> int:  # characters, with ~40 of keys and quotes per item
        return summary + 3 * items * (text + 40) + items * 100 + chapters * 100 + 100

    while worst() > room and items > 1:
        items, chapters = items - 1, max(1, chapters - 1)
    lines = {"type": "array", "items": {"type": "integer"}, "maxItems": 4}
    item = {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": text}, "lines": lines},
        "required": ["text", "lines"],
    }
    action = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": text},
            "owner": {"type": "string", "maxLength": 60},
            "due": {"type": "string", "maxLength": 40},
            "lines": lines,
        },
        "required": ["text", "lines"],
    }
    chapter = {
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 60},
            "line": {"type": "integer"},
        },
        "required": ["title", "line"],
    }
    return {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "maxLength": summary},
            "key_points": {"type": "array", "items": item, "maxItems": items},
            "decisions": {"type": "array", "items": item, "maxItems": items},
            "action_items": {"type": "array", "items": action, "maxItems": items},
            "chapters": {"type": "array", "items": chapter, "maxItems": chapters},
        },
        "required": ["summary", "key_points", "decisions", "action_items", "chapters"],
    }


SCHEMA = schema_for(1200)


def summary_schema(reply_tokens: int) -> dict:
    length = max(100, min(1200, reply_tokens * 3 - 40))
    return {
        "type": "object",
        "properties": {"summary": {"type": "string", "maxLength": length}},
        "required": ["summary"],
    }


SYSTEM = (
    "You write notes from a transcript. Each transcript line starts with its number in "
    "brackets. {focus} For every point give the numbers of the lines it comes from; a "
    "chapter gives the number of the line where it starts. Use only what the transcript "
    "says. Answer in {language}."
)
TEMPLATES = {
    "meeting": "Write a short summary, the key points, the decisions made, the action items "
    "(what, who does it, by when if said) and chapters (a title where the topic changes).",
    "interview": "Write a short summary of who was interviewed about what, the key points "
    "of the answers, anything agreed, follow-ups, and chapters by question.",
    "lecture": "Write a short summary of the lecture, its key points and definitions, any "
    "assignments or deadlines as action items, and chapters by topic.",
    "one-to-one": "Write a short summary of the conversation, the key points, what was "
    "agreed, the action items for each person, and chapters by topic.",
}


@dataclass
class Point:
    text: str
    lines: list[int]  # indices into the transcript's segments
    owner: str | None = None
    due: str | None = None

    @property
    def supported(self) -> bool:
        return bool(self.lines)


@dataclass
class Chapter:
    title: str
    line: int


@dataclass
class Notes:
    summary: str
    key_points: list[Point] = field(default_factory=list)
    decisions: list[Point] = field(default_factory=list)
    action_items: list[Point] = field(default_factory=list)
    chapters: list[Chapter] = field(default_factory=list)
    unsupported: list[tuple[str, Point]] = field(default_factory=list)  # (kind, point)
    model: str = ""
    template: str = "meeting"
    dropped: int = 0  # citations of lines that do not exist, taken out

    def to_dict(self, transcript: Transcript) -> dict:
        """The notes as stored with the transcript and written as JSON: the documented shape
        (summary, key_points, decisions, action_items with a start time, chapters, model),
        plus ``cited`` (the start times of the lines each point cites) and ``unsupported``
        (points that cited no line that exists, kept for the user to check)."""
        seg = transcript.segments

        def starts(p: Point) -> list[float]:
            return [seg[i].start for i in p.lines]

        return {
            "summary": self.summary,
            "key_points": [p.text for p in self.key_points],
            "decisions": [p.text for p in self.decisions],
            "action_items": [
                {"text": p.text, "owner": p.owner, "due": p.due, "start": seg[p.lines[0]].start}
                for p in self.action_items
            ],
            "chapters": [{"title": c.title, "start": seg[c.line].start} for c in self.chapters],
            "model": self.model,
            "template": self.template,
            "cited": {k: [starts(p) for p in getattr(self, k)] for k in KINDS},
            "unsupported": [{"kind": k, "text": p.text} for k, p in self.unsupported],
            "dropped_citations": self.dropped,
        }


def template_text(name: str, folder: Path | None = None) -> str:
    """What the template asks for: the user's own file, else the built-in one."""
    if folder is None:
        from ..paths import data_dir

        folder = data_dir() / "notes-templates"
    safe = "".join(c for c in name if c.isalnum() or c in "-_")[:40]
    own = folder / f"{safe}.txt"
    if safe and own.is_file():
        return own.read_text("utf-8", errors="replace")[:2000].strip()
    if name not in TEMPLATES:
        raise LLMError(
            f"no notes template {name!r}: choose {', '.join(TEMPLATES)}, or write your own "
            f"in {folder}{'/'}{safe or 'NAME'}.txt"
        )
    return TEMPLATES[name]


def numbered_lines(transcript: Transcript) -> list[str]:
    out = []
    for i, s in enumerate(transcript.segments):
        who = f" {transcript.speaker_name(s.speaker)}:" if s.speaker else ""
        out.append(f"[{i}] {format_timestamp(s.start)[:-4]}{who} {s.text.strip()}")
    return out


def parts_of(lines: list[str], budget_chars: int) -> list[tuple[int, int]]:
    """(first, end) line ranges of at most ``budget_chars`` characters each (a longer line
    is a part of its own)."""
    parts, start, size = [], 0, 0
    for i, line in enumerate(lines):
        if size and size + len(line) + 1 > budget_chars:
            parts.append((start, i))
            start, size = i, 0
        size += len(line) + 1
    if start < len(lines):
        parts.append((start, len(lines)))
    return parts


def budget(context: int) -> tuple[int, int]:
    """(characters of transcript per request, tokens of reply) for a context of ``context``
    tokens: the reply gets up to half, the instructions about 200 tokens, and a token is
    taken as 2.5 characters (safe for English and most languages Whisper writes; the
    reply's grammar needs no context)."""
    reply = max(128, min(2000, context // 2))
    return max(120, int((context - reply - 220) * 2.5)), reply


def check(raw: dict, transcript: Transcript, first: int, end: int) -> Notes:
    """``raw`` (the model's JSON) as notes whose every citation is a line in [first, end)."""
    speakers = {transcript.speaker_name(s).lower(): transcript.speaker_name(s)
                for s in transcript.speaker_ids()}  # fmt: skip
    notes = Notes(summary=str(raw.get("summary", "")).strip()[:2000])

    def cleaned(value, limit: int) -> str | None:
        text = " ".join(str(value or "").split())[:limit]
        return text or None

    for kind in KINDS:
        items = raw.get(kind)
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not cleaned(item.get("text"), 1):
                continue
            cited = item.get("lines") if isinstance(item.get("lines"), list) else []
            good = sorted({n for n in cited if _int(n) and first <= n < end})
            notes.dropped += len(cited) - len(good)
            point = Point(cleaned(item["text"], 400) or "", good)
            if kind == "action_items":
                point.owner = speakers.get((cleaned(item.get("owner"), 60) or "").lower())
                point.due = cleaned(item.get("due"), 60)
            if good:
                getattr(notes, kind).append(point)
            else:
                notes.unsupported.append((kind, point))
    chapters = raw.get("chapters")
    seen: set[int] = set()
    for item in chapters if isinstance(chapters, list) else []:
        if not isinstance(item, dict) or not cleaned(item.get("title"), 1):
            continue
        line = item.get("line")
        if not (_int(line) and first <= line < end) or line in seen:
            notes.dropped += 1
            continue
        seen.add(line)
        notes.chapters.append(Chapter(cleaned(item["title"], 120) or "", line))
    notes.chapters.sort(key=lambda c: c.line)
    _drop_repeats(notes)
    return notes


def _drop_repeats(notes: Notes) -> None:
    """A point said twice (a small model repeats itself; parts repeat each other) is kept
    once, with the citations of both."""
    for kind in KINDS:
        kept: dict[str, Point] = {}
        for p in getattr(notes, kind):
            key = " ".join(p.text.lower().split())
            if key in kept:
                kept[key].lines = sorted(set(kept[key].lines) | set(p.lines))
            else:
                kept[key] = p
        setattr(notes, kind, list(kept.values()))
    seen: set[tuple[str, str]] = set()
    unsupported = []
    for kind, p in notes.unsupported:
        key = (kind, " ".join(p.text.lower().split()))
        if key not in seen:
            seen.add(key)
            unsupported.append((kind, p))
    notes.unsupported = unsupported


def _int(n) -> bool:
    return isinstance(n, int) and not isinstance(n, bool)


def write_notes(
    transcript: Transcript,
    endpoint: Endpoint,
    *,
    template: str = "meeting",
    language: str = "the transcript's language",
    context: int = 8192,
    progress: Callable[[int, int], None] | None = None,
    on_text: Callable[[str], None] | None = None,
    cancel: threading.Event | None = None,
    templates_dir: Path | None = None,
) -> Notes:
    """Notes of ``transcript`` by the model at ``endpoint``, whose context holds ``context``
    tokens (see the module docstring). ``progress(done, total)`` counts requests,
    ``on_text`` gets the reply as it streams."""
    focus = template_text(template, templates_dir)
    lines = numbered_lines(transcript)
    merged = Notes(summary="", model=endpoint.model, template=template)
    if not lines:
        return merged
    chars, reply = budget(context)
    parts = parts_of(lines, chars)
    steps = len(parts) + (1 if len(parts) > 1 else 0)
    system = {"role": "system", "content": SYSTEM.format(focus=focus, language=language)}
    summaries = []
    for n, (first, end) in enumerate(parts):
        if cancel is not None and cancel.is_set():
            raise LLMCancelled("notes cancelled")
        text = "\n".join(lines[first:end])
        raw = chat_json(endpoint, [system, {"role": "user", "content": text}],
                        schema_for(reply), max_tokens=reply, cancel=cancel,
                        on_text=on_text)  # fmt: skip
        part = check(raw, transcript, first, end)
        summaries.append(part.summary)
        for kind in (*KINDS, "chapters", "unsupported"):
            getattr(merged, kind).extend(getattr(part, kind))
        _drop_repeats(merged)
        merged.dropped += part.dropped
        if progress is not None:
            progress(n + 1, steps)
    if len(summaries) == 1:
        merged.summary = summaries[0]
    else:
        merged.summary = _summary_of(summaries, endpoint, system, chars, reply, cancel, on_text)
        if progress is not None:
            progress(steps, steps)
    return merged


def _summary_of(summaries, endpoint, system, chars, reply, cancel, on_text) -> str:
    """One summary of the parts' summaries, in order; what does not fit the context is
    summarised in rounds."""
    while True:
        groups = parts_of([s or "-" for s in summaries], chars)
        out = []
        for first, end in groups:
            ask = "Summarise these summaries of one recording's parts, in order:\n\n" + (
                "\n\n".join(summaries[first:end])
            )
            raw = chat_json(endpoint, [system, {"role": "user", "content": ask}],
                            summary_schema(reply), max_tokens=reply, cancel=cancel,
                            on_text=on_text, name="summary")  # fmt: skip
            out.append(" ".join(str(raw.get("summary", "")).split())[:2000])
        if len(out) == 1 or len(out) >= len(summaries):
            return " ".join(out)[:4000]
        summaries = out


def render_markdown(notes: Notes, transcript: Transcript) -> str:
    """The notes as Markdown, as exports write them (``transcript.export.notes_markdown``)."""
    from ..transcript.export import notes_markdown

    return notes_markdown(notes.to_dict(transcript))
