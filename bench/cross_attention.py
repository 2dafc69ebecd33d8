"""One decoder layer's cross-attention on the CPU, in the layouts ``whisper/graph.py`` could use
(issue 38): what graph version 8 changed and why.

- ``q·K``: the fp16 graphs' (and version 7's) ``MatMul(q, K [dh, S])`` then ``MatMul(p, V [S, dh])``;
- ``transB``: version 8's CPU variants, ``FusedMatMul(q, K [S, dh], transB)`` then
  ``FusedMatMul(p, V [dh, S], transB)``;
- ``K·qᵀ``: ``MatMul(K [S, dh], qᵀ)``, the softmax over S, ``MatMul(V [dh, S], p)``.

Turbo's shape by default (20 heads of 64, 1500 positions), random tensors, four layers' K/V
rotated so that they are not all in the cache, the app's own CPU sessions
(``whisper.model.cpu_session``), median of ``--runs``, for one window and for
a batch of 8, with 1 query row (greedy) and 5 (beam 5), at 1 and 2 threads. Each layout's
output is checked against numpy's.

    python bench/cross_attention.py [--heads 20] [--head-dim 64] [--positions 1500] [--runs 40]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_line, markdown_table
from deskscribe.whisper.model import cpu_session

LAYOUTS = ("q·K", "transB", "K·qᵀ")


def graph(layout: str, H: int, dh: int, S: int) -> bytes:
    F, ms = TensorProto.FLOAT, "com.microsoft"
    k_rows = layout != "q·K"  # K [S, dh] and V [dh, S]
    if layout == "q·K":
        nodes = [
            helper.make_node("MatMul", ["q", "k"], ["s"]),
            helper.make_node("Softmax", ["s"], ["p"], axis=-1),
            helper.make_node("MatMul", ["p", "v"], ["o"]),
        ]
    elif layout == "transB":
        nodes = [
            helper.make_node("FusedMatMul", ["q", "k"], ["s"], domain=ms, transB=1),
            helper.make_node("Softmax", ["s"], ["p"], axis=-1),
            helper.make_node("FusedMatMul", ["p", "v"], ["o"], domain=ms, transB=1),
        ]
    else:
        nodes = [
            helper.make_node("Transpose", ["q"], ["qt"], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", ["k", "qt"], ["s"]),
            helper.make_node("Softmax", ["s"], ["p"], axis=-2),
            helper.make_node("MatMul", ["v", "p"], ["ot"]),
            helper.make_node("Transpose", ["ot"], ["o"], perm=[0, 1, 3, 2]),
        ]
    inputs = [
        helper.make_tensor_value_info("q", F, ["A", H, "G", dh]),
        helper.make_tensor_value_info("k", F, ["A", H, S, dh] if k_rows else ["A", H, dh, S]),
        helper.make_tensor_value_info("v", F, ["A", H, dh, S] if k_rows else ["A", H, S, dh]),
    ]
    g = helper.make_graph(nodes, layout, inputs, [helper.make_tensor_value_info("o", F, None)])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(ms, 1)]
    return helper.make_model(g, opset_imports=opsets).SerializeToString()


def laid_out(layout: str, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """K and V drawn as ``[A, H, S, dh]``, in ``layout``'s order."""
    if layout == "q·K":
        return np.ascontiguousarray(k.transpose(0, 1, 3, 2)), v
    return k, np.ascontiguousarray(v.transpose(0, 1, 3, 2))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--heads", type=int, default=20)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--positions", type=int, default=1500)
    p.add_argument("--runs", type=int, default=40)
    args = p.parse_args()
    H, dh, S = args.heads, args.head_dim, args.positions
    print(f"machine: {machine_line(2)}; ONNX Runtime {ort.__version__}")
    rng = np.random.default_rng(0)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="cross-attention-"))
    for name in LAYOUTS:
        (work / f"{LAYOUTS.index(name)}.onnx").write_bytes(graph(name, H, dh, S))
    for threads in (1, 2):
        # The app's own CPU sessions (its options, no spinning between operators).
        sessions = {n: cpu_session(work / f"{i}.onnx", threads) for i, n in enumerate(LAYOUTS)}
        for A, G in ((1, 1), (1, 5), (8, 1), (8, 5)):
            q = rng.standard_normal((A, H, G, dh)).astype(np.float32)
            kv = [rng.standard_normal((2, A, H, S, dh)).astype(np.float32) for _ in range(4)]
            k0, v0 = kv[0]
            scores = q @ k0.transpose(0, 1, 3, 2)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            want = (probs / probs.sum(-1, keepdims=True)) @ v0
            ms = {}
            for name, sess in sessions.items():
                feeds = [laid_out(name, k, v) for k, v in kv]
                got = sess.run(None, {"q": q, "k": feeds[0][0], "v": feeds[0][1]})[0]
                assert np.allclose(got, want, atol=1e-3), (name, A, G)
                times = []
                for r in range(args.runs):
                    k, v = feeds[r % len(feeds)]
                    start = time.perf_counter()
                    sess.run(None, {"q": q, "k": k, "v": v})
                    times.append(time.perf_counter() - start)
                ms[name] = statistics.median(times) * 1e3
            base = ms["q·K"]
            rows.append(
                [threads, A, G]
                + [
                    f"{ms[n]:.2f} ({ms[n] / base:.2f}x)" if n != "q·K" else f"{base:.2f}"
                    for n in LAYOUTS
                ]
            )
    shutil.rmtree(work)
    print()
    print(
        markdown_table(
            ["threads", "windows", "query rows", "q·K ms", "transB ms (ratio)", "K·qᵀ ms (ratio)"],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
