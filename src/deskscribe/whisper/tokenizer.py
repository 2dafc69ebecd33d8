"""Whisper tokenizer on ``tokenizer.json`` (the `tokenizers` library).

Special token ids are looked up in the tokenizer itself, never taken from config files:
English-only and multilingual vocabularies place them differently.
"""

from __future__ import annotations

import string
from functools import cached_property
from pathlib import Path

from tokenizers import Tokenizer as _HFTokenizer

from ..errors import DeskScribeError


class TokenizerError(DeskScribeError):
    pass


class WhisperTokenizer:
    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        if not path.exists():
            raise TokenizerError(
                f"{path} is missing: the model folder is incomplete; rebuild the model"
            )
        self._tok = _HFTokenizer.from_file(str(path))
        self.eot = self._required("<|endoftext|>")
        self.sot = self._required("<|startoftranscript|>")
        self.translate = self._required("<|translate|>")
        self.transcribe = self._required("<|transcribe|>")
        self.sot_prev = self._required("<|startofprev|>")
        self.sot_lm = self._tok.token_to_id("<|startoflm|>")
        self.no_timestamps = self._required("<|notimestamps|>")
        no_speech = self._tok.token_to_id("<|nospeech|>")
        self.no_speech = no_speech if no_speech is not None else self._required("<|nocaptions|>")
        self.timestamp_begin = self.no_timestamps + 1
        # Language tokens sit between <|startoftranscript|> and <|translate|>.
        self.language_ids: dict[str, int] = {}
        for token_id in range(self.sot + 1, self.translate):
            token = self._tok.id_to_token(token_id)
            if token and token.startswith("<|") and token.endswith("|>"):
                self.language_ids[token[2:-2]] = token_id
        # English-only vocabularies also list language tokens; what tells them apart is the
        # size of the text vocabulary (GPT-2's 50256 tokens before <|endoftext|>).
        self.multilingual = self.eot > 50256 and len(self.language_ids) > 1

    def _required(self, token: str) -> int:
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise TokenizerError(f"tokenizer has no {token}: not a Whisper tokenizer")
        return token_id

    def sot_sequence(self, language: str | None, task: str = "transcribe") -> list[int]:
        seq = [self.sot]
        if self.multilingual:
            code = language or "en"
            if code not in self.language_ids:
                raise TokenizerError(
                    f"unknown language {code!r}; use one of: {', '.join(sorted(self.language_ids))}"
                )
            seq += [
                self.language_ids[code],
                self.translate if task == "translate" else self.transcribe,
            ]
        return seq

    def token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(token_id)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode([i for i in ids if i < self.eot], skip_special_tokens=False)

    def decode_with_timestamps(self, ids: list[int]) -> str:
        out, run = [], []
        for i in ids:
            if i >= self.timestamp_begin:
                out.append(self.decode(run))
                run = []
                out.append(f"<|{(i - self.timestamp_begin) * 0.02:.2f}|>")
            else:
                run.append(i)
        out.append(self.decode(run))
        return "".join(out)

    @cached_property
    def non_speech_tokens(self) -> list[int]:
        """Tokens of symbols that are not speech (openai/whisper's list), always suppressed."""
        symbols = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』')
        symbols += [
            "<<",
            ">>",
            "<<<",
            ">>>",
            "--",
            "---",
            "-(",
            "-[",
            "('",
            '("',
            "((",
            "))",
            "(((",
            ")))",
            "[[",
            "]]",
            "{{",
            "}}",
            "♪♪",
            "♪♪♪",
        ]
        miscellaneous = set("♩♪♫♬♭♮♯")
        result = {self.encode(" -")[0], self.encode(" '")[0]}
        for symbol in symbols + list(miscellaneous):
            for tokens in (self.encode(symbol), self.encode(" " + symbol)):
                if len(tokens) == 1 or symbol in miscellaneous:
                    result.add(tokens[0])
        return sorted(result)

    def split_to_word_tokens(self, ids: list[int]) -> tuple[list[str], list[list[int]]]:
        """Group text tokens into words (space-delimited, or per character run for CJK etc.)."""
        words, groups = self._split_unicode(ids)
        if self.multilingual and not _space_delimited(words):
            return words, groups
        merged_w: list[str] = []
        merged_t: list[list[int]] = []
        for word, toks in zip(words, groups, strict=True):
            if word.startswith(" ") or word.strip() in string.punctuation or not merged_w:
                merged_w.append(word)
                merged_t.append(list(toks))
            else:
                merged_w[-1] += word
                merged_t[-1].extend(toks)
        return merged_w, merged_t

    def _split_unicode(self, ids: list[int]) -> tuple[list[str], list[list[int]]]:
        """Split into the smallest runs of tokens that decode to whole characters."""
        words, groups, current = [], [], []
        full = self.decode(ids)
        offset = 0
        for token in ids:
            current.append(token)
            decoded = self.decode(current)
            if "\ufffd" not in decoded or full[offset + decoded.index("\ufffd")] == "\ufffd":
                words.append(decoded)
                groups.append(current)
                current = []
                offset += len(decoded)
        return words, groups


def _space_delimited(words: list[str]) -> bool:
    text = "".join(words)
    cjk = sum(
        1
        for ch in text
        if "\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff" or "\u0e00" <= ch <= "\u0e7f"
    )
    return cjk < max(1, len(text) // 4)
