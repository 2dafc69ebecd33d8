"""A transcript in another language, segment by segment, by a language model: each segment
keeps its times, id and speaker and its original text, and gets ``translations[language]``,
a second track from which subtitles and exports in that language are rendered
(``Transcript.translated``).

The model is shown the segments as numbered lines (``[12] text``), in batches that fit its
context (``budget``), each batch after the line before it, marked as context not to
translate. It answers JSON that follows ``schema(...)``: ``{"lines": [{"n": 12, "text":
"…"}]}``, one item per line of the batch with its number fixed, so that a server that turns
the schema into a grammar (llama.cpp does) leaves a small model only the texts to write. The
reply is stopped as it streams once it is longer than the batch's translations may be
(``limit_of``), so a model that repeats itself costs a bounded time; what it wrote by then,
or a reply cut off or broken, is read item by item (``salvage``). Then it is checked
(``check_reply``): only numbers of the batch count, each once, an empty text is no
translation. A line the model skipped, left empty, or whose item was lost is asked again on
its own, once; a line still without one is left without a translation (``untranslated``
lists them) and keeps its original text in the exports. Empty segments are not sent.
Cancel stops between pieces of a reply (``LLMCancelled``); the caller's transcript is never
changed (the result is a copy, made at the end).
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable

from ..errors import DeskScribeError
from ..transcript import Transcript
from .endpoint import Endpoint, LLMCancelled, LLMError, chat_json

MAX_KEY = 20  # characters of a language key ("fr", "pt-br", "klingon")
MAX_BATCH = 16  # lines per request at most: small models lose count in longer lists
MAX_TEXT = 2000  # characters of one translated line at most
SYSTEM = (
    "You are a translator. Translate each numbered line of a transcript into {name}. "
    "Answer with every numbered line: its number and its translation into {name}, nothing "
    "else. Keep the meaning and the tone; keep names as they are. Do not translate the "
    "context line; it only shows what was said before."
)
_KEY = re.compile(r"[a-z][a-z_-]*")
_NUMBER = re.compile(r"^\s*\[?\s*\d+\s*[\]\.:)]\s*")  # "[12] ", "12. ": an echoed number


class LanguageError(DeskScribeError, ValueError):
    """A target language that cannot be a translation's key."""


def language_key(language: str) -> str:
    """The key a translation is stored under: ``language`` lower-cased ("fr", "pt-br",
    "french"); ``LanguageError`` for anything but letters, '-' and '_', or longer than
    ``MAX_KEY`` characters."""
    key = str(language or "").strip().lower()
    if not key or len(key) > MAX_KEY or not _KEY.fullmatch(key):
        raise LanguageError(
            f"{str(language)[:40]!r} is not a language: give a name or code of letters, '-' "
            f"and '_' (at most {MAX_KEY} characters), such as fr, de, pt-br or French"
        )
    return key


def limit_of(text: str) -> int:
    """Characters a translation of ``text`` may take: half as long again, and some."""
    return min(MAX_TEXT, int(1.5 * len(text)) + 30)


def schema(lines: dict[int, str]) -> dict:
    """The reply's JSON schema for ``lines`` (number -> text): one item per line, in order,
    its number fixed: a grammar made of it leaves the model only the texts to write. The
    texts are not bounded here (a ``maxLength`` grammar made llama.cpp four times slower per
    token); the reply is stopped as it streams instead (``_ask``)."""
    items = [
        {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "const": n},
                "text": {"type": "string"},
            },
            "required": ["n", "text"],
        }
        for n, text in lines.items()
    ]
    return {
        "type": "object",
        "properties": {
            "lines": {
                "type": "array",
                "prefixItems": items,
                "minItems": len(items),
                "maxItems": len(items),
            }
        },
        "required": ["lines"],
    }


def check_reply(raw: object, numbers: list[int], limit: int = MAX_TEXT) -> dict[int, str]:
    """The translations in the model's reply ``raw`` of the lines ``numbers``: number ->
    text. Anything else is left out: items that are not objects, numbers not asked for (or
    not integers), a number given twice (the first counts), texts that are empty once
    whitespace is folded (or not strings). An echoed line number before a text ("[3] …") is
    taken off; texts are cut to ``limit`` characters."""
    wanted = set(numbers)
    out: dict[int, str] = {}
    items = raw.get("lines") if isinstance(raw, dict) else None
    for item in items if isinstance(items, list) else []:
        if not isinstance(item, dict):
            continue
        n, text = item.get("n"), item.get("text")
        if not isinstance(n, int) or isinstance(n, bool) or n not in wanted or n in out:
            continue
        if not isinstance(text, str):
            continue
        text = " ".join(_NUMBER.sub("", text, count=1).split())[:limit].strip()
        if text:
            out[n] = text
    return out


def batches(
    texts: dict[int, str], budget_chars: int, max_lines: int = MAX_BATCH
) -> list[list[int]]:
    """The numbers of ``texts`` (in order) in runs of at most ``budget_chars`` characters
    and ``max_lines`` lines (a longer line is a run of its own)."""
    out: list[list[int]] = []
    run: list[int] = []
    size = 0
    for n, text in texts.items():
        cost = len(text) + 20  # and the JSON around its translation
        if run and (size + cost > budget_chars or len(run) >= max_lines):
            out.append(run)
            run, size = [], 0
        run.append(n)
        size += cost
    if run:
        out.append(run)
    return out


