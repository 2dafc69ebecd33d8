"""Ask: a question about one transcript or several, answered by a language model that cites
the lines its answer comes from, each citation checked before anyone sees it.

A model's context holds far less than a library, so the lines are retrieved first: every
line is scored against the question's words (BM25 over the lines of all the transcripts
asked about) and the best ones go in with a neighbour either side, until the context's
budget (``notes.budget``) is used. One transcript asked about alone is then filled up with
its other lines in order, as its whole text usually fits; lines of several recordings are
kept to what matched, so a small model is not led astray by recordings that have nothing
to say. A question that shares no word with any line (another language, a vague one) is
shown the transcripts from their start.

The model sees the chosen lines numbered from 0 across all the transcripts, under each
recording's title, and answers ``{"answer": …, "lines": […]}``; a number it cites maps back
to (item, segment, start time). A number that was not shown is dropped, and an answer left
with no citation is marked ``unsupported``: front ends show it as the model's guess, not as
what the recordings say.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..errors import DeskScribeError
from ..transcript import Transcript
from .endpoint import Endpoint, LLMCancelled, LLMError, chat_json
from .notes import budget, numbered_lines

MAX_QUESTION = 500  # characters of a question
MAX_ANSWER = 400  # characters of an answer (the schema's bound, so a small model stops)
MAX_CITED = 5
REPLY_TOKENS = 300  # an answer of MAX_ANSWER characters and its line numbers fit
SCHEMA = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "maxLength": MAX_ANSWER},
        "lines": {"type": "array", "items": {"type": "integer"}, "maxItems": MAX_CITED},
    },
    "required": ["answer", "lines"],
}
SYSTEM = (
    "You answer a question about recordings from lines of their transcripts. Each line "
    "starts with its number in brackets; the lines under a heading that starts with ## come "
    "from the recording named there. Answer briefly, using only what the lines say, in the "
    "language the question is asked in, and give the numbers of the lines the answer comes "
    "from. If the lines do not answer the question, say so and give no numbers."
)
# Words too common to tell lines apart (English; other languages rely on BM25's weights).
_COMMON = (
    "a an and are as at be been but by can could did do does for from had has have he her "
    "his how i if in is it its me my of on or our say said she should so tell that the their "
    "them there they this to us was we were what when where which who whom why will with "
    "would you your about any some"
)
STOPWORDS = frozenset(_COMMON.split())
NEIGHBOURS = 1  # lines shown either side of a line that matched


class NothingToAsk(DeskScribeError):
    """No transcript to ask: none was given, or none in the library matches the question."""


@dataclass
class Citation:
    """A line an answer cites: its recording (library item id, or None for a file), its
    index among the transcript's segments, and the segment's start in seconds."""

    item_id: int | None
    line: int
    start: float
    title: str
    text: str = ""

    def to_dict(self) -> dict:
        return {"item_id": self.item_id, "line": self.line, "start": self.start,
                "title": self.title, "text": self.text}  # fmt: skip


@dataclass
class Answer:
    text: str
    citations: list[Citation] = field(default_factory=list)
    unsupported: bool = False  # no line that was shown backs it: the model's guess
    model: str = ""
    question: str = ""
    dropped: int = 0  # citations of lines the model was not shown, taken out
    sources: list[tuple[int | None, str]] = field(default_factory=list)  # what was read

    def to_dict(self) -> dict:
        return {
            "question": self.question,
            "answer": self.text,
            "citations": [c.to_dict() for c in self.citations],
            "unsupported": self.unsupported,
            "model": self.model,
            "dropped_citations": self.dropped,
            "sources": [{"item_id": i, "title": t} for i, t in self.sources],
        }


Source = tuple[int | None, str, Transcript]  # (library item id or None, title, transcript)


def check_question(question: str) -> str:
    """The question, trimmed; ``LLMError`` when it is empty or longer than ``MAX_QUESTION``."""
    text = " ".join(str(question).split())
    if not text:
        raise LLMError("the question is empty: write what you want to know")
    if len(text) > MAX_QUESTION:
        raise LLMError(
            f"the question is {len(text)} characters long: ask in at most {MAX_QUESTION} "
            "(ask several shorter questions)"
        )
    return text


def keywords(text: str) -> list[str]:
    """The words of ``text`` that tell lines apart: lower case, without accents, common
    English words left out, plural and -ing/-ed endings cut (so "hiking" meets "hike")."""
    plain = unicodedata.normalize("NFKD", text.lower())
    plain = "".join(c for c in plain if not unicodedata.combining(c))
    out = []
    for w in re.findall(r"\w+", plain):
        if w in STOPWORDS or (w.isdigit() and len(w) < 2):
            continue
        out.append(_stem(w))
    return out


def _stem(w: str) -> str:
    for end in ("ing", "ed", "es", "s"):
        if w.endswith(end) and len(w) - len(end) >= 3 and not w.endswith("ss"):
            return w[: -len(end)]
    return w


def retrieve(sources: Sequence[Source], question: str, budget_chars: int) -> list[tuple[int, int]]:
    """(source index, segment index) of the lines to show for ``question``, in reading
    order, within ``budget_chars`` characters of numbered lines (see the module docstring)."""
    lines = [numbered_lines(t) for _, _, t in sources]
    words = set(keywords(question))
    docs: list[tuple[int, int, Counter]] = []
    for s, (_, _, t) in enumerate(sources):
        for i, seg in enumerate(t.segments):
            who = t.speaker_name(seg.speaker) if seg.speaker else ""
            docs.append((s, i, Counter(keywords(f"{who} {seg.text}"))))
    scores = _bm25(docs, words)
    ranked = sorted((k for k, v in enumerate(scores) if v > 0), key=lambda k: -scores[k])
    order: list[tuple[int, int]] = []
    for k in ranked:
        s, i, _ = docs[k]
        order.append((s, i))
        order += [(s, j) for j in range(i - NEIGHBOURS, i + NEIGHBOURS + 1) if j != i]
    if not ranked:  # nothing matched: every transcript from its start, in turn
        longest = max((len(x) for x in lines), default=0)
        order = [(s, i) for i in range(longest) for s in range(len(lines))]
    elif len(sources) == 1:
        order += [(0, i) for i in range(len(lines[0]))]
    chosen: set[tuple[int, int]] = set()
    size = 0
    for s, i in order:
        if (s, i) in chosen or not 0 <= i < len(lines[s]):
            continue
        cost = len(lines[s][i]) + 8
        if size + cost > budget_chars:
            if size:
                continue  # a shorter line further down may still fit
            cost = budget_chars  # one line longer than the budget is shown, cut
        chosen.add((s, i))
        size += cost
    return sorted(chosen)


def _bm25(docs: list[tuple[int, int, Counter]], words: set[str]) -> list[float]:
    if not docs or not words:
        return [0.0] * len(docs)
    n = len(docs)
    avg = sum(sum(c.values()) for *_, c in docs) / n or 1.0
    df = {w: sum(1 for *_, c in docs if w in c) for w in words}
    idf = {w: math.log(1 + (n - d + 0.5) / (d + 0.5)) for w, d in df.items()}
    out = []
    for *_, c in docs:
        length = sum(c.values())
        score = 0.0
        for w in words:
            f = c.get(w, 0)
            if f:
                score += idf[w] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / avg))
        out.append(score)
    return out


def prompt(sources: Sequence[Source], shown: list[tuple[int, int]], budget_chars: int):
    """(the text the model reads, one ``Citation`` per number it may cite)."""
    text: list[str] = []
    cites: list[Citation] = []
    numbered = {s: numbered_lines(sources[s][2]) for s in {s for s, _ in shown}}
    last: tuple[int, int] | None = None
    for s, i in shown:
        item_id, title, transcript = sources[s]
        if last is None or last[0] != s:
            text.append(f"\n## {title}")
        elif i != last[1] + 1:
            text.append("…")
        body = numbered[s][i].split("] ", 1)[1][:budget_chars]
        text.append(f"[{len(cites)}] {body}")
        seg = transcript.segments[i]
        cites.append(Citation(item_id, i, seg.start, title, " ".join(seg.text.split())))
        last = (s, i)
    return "\n".join(text).strip(), cites


def check_answer(raw: dict, shown: list[Citation], model: str = "") -> Answer:
    """``raw`` (the model's JSON) as an answer whose every citation is a line it was shown;
    numbers it was not shown are dropped, an answer left with none is ``unsupported``."""
    text = " ".join(str(raw.get("answer", "") if isinstance(raw, dict) else "").split())
    cited = raw.get("lines") if isinstance(raw, dict) else None
    cited = cited if isinstance(cited, list) else []
    good: list[int] = []
    for n in cited:
        ok = isinstance(n, int) and not isinstance(n, bool) and 0 <= n < len(shown)
        if ok and n not in good:
            good.append(n)
    answer = Answer(text=text[: MAX_ANSWER * 2], model=model)
    answer.citations = [shown[n] for n in sorted(good)]
    answer.dropped = len(cited) - len(good)
    answer.unsupported = not answer.citations or not text
    return answer


def ask_transcripts(
    sources: Sequence[Source],
    question: str,
    endpoint: Endpoint,
    *,
    context: int = 8192,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Answer:
    """The answer of the model at ``endpoint`` (whose context holds ``context`` tokens) to
    ``question`` about ``sources`` ((item id or None, title, transcript) each), its
    citations checked. ``on_text`` gets the reply as it streams, ``cancel`` stops it
    (``LLMCancelled``), ``progress(done, total)`` counts the one request."""
    question = check_question(question)
    sources = [x for x in sources if x[2].segments]
    if not sources:
        raise NothingToAsk("the transcripts asked about have no text: transcribe them first")
    if cancel is not None and cancel.is_set():
        raise LLMCancelled("question cancelled")
    chars, reply = budget(context)
    chars = max(120, chars - len(question) - sum(len(t) + 8 for _, t, _ in sources))
    shown = retrieve(sources, question, chars)
    text, cites = prompt(sources, shown, chars)
    if progress is not None:
        progress(0, 1)
    messages = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"{text}\n\nQuestion: {question}"},
    ]
    raw = chat_json(endpoint, messages, SCHEMA, max_tokens=min(reply, REPLY_TOKENS),
                    cancel=cancel, on_text=on_text, name="answer")  # fmt: skip
    answer = check_answer(raw, cites, endpoint.model)
    answer.question = question
    answer.sources = [(item_id, title) for item_id, title, _ in sources]
    if progress is not None:
        progress(1, 1)
    return answer
