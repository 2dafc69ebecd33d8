"""Where built models live, and how a model is named on the command line.

The store is ``<user data dir>/models`` (platformdirs), or ``$DESKSCRIBE_MODELS_DIR``.
Each model is a folder built by :func:`deskscribe.models.build.build_model`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from platformdirs import user_data_dir

from ..errors import DeskScribeError
from ..fsutil import sha256_file
from ..whisper.model import MANIFEST

ENV_DIR = "DESKSCRIBE_MODELS_DIR"
SPEAKER_TASK = "speaker-embedding"  # the manifest "task" of speaker models (speakers/)
SEGMENTATION_TASK = "speaker-segmentation"  # overlap-aware labels (models/segmentation_build)
SEGMENTATION_FILES = ("segmentation.onnx", "embedding.onnx", "xvec_transform.npz", "plda.npz")
SPEAKER_INSTALL_HINT = (
    "`deskscribe models download wespeaker` (needs the internet once) or "
    "`deskscribe models install-speaker-starter` (offline, from the resemblyzer package)"
)


class ModelNotInstalledError(DeskScribeError):
    """No such model in the store (the message says how to get one)."""


@dataclass
class InstalledModel:
    name: str
    path: Path
    variant: str
    multilingual: bool
    size_bytes: int
    built_at: str


def store_dir() -> Path:
    """``$DESKSCRIBE_MODELS_DIR``, else the ``models_dir`` setting, else the user data folder."""
    from .. import settings

    override = os.environ.get(ENV_DIR) or settings.get("models_dir")
    if override:
        return Path(override).expanduser()
    return Path(user_data_dir("DeskScribe", appauthor=False)) / "models"


def reveal_command(path: Path) -> list[str]:
    """The command that shows ``path`` in the system's file manager."""
    if sys.platform == "win32":
        return ["explorer", f"/select,{path}"]
    if sys.platform == "darwin":
        return ["open", "-R", str(path)]
    return ["xdg-open", str(path if path.is_dir() else path.parent)]


def built_manifest(folder: Path) -> dict | None:
    """The manifest of a folder our builders made, or None. Only they write a manifest with
    ``files_sha256`` naming files that are there: a folder of the user's that happens to
    hold some other ``manifest.json`` (a web app's, a game's) is never listed, replaced or
    deleted as a model."""
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    files = data.get("files_sha256") if isinstance(data, dict) else None
    if not isinstance(files, dict) or not files:
        return None
    if not all(isinstance(f, str) and "/" not in f and (folder / f).is_file() for f in files):
        return None
    return data


def check_replaceable(dest: Path, overwrite: bool, source: Path | None = None) -> None:
    """Refuse to put a model where it would destroy anything but an older built model."""
    if source is not None:
        src, dst = source.resolve(), dest.resolve()
        if dst == src or src in dst.parents or dst in src.parents:
            raise ValueError(
                f"{dest} overlaps the checkpoint folder {source}; build somewhere else"
            )
    if not dest.exists():
        return
    if not overwrite:
        raise FileExistsError(f"{dest} already exists; remove it or pass --overwrite to rebuild")
    if not dest.is_dir() or (any(dest.iterdir()) and built_manifest(dest) is None):
        raise FileExistsError(
            f"{dest} exists and is not a built model; it will not be replaced. Choose another name"
        )


def _installed(root: Path | None) -> Iterator[tuple[Path, dict]]:
    """(folder, manifest) of every model folder in the store with a readable manifest,
    Whisper and speaker models alike, in name order."""
    root = root or store_dir()
    if not root.is_dir():
        return
    for folder in sorted(root.iterdir()):
        if folder.name.startswith("."):
            continue
        data = built_manifest(folder)
        if data is not None:
            yield folder, data


def folder_size(folder: Path) -> int:
    """Bytes of the files directly in ``folder`` (a model's size on disk)."""
    return sum(f.stat().st_size for f in folder.iterdir() if f.is_file())