def budget(context: int) -> tuple[int, int]:
    """(characters of lines per request, tokens of reply) for a context of ``context``
    tokens. The instructions and the context line take about 300 tokens; the lines get
    half the rest in characters (a token is taken as 2.5 characters of them, safe for
    English), and the reply what is left: a translation may be half as long again as its
    line (``limit_of``), and a grammar's reply takes a token per character at worst."""
    room = max(120, context - 300)
    chars = max(60, room // 2)
    return chars, max(100, room - (chars * 2 + 4) // 5)


def untranslated(transcript: Transcript, language: str) -> list[int]:
    """The indices of segments with text but no translation into ``language``."""
    key = language_key(language)
    return [i for i, s in enumerate(transcript.segments)
            if s.text.strip() and not s.translations.get(key)]  # fmt: skip


def translate_transcript(
    transcript: Transcript,
    language: str,
    endpoint: Endpoint,
    *,
    name: str | None = None,
    context: int = 8192,
    progress: Callable[[int, int], None] | None = None,
    cancel: threading.Event | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Transcript:
    """A copy of ``transcript`` whose segments carry ``translations[language_key(language)]``
    (see the module docstring); ``transcript`` itself is not changed. ``name`` is the
    language as the model is told it ("French"; default: ``language`` as given).
    ``context``: the tokens the model's context holds. ``progress(done, total)`` counts the
    lines with text, done when their batch (and its second asks) is; ``on_text`` gets the
    reply as it streams. The segments the model left without a translation:
    ``untranslated(result, language)``. A translation of that language the transcript had
    already is replaced (or removed, for a line not translated this time)."""
    key = language_key(language)
    name = " ".join(str(name or language).split())[:60] or key
    texts = {i: " ".join(s.text.split()) for i, s in enumerate(transcript.segments)}
    texts = {i: t for i, t in texts.items() if t}
    chars, reply = budget(context)
    system = {"role": "system", "content": SYSTEM.format(name=name)}
    done: dict[int, str] = {}
    finished = 0
    for run in batches(texts, chars):
        got = _ask(run, texts, system, name, endpoint, reply, cancel, on_text)
        for n in run:
            # Skipped, empty, lost or too long: asked again alone, once, without the line
            # before (at temperature 0 the same request would get the same reply).
            if n not in got and (len(run) > 1 or _before(n, texts) >= 0):
                got.update(_ask([n], texts, system, name, endpoint, reply, cancel, on_text,
                                context_line=False))  # fmt: skip
        done.update(got)
        finished += len(run)
        if progress is not None:
            progress(finished, len(texts))
    out = copy.deepcopy(transcript)
    for i, seg in enumerate(out.segments):
        seg.translations.pop(key, None)
        if i in done:
            seg.translations[key] = done[i]
    return out


def _before(n: int, texts: dict[int, str]) -> int:
    """The number of the line with text before line ``n``; -1 for none."""
    return max((i for i in texts if i < n), default=-1)


def _ask(run, texts, system, name, endpoint, reply, cancel, on_text, *,
         context_line: bool = True) -> dict[int, str]:  # fmt: skip
    """The translations of the lines ``run`` that one request gets. The reply is stopped
    once it is longer than its lines' translations may be (``limit_of`` each, and the JSON
    around them); what it holds by then, or when it is cut off or broken, is read item by
    item (``salvage``)."""
    if cancel is not None and cancel.is_set():
        raise LLMCancelled("translation cancelled")
    lines = {n: texts[n] for n in run}
    cap = sum(limit_of(t) for t in lines.values()) + 40 * len(run)  # characters of reply
    before = _before(run[0], texts) if context_line else -1
    ask = ""
    if before >= 0:
        ask = f"Context, do not translate: {texts[before][:250]}\n\n"
    ask += f"Translate into {name}:\n" + "\n".join(f"[{n}] {texts[n]}" for n in run)
    streamed: list[str] = []
    size = 0
    stop = threading.Event()  # the caller's cancel, or enough written

    def piece(text: str) -> None:
        nonlocal size
        streamed.append(text)
        size += len(text)
        if on_text is not None:
            on_text(text)
        if size > cap or (cancel is not None and cancel.is_set()):
            stop.set()

    try:
        raw = chat_json(endpoint, [system, {"role": "user", "content": ask}], schema(lines),
                        max_tokens=min(reply, cap), cancel=stop, on_text=piece,
                        name="translation")  # fmt: skip
    except LLMCancelled:
        if cancel is not None and cancel.is_set():
            raise LLMCancelled("translation cancelled") from None
        raw = salvage("".join(streamed))  # stopped: it went on too long
    except LLMError as err:
        # A reply that is not the JSON asked for (cut off at max_tokens, or garbage) costs
        # what it lacks only; a server that failed (down, refused the key, …) stops all.
        if err.__cause__ is not None:
            raise
        raw = salvage("".join(streamed))
    return check_reply(raw, run)


def salvage(text: str) -> dict:
    """The whole items (``{"n": …, "text": …}``) of a reply that was cut off or broken, as
    ``{"lines": [...]}``; an item still being written is left out."""
    decoder = json.JSONDecoder()
    items = []
    start = text.find("[")
    pos = text.find("{", start + 1) if start >= 0 else -1
    while pos >= 0:
        try:
            value, end = decoder.raw_decode(text, pos)
        except ValueError:
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict) and "n" in value and "text" in value:
            items.append(value)
            pos = text.find("{", end)
        else:
            pos = text.find("{", pos + 1)
    return {"lines": items}
