"""Speaker model folders in the store: Resemblyzer's encoder converted, WeSpeaker ONNX checked.

A folder holds ``encoder.onnx`` and a ``manifest.json`` with ``"task": "speaker-embedding"``
(what :mod:`deskscribe.speakers.encoder` reads). Like :mod:`deskscribe.models.build` for
Whisper, the folder is filled under a hidden name and renamed into place, so it is either
complete or absent, and only a folder holding an older built model is ever replaced.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from ..fsutil import fsync_dir, sha256_file
from ..speakers.convert import (
    CONVERTER_VERSION,
    CheckpointFormatError,
    build_resemblyzer_graph,
    read_torch_checkpoint,
    resemblyzer_weights,
)
from ..whisper.model import MANIFEST
from .store import SPEAKER_TASK, check_replaceable

ONNX_FILE = "encoder.onnx"


def convert_resemblyzer(
    checkpoint: str | Path, dest: str | Path, *, name: str | None = None, overwrite: bool = False
) -> Path:
    """Write the model folder ``dest`` (``encoder.onnx`` + ``manifest.json``) atomically."""
    checkpoint, dest = Path(checkpoint), Path(dest)
    check_replaceable(dest, overwrite, None)
    weights = resemblyzer_weights(read_torch_checkpoint(checkpoint))
    model = build_resemblyzer_graph(weights)

    def write(work: Path) -> dict:
        onnx.save(model, work / ONNX_FILE)
        return {
            "kind": "resemblyzer",
            "converter_version": CONVERTER_VERSION,
            "source": str(checkpoint.resolve()),
            "source_sha256": sha256_file(checkpoint),
            "sample_rate": 16000,
            "n_mels": 40,
            "n_fft": 400,
            "win_length": 400,
            "hop_length": 160,
            "partial_frames": 160,
            "embedding_dim": int(weights["linear.weight"].shape[0]),
            "onnx_file": ONNX_FILE,
        }

    return write_model_folder(dest, name, overwrite, write)


def install_wespeaker_onnx(
    onnx_file: str | Path,
    dest: str | Path,
    *,
    name: str | None = None,
    source_label: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Check a WeSpeaker ONNX export (one input [B, T, n_mels], a [B, dim] output that runs)
    and place it as a speaker model folder, atomically."""
    import onnxruntime as ort

    onnx_file, dest = Path(onnx_file), Path(dest)
    check_replaceable(dest, overwrite, None)
    try:
        session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    except Exception as err:
        raise CheckpointFormatError(f"{onnx_file} is not a usable ONNX model ({err})") from None
    inputs, outputs = session.get_inputs(), session.get_outputs()
    bins = inputs[0].shape[-1] if len(inputs) == 1 and len(inputs[0].shape) == 3 else None
    n_mels = bins if isinstance(bins, int) else 80
    if bins is None or not outputs:
        raise CheckpointFormatError(
            f"{onnx_file} is not a WeSpeaker embedding model: expected one input "
            f"[batch, frames, 80], found {[(i.name, i.shape) for i in inputs]}"
        )
    probe = np.zeros((1, 200, n_mels), np.float32)
    try:
        out = session.run([outputs[0].name], {inputs[0].name: probe})[0]
    except Exception as err:
        raise CheckpointFormatError(f"{onnx_file} does not run on fbank input ({err})") from None
    if out.ndim != 2 or out.shape[0] != 1 or not np.all(np.isfinite(out)):
        raise CheckpointFormatError(
            f"{onnx_file} is not a speaker embedding model (output shape {out.shape})"
        )

    def write(work: Path) -> dict:
        shutil.copyfile(onnx_file, work / ONNX_FILE)
        return {
            "kind": "wespeaker",
            "source": source_label or str(onnx_file.resolve()),
            "source_file": onnx_file.name,
            "source_sha256": sha256_file(onnx_file),
            "input_name": inputs[0].name,
            "output_name": outputs[0].name,
            "sample_rate": 16000,
            "n_mels": n_mels,
            "frame_length_ms": 25,
            "frame_shift_ms": 10,
            "embedding_dim": int(out.shape[1]),
            "onnx_file": ONNX_FILE,
        }

    return write_model_folder(dest, name, overwrite, write)


def write_model_folder(
    dest: Path,
    name: str | None,
    overwrite: bool,
    write: Callable[[Path], dict],
    task: str = SPEAKER_TASK,
    files: tuple[str, ...] = (ONNX_FILE,),
) -> Path:
    """Fill a hidden sibling folder with ``write`` (which returns the manifest's details) and
    a manifest of ``task`` with the checksums of ``files``, then rename it into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.building-", dir=dest.parent))
    try:
        details = write(work)
        manifest = {
            "name": name or dest.name,
            "task": task,
            **details,
            "files_sha256": {f: sha256_file(work / f) for f in files},
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        fsync_dir(work)
        os.chmod(work, 0o755)  # mkdtemp made it private; a model folder is ordinary data
        if dest.exists():
            if not overwrite:  # another process finished first: keep its folder
                raise FileExistsError(f"{dest} already exists; pass --overwrite to rebuild")
            shutil.rmtree(dest)
        os.replace(work, dest)
        return dest
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
