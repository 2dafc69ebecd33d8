"""The prompt a window is decoded with: the user's vocabulary, then earlier text.

Whisper reads a prompt as text spoken before the window (``<|startofprev|>`` + at most
``n_text_ctx // 2 - 1`` tokens: 223 for every released model). Names and jargon in it are
spelled as written there, which is what a vocabulary is for. The vocabulary comes first and
is the same in every window (sequential path), chunk (batched path) and live pass; the
initial prompt and the previous text fill what room it leaves, newest tokens kept. A
vocabulary too long for the budget keeps its first words and says which were left out.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class _Encoder(Protocol):
    def encode(self, text: str) -> list[int]: ...


def prompt_budget(n_text_ctx: int) -> int:
    """Tokens a prompt may hold after ``<|startofprev|>`` (openai/whisper's rule)."""
    return n_text_ctx // 2 - 1


def parse_vocabulary(text: str | Iterable[str] | None) -> list[str]:
    """Words and phrases from "ComfyUI, Kubernetes, Dr. Okafor" (commas, semicolons or new
    lines between them); blanks and repeats (any case) dropped, order kept."""
    if text is None:
        return []
    pieces = re.split(r"[,;\n]", text) if isinstance(text, str) else list(text)
    seen: set[str] = set()
    words = []
    for piece in pieces:
        word = " ".join(str(piece).split())
        if word and word.lower() not in seen:
            seen.add(word.lower())
            words.append(word)
    return words


def vocabulary_text(words: list[str]) -> str:
    """The vocabulary as the prompt writes it (as earlier speech listing the words)."""
    return " " + ", ".join(words) + "." if words else ""


@dataclass
class PromptPlan:
    """What every window's prompt is built from (see :func:`plan_prompt`)."""

    budget: int
    vocabulary: list[int] = field(default_factory=list)  # tokens, the same in every window
    initial: list[int] = field(default_factory=list)  # the initial prompt's tokens
    kept: list[str] = field(default_factory=list)  # vocabulary words in the prompt
    dropped: list[str] = field(default_factory=list)  # ... and those that did not fit

    def prompt(self, previous: list[int]) -> list[int]:
        """The vocabulary, then as much of the tail of ``previous`` as fits the budget."""
        room = self.budget - len(self.vocabulary)
        return self.vocabulary + (previous[-room:] if room > 0 and previous else [])

    @property
    def note(self) -> str | None:
        """What to tell the user when words were left out; None when all fit."""
        if not self.dropped:
            return None
        return (
            f"vocabulary too long for Whisper's prompt ({self.budget} tokens): "
            f"used the first {len(self.kept)} of {len(self.kept) + len(self.dropped)} words; "
            f"left out: {', '.join(self.dropped)}"
        )


def plan_prompt(
    tokenizer: _Encoder,
    n_text_ctx: int,
    vocabulary: str | Iterable[str] | None = None,
    initial_prompt: str | None = None,
) -> PromptPlan:
    """Fit the vocabulary into the prompt budget, in the order given: words are kept until
    the next one would not fit; it and every later word are left out (``dropped``)."""
    budget = prompt_budget(n_text_ctx)
    words = parse_vocabulary(vocabulary)
    kept: list[str] = []
    tokens: list[int] = []
    if words:
        tokens = tokenizer.encode(vocabulary_text(words))
        if len(tokens) <= budget:
            kept = words
        else:  # the longest fitting head: binary search on the number of words
            lo, hi = 0, len(words)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if len(tokenizer.encode(vocabulary_text(words[:mid]))) <= budget:
                    lo = mid
                else:
                    hi = mid - 1
            kept = words[:lo]
            tokens = tokenizer.encode(vocabulary_text(kept)) if kept else []
    initial = tokenizer.encode(" " + initial_prompt.strip()) if initial_prompt else []
    return PromptPlan(budget, tokens, initial, kept, words[len(kept) :])


def vocabulary_checker(model_folder: Path) -> Callable[[str | None], PromptPlan]:
    """``plan_prompt`` with the tokenizer and context of a built model folder, for checking a
    vocabulary as it is typed (loading the tokenizer takes a moment: not on a UI thread)."""
    from .model import MANIFEST
    from .tokenizer import WhisperTokenizer

    dims = json.loads((model_folder / MANIFEST).read_text(encoding="utf-8"))["dims"]
    tokenizer = WhisperTokenizer(model_folder / "tokenizer.json")
    n_text_ctx = int(dims["n_text_ctx"])
    return lambda vocabulary: plan_prompt(tokenizer, n_text_ctx, vocabulary)
