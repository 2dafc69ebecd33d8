"""The language models DeskScribe offers for notes, questions and translation: GGUF files of
instruct models on the Hugging Face hub, run by the built-in llama.cpp server, and which one
suits this computer.

Sizes are those of the Q4_K_M files on the hub (approximate; the store asks the hub for the
exact size before it starts). ``memory_gb`` is what the model takes while it writes, with the
8192-token context the built-in server opens: the file plus its KV cache and buffers. Any
other hub repository holding a single-file GGUF chat model can be installed as well
(``deskscribe models download REPO --llm``, with ``REPO:QUANT`` to pick a quantization).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class LLMEntry:
    id: str  # short name on the command line
    repo_id: str
    file: str  # the GGUF file in the repo (``gguf_file`` falls back to the quant tag)
    size_mb: int
    memory_gb: float  # while writing, 8192-token context
    parameters_b: float
    licence: str
    good_for: str
    gated: bool = False  # the hub asks for a login and the licence accepted first


LLM_CATALOG: tuple[LLMEntry, ...] = (
    LLMEntry(
        "qwen2.5-7b-instruct",
        "bartowski/Qwen2.5-7B-Instruct-GGUF",
        "Qwen2.5-7B-Instruct-Q4_K_M.gguf",
        4680,
        6.5,
        7.6,
        "Apache-2.0",
        "the most careful notes of the list, in many languages; wants a GPU or 16 GB of memory",
    ),
    LLMEntry(
        "qwen3-4b-instruct",
        "unsloth/Qwen3-4B-Instruct-2507-GGUF",
        "Qwen3-4B-Instruct-2507-Q4_K_M.gguf",
        2500,
        4.0,
        4.0,
        "Apache-2.0",
        "good notes, questions and translation in many languages; the best fit for most laptops",
    ),
    LLMEntry(
        "llama-3.2-3b-instruct",
        "bartowski/Llama-3.2-3B-Instruct-GGUF",
        "Llama-3.2-3B-Instruct-Q4_K_M.gguf",
        2020,
        3.2,
        3.2,
        "Llama 3.2 Community License",
        "sound notes in English and seven other languages, on less memory",
    ),
    LLMEntry(
        "qwen2.5-1.5b-instruct",
        "Qwen/Qwen2.5-1.5B-Instruct-GGUF",
        "qwen2.5-1.5b-instruct-q4_k_m.gguf",
        1120,
        1.8,
        1.5,
        "Apache-2.0",
        "short summaries on computers with little free memory; misses more decisions",
    ),
)

# The offline starter (PyPI, llm.store.STARTER): listed with the catalog so that users see
# plainly what it is for.
STARTER_ID = "smollm2-135m"
STARTER_GOOD_FOR = (
    "offline starter for trying notes (pip package, no download); a 135M model writes poor "
    "notes: any model above writes far better ones"
)

DEFAULT_QUANT = "Q4_K_M"
_SPLIT = re.compile(r"-\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)


def find_llm_entry(name: str) -> LLMEntry | None:
    """A catalog entry by short id or by repo id."""
    for entry in LLM_CATALOG:
        if name in (entry.id, entry.repo_id):
            return entry
    return None


def split_source(source: str) -> tuple[str, str | None]:
    """``"owner/repo:Q5_K_M"`` -> ``("owner/repo", "Q5_K_M")``; no tag -> ``(source, None)``."""
    repo, sep, quant = source.partition(":")
    return (repo, quant or None) if sep else (source, None)


def is_split(name: str) -> bool:
    """A part of a GGUF split over several files (``...-00001-of-00003.gguf``)."""
    return bool(_SPLIT.search(name))


def gguf_file(
    all_files: list[str], preferred: str | None = None, quant: str | None = None
) -> str | None:
    """The GGUF file of a repo to install: ``preferred`` when listed; else the one file whose
    name holds the quantization tag (``Q4_K_M`` unless given, any case); else the only GGUF.
    Parts of split files, vision projectors (``mmproj-*``) and files in sub-folders are never
    chosen."""
    names = [
        f
        for f in all_files
        if f.lower().endswith(".gguf") and "/" not in f and not f.lower().startswith("mmproj")
    ]
    single = [f for f in names if not is_split(f)]
    if preferred and preferred in single and quant is None:
        return preferred
    tag = (quant or DEFAULT_QUANT).lower()
    tagged = [f for f in single if re.search(rf"(^|[-_.]){re.escape(tag)}([-.]|$)", f.lower())]
    if len(tagged) == 1:
        return tagged[0]
    if quant is None and len(single) == 1:
        return single[0]
    return None
