"""Convert Resemblyzer's voice encoder (``pretrained.pt`` in its wheel) to an ONNX model folder.

Torch is never imported: :mod:`deskscribe.speakers.checkpoint` reads the checkpoint.

The graph (opset 17): ``mels [B, T, 40]`` and ``lengths [B]`` (int32, frames per row;
rows are zero-padded beyond it) → 3 LSTM layers (hidden 256) → the last layer's hidden
state at each row's last frame → Linear(256, 256) → ReLU → L2 normalisation →
``embedding [B, 256]``, exactly ``VoiceEncoder.forward`` of Resemblyzer.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..fsutil import fsync_dir
from ..models.build import check_replaceable, sha256_file
from .checkpoint import CheckpointFormatError, read_torch_checkpoint

__all__ = [
    "CheckpointFormatError",
    "build_resemblyzer_graph",
    "convert_resemblyzer",
    "find_resemblyzer_checkpoint",
    "install_wespeaker_onnx",
    "read_torch_checkpoint",
    "resemblyzer_weights",
]
CONVERTER_VERSION = 1
MANIFEST = "manifest.json"
ONNX_FILE = "encoder.onnx"
TASK = "speaker-embedding"


# --------------------------------------------------------------------------- the graph


def resemblyzer_weights(checkpoint: Any) -> dict[str, np.ndarray]:
    """The voice encoder's tensors (``lstm.*``, ``linear.*``), float32."""
    state = checkpoint.get("model_state", checkpoint) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict):
        raise CheckpointFormatError("the checkpoint holds no state dict")
    needed = [
        f"lstm.{k}_l{i}" for i in range(3) for k in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]
    needed += ["linear.weight", "linear.bias"]
    missing = [k for k in needed if k not in state]
    if missing:
        raise CheckpointFormatError(
            f"not a Resemblyzer voice encoder checkpoint (missing {', '.join(missing[:3])})"
        )
    return {k: np.asarray(state[k], dtype=np.float32) for k in needed}


def _onnx_gates(w: np.ndarray) -> np.ndarray:
    """PyTorch stacks LSTM gates as i, f, g, o; ONNX as i, o, f, c (c = PyTorch's g)."""
    i, f, g, o = np.split(w, 4, axis=0)
    return np.concatenate([i, o, f, g], axis=0)


def build_resemblyzer_graph(weights: dict[str, np.ndarray], n_mels: int = 40) -> onnx.ModelProto:
    hidden = weights["lstm.weight_hh_l0"].shape[1]
    layers = sum(1 for k in weights if k.startswith("lstm.weight_ih_l"))
    dim = weights["linear.weight"].shape[0]
    inits = [
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array([0], np.int64), "axis0"),
        numpy_helper.from_array(np.array(1e-12, np.float32), "eps"),
        numpy_helper.from_array(weights["linear.weight"], "linear_weight"),
        numpy_helper.from_array(weights["linear.bias"], "linear_bias"),
    ]
    nodes = [helper.make_node("Transpose", ["mels"], ["x0"], perm=[1, 0, 2])]
    x = "x0"
    for layer in range(layers):
        w_ih, w_hh = weights[f"lstm.weight_ih_l{layer}"], weights[f"lstm.weight_hh_l{layer}"]
        bias = np.concatenate(
            [
                _onnx_gates(weights[f"lstm.bias_ih_l{layer}"]),
                _onnx_gates(weights[f"lstm.bias_hh_l{layer}"]),
            ]
        )
        inits += [
            numpy_helper.from_array(_onnx_gates(w_ih)[None], f"W{layer}"),
            numpy_helper.from_array(_onnx_gates(w_hh)[None], f"R{layer}"),
            numpy_helper.from_array(bias[None], f"B{layer}"),
        ]
        nodes.append(
            helper.make_node(
                "LSTM",
                [x, f"W{layer}", f"R{layer}", f"B{layer}", "lengths"],
                [f"y{layer}", f"h{layer}"],
                hidden_size=hidden,
                name=f"lstm{layer}",
            )
        )
        x = f"x{layer + 1}"
        nodes.append(helper.make_node("Squeeze", [f"y{layer}", "axis1"], [x]))
    last = f"h{layers - 1}"
    nodes += [
        helper.make_node("Squeeze", [last, "axis0"], ["hidden"]),
        helper.make_node("Gemm", ["hidden", "linear_weight", "linear_bias"], ["raw"], transB=1),
        helper.make_node("Relu", ["raw"], ["positive"]),
        helper.make_node("ReduceL2", ["positive"], ["norm"], axes=[1], keepdims=1),
        helper.make_node("Max", ["norm", "eps"], ["safe_norm"]),
        helper.make_node("Div", ["positive", "safe_norm"], ["embedding"]),
    ]
    graph = helper.make_graph(
        nodes,
        "resemblyzer_voice_encoder",
        [
            helper.make_tensor_value_info("mels", TensorProto.FLOAT, ["batch", "frames", n_mels]),
            helper.make_tensor_value_info("lengths", TensorProto.INT32, ["batch"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", dim])],
        inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="deskscribe"
    )
    model.ir_version = 8  # readable by every ONNX Runtime the project supports (>= 1.18)
    onnx.checker.check_model(model)
    return model


# --------------------------------------------------------------------------- the folder


def find_resemblyzer_checkpoint() -> Path | None:
    """``resemblyzer/pretrained.pt`` of the installed wheel, found without importing it
    (importing resemblyzer imports torch)."""
    try:
        dist = importlib.metadata.distribution("resemblyzer")
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == "pretrained.pt":
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    return None


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
        }

    return _write_model_folder(dest, name, overwrite, write)


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
        }

    return _write_model_folder(dest, name, overwrite, write)


def _write_model_folder(
    dest: Path, name: str | None, overwrite: bool, write: Callable[[Path], dict]
) -> Path:
    """Fill a hidden sibling folder with ``write`` + manifest, then rename it into place."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.building-", dir=dest.parent))
    try:
        details = write(work)
        manifest = {
            "name": name or dest.name,
            "task": TASK,
            **details,
            "onnx_file": ONNX_FILE,
            "files_sha256": {ONNX_FILE: sha256_file(work / ONNX_FILE)},
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
