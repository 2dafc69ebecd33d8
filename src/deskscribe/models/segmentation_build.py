"""The overlap-aware speaker models in the store: one folder the segmentation pipeline reads.

A folder with ``"task": "speaker-segmentation"`` in its ``manifest.json`` holds what
:class:`deskscribe.speakers.segmentation.SegmentationPipeline` needs:

* ``segmentation.onnx``: pyannote segmentation-3.0 (waveform ``[B, 1, 160000]`` in, powerset
  scores ``[B, 589, 7]`` out), as exported to ONNX;
* ``embedding.onnx``: WeSpeaker ResNet34 with *weighted* statistics pooling (``fbank
  [B, T, 80]`` and ``weights [B, 589]`` in, ``[B, 256]`` out). WeSpeaker's own ONNX export
  pools every frame alike, so :func:`weighted_pooling` rewrites its pooling into pyannote's
  (``StatsPool`` with weights: the frame weights resized to the ResNet's frames by nearest
  neighbour, weighted mean and unbiased weighted standard deviation);
* ``xvec_transform.npz`` and ``plda.npz``: the PLDA of community-1.

Each part is checked before the folder is placed (it must load and give finite outputs of
the right shape), and the folder is filled under a hidden name and renamed into place.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..speakers.convert import CheckpointFormatError
from .speaker_build import write_model_folder
from .store import SEGMENTATION_FILES, SEGMENTATION_TASK, check_replaceable

SEG_FRAMES = 589  # segmentation-3.0's frames per 10 s window
WINDOW_SAMPLES = 160000
FBANK_FRAMES = 998  # Kaldi fbank frames of a 10 s window (25 ms, 10 ms shift)
_PASS_THROUGH = {"Flatten", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast"}


def weighted_pooling(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` (fbank in, embedding out, plain mean + std statistics pooling before its
    last linear layer) with the pooling replaced by pyannote's weighted one, and a second
    input ``weights [B, W]`` (any W: resized to the pooled frames by nearest neighbour, as
    ``torch.nn.functional.interpolate`` does). CheckpointFormatError when the pooling cannot
    be found."""
    model = onnx.version_converter.convert_version(model, 17)
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}

    def source(name: str) -> str:
        """Follow reshapes and casts back to the tensor they pass along."""
        node = producer.get(name)
        while node is not None and node.op_type in _PASS_THROUGH:
            name = node.input[0]
            node = producer.get(name)
        return name

    # The statistics: the last Concat whose first input is a ReduceMean over the last axis of
    # a tensor X that its second input (the standard deviation) also derives from.
    found = None
    for node in reversed(graph.node):
        if node.op_type != "Concat" or len(node.input) != 2:
            continue
        mean = producer.get(source(node.input[0]))
        if mean is None or mean.op_type != "ReduceMean":
            continue
        x = mean.input[0]
        if x in _ancestors(node.input[1], producer):
            found = node, x
            break
    if found is None:
        raise CheckpointFormatError(
            "the speaker model has no mean + standard deviation pooling that could be weighted "
            "(expected WeSpeaker's ResNet statistics pooling)"
        )
    concat, x = found
    remove = _ancestors(concat.output[0], producer, stop=x) - _ancestors(x, producer)
    kept = [n for n in graph.node if n is concat or not (set(n.output) & remove)]
    p = "weighted_pool/"

    def c(name: str, value) -> str:
        graph.initializer.append(numpy_helper.from_array(np.asarray(value), p + name))
        return p + name

    w = graph.input.add()
    w.CopyFrom(helper.make_tensor_value_info("weights", TensorProto.FLOAT, ["B", "W"]))
    # X is [B, C, T] (pyannote's port) or [B, C, F, T] (WeSpeaker's TSTP): the weights are
    # resized to T and shaped [B, 1, (1,) T]; statistics over the last axis, then flattened.
    eps, last = c("eps", np.float32(1e-8)), c("last", np.array([-1], np.int64))
    pooling = [
        helper.make_node("Unsqueeze", ["weights", c("axis1", np.array([1], np.int64))],
                         [p + "w3"]),
        helper.make_node("Shape", [p + "w3"], [p + "wshape"], end=2),
        helper.make_node("Shape", [x], [p + "frames"], start=-1),
        helper.make_node("Concat", [p + "wshape", p + "frames"], [p + "sizes"], axis=0),
        helper.make_node("Resize", [p + "w3", "", "", p + "sizes"], [p + "wr"], mode="nearest",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        helper.make_node("Shape", [x], [p + "middle"], start=1, end=-1),
        helper.make_node("Div", [p + "middle", p + "middle"], [p + "ones"]),
        helper.make_node("Shape", [x], [p + "batch"], end=1),
        helper.make_node("Concat", [p + "batch", p + "ones", p + "frames"], [p + "wshape2"],
                         axis=0),
        helper.make_node("Reshape", [p + "wr", p + "wshape2"], [p + "w"]),
        helper.make_node("ReduceSum", [p + "w", last], [p + "v1raw"], keepdims=0),
        helper.make_node("Add", [p + "v1raw", eps], [p + "v1"]),
        helper.make_node("Mul", [x, p + "w"], [p + "xw"]),
        helper.make_node("ReduceSum", [p + "xw", last], [p + "sum"], keepdims=0),
        helper.make_node("Div", [p + "sum", p + "v1"], [p + "mean"]),
        helper.make_node("Unsqueeze", [p + "mean", last], [p + "mean1"]),
        helper.make_node("Sub", [x, p + "mean1"], [p + "dx"]),
        helper.make_node("Mul", [p + "dx", p + "dx"], [p + "dx2"]),
        helper.make_node("Mul", [p + "w", p + "w"], [p + "ww"]),
        helper.make_node("ReduceSum", [p + "ww", last], [p + "v2"], keepdims=0),
        helper.make_node("Mul", [p + "dx2", p + "w"], [p + "dx2w"]),
        helper.make_node("ReduceSum", [p + "dx2w", last], [p + "num"], keepdims=0),
        helper.make_node("Div", [p + "v2", p + "v1"], [p + "v2v1"]),
        helper.make_node("Sub", [p + "v1", p + "v2v1"], [p + "den0"]),
        helper.make_node("Add", [p + "den0", eps], [p + "den"]),
        helper.make_node("Div", [p + "num", p + "den"], [p + "var"]),
        helper.make_node("Sqrt", [p + "var"], [p + "std"]),
        helper.make_node("Flatten", [p + "mean"], [p + "meanf"], axis=1),
        helper.make_node("Flatten", [p + "std"], [p + "stdf"], axis=1),
        helper.make_node("Concat", [p + "meanf", p + "stdf"], [concat.output[0]], axis=1),
    ]  # fmt: skip
    del graph.node[:]
    at = next(i for i, n in enumerate(kept) if n is concat)
    nodes = kept[:at] + pooling + kept[at + 1 :]  # in the pooling's place: still sorted
    graph.node.extend(_needed(nodes, [o.name for o in graph.output]))
    used = {i for n in graph.node for i in n.input}
    keep = [t for t in graph.initializer if t.name in used]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    del graph.value_info[:]
    onnx.checker.check_model(model)
    return model


def _ancestors(name: str, producer: dict, stop: str | None = None) -> set[str]:
    """Every tensor ``name`` is computed from (itself included), not looking past ``stop``."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        t = todo.pop()
        if t in seen or not t:
            continue
        seen.add(t)
        node = producer.get(t)
        if node is not None and t != stop:
            todo.extend(node.input)
    return seen


def _needed(nodes: list, outputs: list[str]) -> list:
    """``nodes`` that the outputs depend on, in their order (the rest are dropped)."""
    producer = {out: n for n in nodes for out in n.output}
    need: set[str] = set()
    todo = list(outputs)
    while todo:
        t = todo.pop()
        if t in need:
            continue
        need.add(t)
        if t in producer:
            todo.extend(producer[t].input)
    return [n for n in nodes if set(n.output) & need]


def check_parts(segmentation: Path, embedding: Path, plda: Path) -> dict:
    """Load and run each part once; CheckpointFormatError with what is wrong."""
    import onnxruntime as ort

    from ..speakers.segmentation import Plda

    def session(path: Path):
        try:
            return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as err:
            raise CheckpointFormatError(f"{path.name} is not a usable ONNX model ({err})") from None

    seg = session(segmentation)
    try:
        out = seg.run(None, {seg.get_inputs()[0].name: np.zeros((1, 1, WINDOW_SAMPLES), "f4")})[0]
    except Exception as err:
        raise CheckpointFormatError(
            f"{segmentation.name} does not run on a 10 s window ({err})"
        ) from None
    if out.shape != (1, SEG_FRAMES, 7):
        raise CheckpointFormatError(
            f"{segmentation.name} is not pyannote segmentation-3.0: a 10 s window gave scores "
            f"of shape {out.shape}, expected (1, {SEG_FRAMES}, 7)"
        )
    emb = session(embedding)
    names = [i.name for i in emb.get_inputs()]
    if len(names) != 2:
        raise CheckpointFormatError(f"{embedding.name} takes {len(names)} inputs, expected 2")
    probe = {
        names[0]: np.zeros((2, FBANK_FRAMES, 80), "f4"),
        names[1]: np.ones((2, SEG_FRAMES), "f4"),
    }
    vec = emb.run(None, probe)[0]
    if vec.ndim != 2 or vec.shape[0] != 2 or not np.all(np.isfinite(vec)):
        raise CheckpointFormatError(f"{embedding.name} gave embeddings of shape {vec.shape}")
    try:
        p = Plda(plda)
    except (OSError, KeyError, ValueError, np.linalg.LinAlgError) as err:
        raise CheckpointFormatError(f"the PLDA files in {plda} cannot be used ({err})") from None
    if p.mean1.shape[0] != vec.shape[1]:
        raise CheckpointFormatError(
            f"the PLDA expects {p.mean1.shape[0]}-dim embeddings, the embedding model gives "
            f"{vec.shape[1]}"
        )
    return {"embedding_dim": int(vec.shape[1]), "plda_dim": int(p.dim)}


def install_segmentation_parts(
    segmentation: Path,
    wespeaker: Path,
    plda: Path,
    dest: Path,
    *,
    name: str | None = None,
    sources: dict[str, str] | None = None,
    overwrite: bool = False,
) -> Path:
    """Place a segmentation folder from its parts: ``segmentation`` (ONNX), ``wespeaker``
    (WeSpeaker's plain-pooling ONNX, or one that already takes weights) and the folder
    ``plda`` holding ``xvec_transform.npz`` and ``plda.npz``; checked, atomically."""
    check_replaceable(dest, overwrite, None)
    try:
        model = onnx.load(str(wespeaker))
    except Exception as err:
        raise CheckpointFormatError(f"{wespeaker.name} is not an ONNX model ({err})") from None

    def write(work: Path) -> dict:
        onnx.save(
            model if _takes_weights(model) else weighted_pooling(model), work / "embedding.onnx"
        )
        shutil.copyfile(segmentation, work / "segmentation.onnx")
        for f in ("xvec_transform.npz", "plda.npz"):
            shutil.copyfile(plda / f, work / f)
        details = check_parts(work / "segmentation.onnx", work / "embedding.onnx", work)
        return {"kind": "pyannote-community-1", **details, "sources": sources or {}}

    return write_model_folder(dest, name, overwrite, write, SEGMENTATION_TASK, SEGMENTATION_FILES)


def _takes_weights(model: onnx.ModelProto) -> bool:
    """Whether the model already has a second (frame weights) input."""
    return len(model.graph.input) - len(model.graph.initializer) >= 2
