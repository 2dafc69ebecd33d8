"""Meeting notes from a transcript: a summary, decisions and action items, each point citing
the lines of the transcript it comes from, checked against the transcript before anyone sees
it.

The reply is asked for as JSON that follows ``SCHEMA``, whose every string and list is
bounded: a server that turns the schema into a grammar (llama.cpp does) then closes the JSON
within ``max_tokens`` even when a small model repeats itself, which SmolLM2-135M does until it
runs out of tokens.

The model reads the transcript as numbered lines (``[12] 3:05 Anna: …``) and cites line
numbers, never times: a number is easy to check and maps to the line's own start time. A
citation of a line that does not exist is dropped, a point left with none is kept and marked
unsupported, an owner who is not a speaker of the transcript is cleared. A transcript longer
than the model's context is read in parts that each get notes, then the parts' summaries are
summarised once more (the decisions and action items of every part are kept as they are).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from ..transcript import Transcript
from ..transcript.export import format_timestamp
from .endpoint import Endpoint, LLMCancelled, chat_json

ITEM = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "maxLength": 200},
        "owner": {"type": "string", "maxLength": 60},
        "lines": {"type": "array", "items": {"type": "integer"}, "maxItems": 4},
    },
    "required": ["text", "lines"],
}
SCHEMA = {
    "type": "object",
    "properties": {
        "summary": {"type": "string", "maxLength": 600},
        "decisions": {"type": "array", "items": ITEM, "maxItems": 5},
        "action_items": {"type": "array", "items": ITEM, "maxItems": 5},
    },
    "required": ["summary", "decisions", "action_items"],
}
SUMMARY_SCHEMA = {
    "type": "object",
    "properties": {"summary": {"type": "string", "maxLength": 1200}},
    "required": ["summary"],
}
SYSTEM = (
    "You write meeting notes from a transcript. Each transcript line starts with its number "
    "in brackets. Write a short summary, the decisions made and the action items (who does "
    "what). For every decision and action item give the numbers of the lines it comes from. "
    "Use only what the transcript says. Answer in {language}."
)


@dataclass
class Point:
    text: str
    lines: list[int]  # indices into the transcript's segments
    owner: str | None = None
    supported: bool = True  # False: the model cited no line that exists

    def times(self, transcript: Transcript) -> list[float]:
        return [transcript.segments[i].start for i in self.lines]


@dataclass
class Notes:
    summary: str
    decisions: list[Point] = field(default_factory=list)
    action_items: list[Point] = field(default_factory=list)
    model: str = ""
    dropped: int = 0  # citations of lines that do not exist, taken out

    def to_dict(self) -> dict:
        def points(ps):
            return [{"text": p.text, "lines": p.lines, "owner": p.owner,
                     "supported": p.supported} for p in ps]  # fmt: skip

        return {
            "summary": self.summary,
            "decisions": points(self.decisions),
            "action_items": points(self.action_items),
            "model": self.model,
            "dropped_citations": self.dropped,
        }


def numbered_lines(transcript: Transcript) -> list[str]:
    out = []
    for i, s in enumerate(transcript.segments):
        who = f" {transcript.speaker_name(s.speaker)}:" if s.speaker else ""
        out.append(f"[{i}] {format_timestamp(s.start)[:-4]}{who} {s.text.strip()}")
    return out


def parts_of(lines: list[str], budget_chars: int) -> list[tuple[int, int]]:
    """(first, end) line ranges of at most ``budget_chars`` characters each."""
    parts, start, size = [], 0, 0
    for i, line in enumerate(lines):
        if size and size + len(line) + 1 > budget_chars:
            parts.append((start, i))
            start, size = i, 0
        size += len(line) + 1
    if start < len(lines):
        parts.append((start, len(lines)))
    return parts


def check(raw: dict, transcript: Transcript, first: int, end: int) -> Notes:
    """``raw`` (the model's JSON) as notes whose every citation is a line in [first, end)."""
    speakers = {transcript.speaker_name(s).lower(): transcript.speaker_name(s)
                for s in transcript.speaker_ids()}  # fmt: skip
    notes = Notes(summary=str(raw.get("summary", "")).strip()[:2000])

    def points(items) -> list[Point]:
        out = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not str(item.get("text", "")).strip():
                continue
            cited = item.get("lines") if isinstance(item.get("lines"), list) else []
            good = sorted({int(n) for n in cited if isinstance(n, int) and first <= n < end})
            notes.dropped += len(cited) - len(good)
            owner = speakers.get(str(item.get("owner") or "").strip().lower())
            out.append(Point(str(item["text"]).strip()[:400], good, owner, bool(good)))
        return out

    notes.decisions = points(raw.get("decisions"))
    notes.action_items = points(raw.get("action_items"))
    return notes


def write_notes(
    transcript: Transcript,
    endpoint: Endpoint,
    *,
    language: str = "the transcript's language",
    budget_chars: int = 12000,
    max_tokens: int = 1200,
    progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
) -> Notes:
    """Notes of ``transcript`` by the model at ``endpoint`` (see the module docstring)."""
    lines = numbered_lines(transcript)
    if not lines:
        return Notes(summary="", model=endpoint.model)
    parts = parts_of(lines, budget_chars)
    steps = len(parts) + (1 if len(parts) > 1 else 0)
    system = {"role": "system", "content": SYSTEM.format(language=language)}
    merged = Notes(summary="", model=endpoint.model)
    summaries = []
    for n, (first, end) in enumerate(parts):
        if cancel is not None and cancel.is_set():
            raise LLMCancelled("notes cancelled")
        text = "\n".join(lines[first:end])
        raw = chat_json(endpoint, [system, {"role": "user", "content": text}], SCHEMA,
                        max_tokens=max_tokens, cancel=cancel)  # fmt: skip
        part = check(raw, transcript, first, end)
        summaries.append(part.summary)
        merged.decisions += part.decisions
        merged.action_items += part.action_items
        merged.dropped += part.dropped
        if progress is not None:
            progress(n + 1, steps)
    if len(summaries) == 1:
        merged.summary = summaries[0]
    else:
        ask = "Summarise these summaries of one meeting's parts, in order:\n\n" + "\n\n".join(
            summaries
        )
        raw = chat_json(endpoint, [system, {"role": "user", "content": ask}], SUMMARY_SCHEMA,
                        max_tokens=max_tokens, cancel=cancel)  # fmt: skip
        merged.summary = str(raw.get("summary", "")).strip()[:2000]
        if progress is not None:
            progress(steps, steps)
    return merged


def render_markdown(notes: Notes, transcript: Transcript) -> str:
    """The notes as Markdown, each point with the times of the lines it cites."""

    def cite(p: Point) -> str:
        if not p.supported:
            return " _(no line of the transcript cited: check it)_"
        return " (" + ", ".join(format_timestamp(t)[:-4] for t in p.times(transcript)) + ")"

    out = ["# Notes", "", notes.summary or "_(no summary)_", ""]
    for title, points in (("Decisions", notes.decisions), ("Action items", notes.action_items)):
        out += [f"## {title}", ""]
        if not points:
            out.append("_none_")
        for p in points:
            who = f"**{p.owner}**: " if p.owner else ""
            out.append(f"- {who}{p.text}{cite(p)}")
        out.append("")
    out.append(f"_Written by {notes.model}, a language model on this computer; check it "
               "against the transcript._")  # fmt: skip
    return "\n".join(out) + "\n"
