"""Convert Resemblyzer's voice encoder (``pretrained.pt`` in its wheel) to an ONNX graph.

Torch is never imported: :mod:`deskscribe.speakers.checkpoint` reads the checkpoint. The
model folder around the graph is written by :mod:`deskscribe.models.speaker_build`.

The graph (opset 17): ``mels [B, T, 40]`` and ``lengths [B]`` (int32, frames per row;
rows are zero-padded beyond it) → 3 LSTM layers (hidden 256) → the last layer's hidden
state at each row's last frame → Linear(256, 256) → ReLU → L2 normalisation →
``embedding [B, 256]``, exactly ``VoiceEncoder.forward`` of Resemblyzer.
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .checkpoint import CheckpointFormatError, read_torch_checkpoint

__all__ = [
    "CheckpointFormatError",
    "build_resemblyzer_graph",
    "find_resemblyzer_checkpoint",
    "read_torch_checkpoint",
    "resemblyzer_weights",
]
CONVERTER_VERSION = 1  # in the manifest of a converted folder (models/speaker_build.py)


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


# --------------------------------------------------------------------------- the checkpoint


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
