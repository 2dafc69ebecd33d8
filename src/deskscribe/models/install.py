"""Get a model from the Hugging Face hub (or a local folder) into the store, ready to run.

Download (resumable, verified) into ``<store>/.downloads/<repo>``, build the ONNX variant into
``<store>/<name>`` atomically, then drop the downloaded checkpoint. A model is listed only
once it is complete; an interrupted download resumes on the next try.
"""

from __future__ import annotations

import errno
import shutil
import threading
from pathlib import Path

from ..errors import Progress
from ..speakers.convert import find_resemblyzer_checkpoint
from .build import build_model
from .catalog import find_entry, find_speaker_entry, speaker_onnx_file, wanted_files
from .speaker_build import convert_resemblyzer, install_wespeaker_onnx
from .starter import StarterNotAvailableError
from .store import store_dir, valid_name


def model_name(source: str, variant: str) -> str:
    entry = find_entry(source)
    base = entry.id if entry else source.rstrip("/").split("/")[-1]
    return valid_name(f"{base}-{variant}")


def install_model(
    source: str,
    variant: str,
    *,
    root: Path | None = None,
    name: str | None = None,
    endpoint: str | None = None,
    overwrite: bool = False,
    keep_download: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Install ``source`` (catalog id, Hugging Face repo id, or a local checkpoint folder).

    ``progress(done, total, stage)``: "download" in bytes, then "build: <step>" in fractions.
    """
    from .download import download_files, list_repo_files

    root = root or store_dir()
    report = progress or (lambda done, total, stage="": None)
    dest = root / (valid_name(name) if name else model_name(source, variant))
    local = Path(source).expanduser()
    if local.is_dir():
        return _build(local, dest, variant, overwrite, report, None)
    entry = find_entry(source)
    repo_id = entry.repo_id if entry else source
    files = wanted_files([f.path for f in list_repo_files(repo_id, endpoint=endpoint)])
    if not any(f.endswith((".safetensors", ".bin")) or ".bin.part" in f for f in files):
        raise ValueError(f"{repo_id} holds no Whisper weights (model.safetensors or model.bin)")
    cache = root / ".downloads" / repo_id.replace("/", "--")
    download_files(
        repo_id,
        files,
        cache,
        endpoint=endpoint,
        cancel=cancel,
        progress=lambda done, total, stage="": report(done, total, "download"),
    )
    if cancel is not None and cancel.is_set():
        from .download import DownloadCancelled

        raise DownloadCancelled(f"download of {repo_id} cancelled")
    path = _build(cache, dest, variant, overwrite, report, f"hf:{repo_id}")
    if not keep_download:
        shutil.rmtree(cache, ignore_errors=True)
    return path


def _build(
    checkpoint: Path, dest: Path, variant: str, overwrite: bool, report: Progress, label: str | None
) -> Path:
    try:
        return build_model(
            checkpoint,
            dest,
            variant,
            name=dest.name,
            overwrite=overwrite,
            progress=lambda done, total, stage="": report(done, total, f"build: {stage}"),
            source_label=label,
        )
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        from .download import DiskFullError

        raise DiskFullError(
            f"The disk filled up while building {dest.name}. Anything downloaded is kept: free "
            "some space and run the same command again, it will only build."
        ) from err


# --------------------------------------------------------------------------- speaker models

SPEAKER_STARTER_FOLDER = "speaker-resemblyzer"
SPEAKER_STARTER_HINT = "pip install --no-deps resemblyzer==0.1.4"


def install_speaker_starter(root: Path | None = None, overwrite: bool = False) -> Path:
    """Convert the voice encoder shipped in the resemblyzer wheel into the store (offline).

    ``--no-deps``: resemblyzer depends on torch, which DeskScribe never needs; only its
    ``pretrained.pt`` is read, by our own torch-free reader.
    """
    checkpoint = find_resemblyzer_checkpoint()
    if checkpoint is None:
        raise StarterNotAvailableError(
            f"the speaker starter needs the resemblyzer package; run: {SPEAKER_STARTER_HINT}"
        )
    dest = (root or store_dir()) / SPEAKER_STARTER_FOLDER
    return convert_resemblyzer(checkpoint, dest, name=dest.name, overwrite=overwrite)


def install_speaker_model(
    source: str,
    *,
    root: Path | None = None,
    name: str | None = None,
    endpoint: str | None = None,
    overwrite: bool = False,
    keep_download: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Install a WeSpeaker ONNX model: a speaker catalog id, a hub repo id, or a local
    ``.onnx`` file. The file is checked (it must run on fbank input) and placed as is.
    ``progress(done, total, stage)``: "download" in bytes, then "check"."""
    from .download import DownloadCancelled, OfflineError, download_files, list_repo_files

    root = root or store_dir()
    report = progress or (lambda done, total, stage="": None)
    entry = find_speaker_entry(source)
    local = Path(source).expanduser()
    if entry is None and local.suffix == ".onnx" and local.is_file():
        dest = root / valid_name(name or f"speaker-{local.stem}")
        return install_wespeaker_onnx(local, dest, name=dest.name, overwrite=overwrite)
    repo_id = entry.repo_id if entry else source
    default = entry.folder if entry else f"speaker-{repo_id.rstrip('/').split('/')[-1]}"
    dest = root / valid_name(name or default)
    if dest.exists() and not overwrite:
        raise FileExistsError(f"{dest} already exists; remove it or pass --overwrite")
    try:
        files = [f.path for f in list_repo_files(repo_id, endpoint=endpoint)]
    except OfflineError as err:
        reason = str(err).split(". The model has to be")[0]  # drop the Whisper advice
        raise OfflineError(
            f"{reason}. For speaker labels without the internet: `deskscribe models "
            f"install-speaker-starter` ({SPEAKER_STARTER_HINT} first), or pass a downloaded "
            "WeSpeaker .onnx file to `deskscribe models download --speaker FILE`."
        ) from err
    onnx_file = speaker_onnx_file(files, entry.onnx_file if entry else None)
    if onnx_file is None:
        raise ValueError(
            f"{repo_id} holds no single speaker-embedding ONNX file (found: "
            f"{', '.join(f for f in files if f.endswith('.onnx')) or 'none'})"
        )
    cache = root / ".downloads" / repo_id.replace("/", "--")
    download_files(
        repo_id,
        [onnx_file],
        cache,
        endpoint=endpoint,
        cancel=cancel,
        progress=lambda done, total, stage="": report(done, total, "download"),
    )
    if cancel is not None and cancel.is_set():
        raise DownloadCancelled(f"download of {repo_id} cancelled")
    report(0.0, 1.0, "check")
    path = install_wespeaker_onnx(
        cache / onnx_file,
        dest,
        name=dest.name,
        source_label=f"hf:{repo_id}/{onnx_file}",
        overwrite=overwrite,
    )
    report(1.0, 1.0, "check")
    if not keep_download:
        shutil.rmtree(cache, ignore_errors=True)
    return path


# --------------------------------------------------------------------------- overlap-aware


def install_segmentation_model(
    source: str = "community-1",
    *,
    root: Path | None = None,
    name: str | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    overwrite: bool = False,
    keep_download: bool = False,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Install the overlap-aware speaker models: a segmentation catalog id (its three parts
    downloaded, the gated one with ``token`` or the login saved on this computer), or a local
    folder holding ``segmentation.onnx``, a WeSpeaker ``.onnx`` (``embedding.onnx`` or
    ``wespeaker.onnx``), ``xvec_transform.npz`` and ``plda.npz``. ``progress(done, total,
    stage)``: "download" in bytes over all parts, then "check"."""
    from .catalog import find_segmentation_entry
    from .download import DownloadCancelled, download_files
    from .segmentation_build import install_segmentation_parts

    root = root or store_dir()
    report = progress or (lambda done, total, stage="": None)
    entry = find_segmentation_entry(source)
    local = Path(source).expanduser()
    if entry is None:
        if not local.is_dir():
            raise ValueError(
                f"{source!r} is neither a segmentation model in the catalog (community-1) nor "
                "a folder holding segmentation.onnx, a WeSpeaker .onnx and the PLDA files"
            )
        wespeaker = next(
            (local / f for f in ("embedding.onnx", "wespeaker.onnx") if (local / f).is_file()),
            None,
        )
        missing = [
            f for f in ("segmentation.onnx", "xvec_transform.npz", "plda.npz")
            if not (local / f).is_file()
        ] + ([] if wespeaker else ["embedding.onnx"])  # fmt: skip
        if missing or wespeaker is None:
            raise ValueError(f"{local} lacks {', '.join(missing)}")
        dest = root / valid_name(name or f"segmentation-{local.name}")
        return install_segmentation_parts(
            local / "segmentation.onnx", wespeaker, local, dest, name=dest.name,
            sources={"folder": str(local.resolve())}, overwrite=overwrite,
        )  # fmt: skip
    dest = root / valid_name(name or entry.folder)
    if dest.exists() and not overwrite:
        raise FileExistsError(f"{dest} already exists; remove it or pass --overwrite")
    caches, sizes = [], [p.size_mb for p in entry.parts]
    for i, part in enumerate(entry.parts):
        cache = root / ".downloads" / part.repo_id.replace("/", "--")
        before = sum(sizes[:i]) * 1e6
        total = entry.size_mb * 1e6

        def step(done: float, _total: float, stage: str = "", before=before, total=total):
            report(min(before + done, total), total, "download")

        download_files(
            part.repo_id, list(part.files), cache, endpoint=endpoint,
            token=token if part.gated else None, cancel=cancel, progress=step,
        )  # fmt: skip
        caches.append(cache)
        if cancel is not None and cancel.is_set():
            raise DownloadCancelled(f"download of {part.repo_id} cancelled")
    report(0.0, 1.0, "check")
    seg, emb, plda = entry.parts
    path = install_segmentation_parts(
        caches[0] / seg.files[0],
        caches[1] / emb.files[0],
        caches[2] / Path(plda.files[0]).parent,
        dest,
        name=dest.name,
        sources={p.repo_id: ", ".join(p.files) for p in entry.parts},
        overwrite=overwrite,
    )
    report(1.0, 1.0, "check")
    if not keep_download:
        for cache in caches:
            shutil.rmtree(cache, ignore_errors=True)
    return path