def list_models(root: Path | None = None) -> list[InstalledModel]:
    found = []
    for folder, data in _installed(root):
        if data.get("task") in (SPEAKER_TASK, SEGMENTATION_TASK):  # see list_speaker_models
            continue
        found.append(
            InstalledModel(
                folder.name,
                folder,
                data.get("variant", "?"),
                bool(data.get("multilingual")),
                folder_size(folder),
                data.get("built_at", ""),
            )
        )
    return found


# The variant a model name without one stands for, best first: int8 is the fast CPU variant,
# fp16 the GPU one (fp16 on a CPU is slow), fp32 runs well on both.
VARIANT_PREFERENCE = {"cpu": ("int8", "fp32", "fp16"), "gpu": ("fp16", "fp32", "int8")}
GPU_DEVICES = ("cuda", "directml", "coreml", "gpu")


def runs_on_gpu(device: str | None) -> bool:
    """Whether a model opened with ``device`` (auto, cpu, cuda, …) will try a GPU first."""
    if device in (None, "", "auto"):
        from ..whisper.runtime import CPU, PROVIDER_ORDER, available_providers

        return any(p in PROVIDER_ORDER and p != CPU for p in available_providers())
    return device in GPU_DEVICES


def installed_variant(
    name: str, root: Path | None = None, device: str | None = "auto"
) -> Path | None:
    """The installed ``NAME-<variant>`` (``tiny.en`` → ``tiny.en-int8``) that suits
    ``device`` best (see ``VARIANT_PREFERENCE``), or None when no variant is installed."""
    by_variant = {m.variant: m.path for m in list_models(root) if m.name == f"{name}-{m.variant}"}
    if not by_variant:
        return None
    order = VARIANT_PREFERENCE["gpu" if runs_on_gpu(device) else "cpu"]
    return next((by_variant[v] for v in order if v in by_variant), None)


def resolve_model(
    name_or_path: str | None, root: Path | None = None, device: str | None = "auto"
) -> Path:
    """A model folder from a store name, a path, or (None) the only/newest installed model.

    A name without its variant (``tiny.en``) finds the installed ``tiny.en-int8`` /
    ``-fp16`` / ``-fp32``, the one best for ``device`` when several are installed."""
    if name_or_path:
        in_store = (root or store_dir()) / name_or_path
        if built_manifest(in_store) is not None:
            return in_store
        candidate = Path(name_or_path).expanduser()
        if built_manifest(candidate) is not None:
            return candidate.resolve()
        variant = installed_variant(name_or_path, root, device)
        if variant is not None:
            return variant
        installed = ", ".join(m.name for m in list_models(root)) or "none"
        raise ModelNotInstalledError(
            f"model {name_or_path!r} is not installed (installed: {installed}); "
            "get it with `deskscribe models download NAME` (needs the internet once), "
            "`deskscribe models install-starter` (offline) or `deskscribe models build <folder>`"
        )
    models = list_models(root)
    if not models:
        raise ModelNotInstalledError(
            f"no model is installed in {root or store_dir()}; get one with "
            "`deskscribe models download` (needs the internet once), "
            "`deskscribe models install-starter` (offline) or `deskscribe models build <folder>`"
        )
    return max(models, key=lambda m: m.built_at).path


def import_model(
    folder: Path, name: str | None = None, root: Path | None = None, overwrite: bool = False
) -> Path:
    """Copy an already built model folder into the store (atomically)."""
    if built_manifest(folder) is None:
        raise ModelNotInstalledError(f"{folder} is not a built DeskScribe model (no {MANIFEST})")
    root = root or store_dir()
    dest = root / valid_name(name or folder.name)
    check_replaceable(dest, overwrite, folder)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{dest.name}.importing"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        shutil.copytree(folder, tmp)
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def valid_name(name: str) -> str:
    """A model name is one folder name inside the store, nothing that escapes it."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(
            f"{name!r} is not a usable model name; use letters, digits, '.', '-' or '_'"
        )
    return name


def remove_model(name: str, root: Path | None = None) -> Path:
    """Delete an installed model folder (only ever a folder holding a built model)."""
    folder = (root or store_dir()) / valid_name(name)
    if built_manifest(folder) is None:
        raise ModelNotInstalledError(f"model {name!r} is not installed in {root or store_dir()}")
    # Rename first, so that a crash half-way leaves no half-deleted model in the list.
    doomed = folder.with_name(f".{folder.name}.removing")
    shutil.rmtree(doomed, ignore_errors=True)
    os.replace(folder, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
    return folder


def verify_model(folder: Path) -> list[str]:
    """Problems with a built model's files (empty when every file matches its checksum)."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        return [f"{folder / MANIFEST} cannot be read ({err})"]
    expected = manifest.get("files_sha256")
    if not expected:
        return [f"{folder.name} was built before checksums were recorded; rebuild it to verify it"]
    problems = []
    for fname, digest in expected.items():
        path = folder / fname
        if not path.is_file():
            problems.append(f"{fname} is missing")
        elif sha256_file(path) != digest:
            problems.append(f"{fname} is damaged (checksum differs)")
    return problems


@dataclass
class InstalledSpeakerModel:
    name: str
    path: Path
    kind: str  # "resemblyzer" or "wespeaker"
    dim: int
    size_bytes: int
    built_at: str


def list_speaker_models(root: Path | None = None) -> list[InstalledSpeakerModel]:
    """Speaker-embedding models in the store (they share it with the Whisper models)."""
    found: list[InstalledSpeakerModel] = []
    for folder, data in _installed(root):
        if data.get("task") != SPEAKER_TASK:
            continue
        found.append(
            InstalledSpeakerModel(
                folder.name,
                folder,
                str(data.get("kind", "?")),
                int(data.get("embedding_dim", 0)),
                folder_size(folder),
                data.get("built_at", ""),
            )
        )
    return found


def resolve_speaker_model(name: str | None = None, root: Path | None = None) -> Path:
    """A speaker model folder from a store name or a path; ``None`` picks WeSpeaker when one
    is installed, else Resemblyzer (the newest of a kind when there are several)."""
    models = list_speaker_models(root)
    if name:
        for candidate in ((root or store_dir()) / name, Path(name).expanduser()):
            try:
                data = json.loads((candidate / MANIFEST).read_text(encoding="utf-8"))
            except OSError:
                continue
            except ValueError as e:  # there, but its manifest is cut short or garbled
                raise ModelNotInstalledError(
                    f"speaker model {name!r} is damaged: {candidate / MANIFEST} cannot be read "
                    f"({e}). Install it again with {SPEAKER_INSTALL_HINT}"
                ) from None
            if isinstance(data, dict) and data.get("task") == SPEAKER_TASK:
                return candidate.resolve()
        installed = ", ".join(m.name for m in models) or "none"
        raise ModelNotInstalledError(
            f"speaker model {name!r} is not installed (installed: {installed}); "
            f"get one with {SPEAKER_INSTALL_HINT}"
        )
    for kind in ("wespeaker", "resemblyzer"):
        of_kind = [m for m in models if m.kind == kind]
        if of_kind:
            return max(of_kind, key=lambda m: m.built_at).path
    raise ModelNotInstalledError(
        f"no speaker model is installed in {root or store_dir()}; speaker labels need one: "
        f"get it with {SPEAKER_INSTALL_HINT}"
    )


def find_segmentation_model(root: Path | None = None) -> Path | None:
    """The newest complete overlap-aware speaker model folder in the store, or None (then
    speaker labels come from the voice encoder's pipeline, ``speakers/diarize.py``)."""
    found = [
        (str(data.get("built_at", "")), folder)
        for folder, data in _installed(root)
        if data.get("task") == SEGMENTATION_TASK
        and all((folder / f).is_file() for f in SEGMENTATION_FILES)
    ]
    return max(found)[1] if found else None
