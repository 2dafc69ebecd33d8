"""int8 on other kinds of x86 CPU: what ONNX Runtime writes with the kernels an AVX2-only or
an AVX-only CPU gets, against this machine's, on the real phone call.

ONNX Runtime's MLAS picks its int8 kernels by CPUID: VNNI (AVX-512 or AVX) sums u8 x s8
products in 32 bits; AVX2 and older add each neighbouring pair into a saturating 16-bit
integer first (VPMADDUBSW). ``qemu-x86_64`` (user mode) runs the same Python, numpy and ONNX
Runtime with an older CPU's CPUID, so MLAS takes that CPU's kernels for real:

``-cpu Haswell``: AVX2 and FMA, no AVX-512, no VNNI (most laptops and desktops before
2019-2021). qemu 7.2's TCG stops at AVX2: AVX-512, VNNI and AMX cannot be emulated, so the
machine this runs on is the only VNNI/AMX kind measured. Older kinds did not run here: under
``-cpu SandyBridge`` (AVX, no AVX2) the log-mel's numpy stops on an illegal instruction (an
emulation gap or numpy's, not ours to tell apart here), under ``-cpu Nehalem`` numpy does not
import. Times under emulation mean nothing (about 100 times slower) and are not printed.

Per kind, for each model's fp32 and int8 builds, one child computes the encoder's cross K/V of
the call's first 30 s window and greedy-decodes that window (one thread). The table gives, for
int8, its distance from fp32 on the same kind (RMS over the cross K/V), that distance against
this machine's, and whether the greedy tokens are this machine's. ``--sabotage`` adds an int8
build with full 8-bit weights (the builder's +-63 limit lifted), the defect the 7-bit weights
prevent: its AVX2 ratio shows what the tests catch (``tests/test_int8.py``).

    python bench/cpu_kinds.py [--models tiny.en[,base]] [--kinds Haswell] [--sabotage]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_CACHE, ROOT, built_model, ct2_checkpoint, machine_line, markdown_table

CALL = ROOT.parent / "shared" / "eval" / "two-speakers.wav"
HOST = "this machine"
KINDS = {"Haswell": "AVX2, no AVX-512/VNNI"}
GREEDY_STEPS = 60


def cpu_flags() -> str:
    """The instruction sets numpy's CPU dispatch sees in this process (qemu's, under qemu), as
    JSON: what tells a child's kernels apart."""
    from numpy._core._multiarray_umath import __cpu_features__ as features

    return json.dumps({k: bool(features.get(k)) for k in ("AVX", "AVX2", "AVX512F", "AVX512VNNI")})


def window_numbers(model_dir: str, out: str) -> None:
    """The child: cross K/V of the call's first window and its greedy tokens, into ``out``."""
    from deskscribe.audio.decode import decode_audio
    from deskscribe.whisper.features import N_SAMPLES, log_mel
    from deskscribe.whisper.model import DecoderState, WhisperModel

    model = WhisperModel(model_dir, device="cpu", threads=1)
    mel = log_mel(decode_audio(CALL)[:N_SAMPLES], model.dims.n_mels)[None]
    audio = model.encode(mel)
    tok = model.tokenizer
    tokens = [tok.sot, tok.no_timestamps]
    state = DecoderState(model, audio, 1)
    logits, _ = state.step(np.array([tokens]))
    for _ in range(GREEDY_STEPS):
        tokens.append(int(np.argmax(logits[0])))
        if tokens[-1] == tok.eot:
            break
        logits, _ = state.step(np.array([tokens[-1:]]))
    np.savez(
        out,
        k=np.stack(audio.cross_k),
        v=np.stack(audio.cross_v),
        tokens=np.array(tokens),
        flags=cpu_flags(),
        text=tok.decode(tokens),
    )


def qemu() -> str:
    found = shutil.which("qemu-x86_64")
    if found is None:
        raise SystemExit("qemu-x86_64 is missing: apt-get install qemu-user")
    return found


def _child(kind: str, args: list[str], timeout: float) -> None:
    """This script with ``args`` in a child on ``kind`` (HOST: this CPU; else a qemu CPU model)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *args]
    if kind != HOST:
        cmd = [qemu(), "-cpu", kind, *cmd]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} child failed ({done.returncode}):\n{done.stderr[-2000:]}")


def run_kind(kind: str, model_dir: Path, out: Path, timeout: float = 900) -> dict:
    """``window_numbers`` in a child on ``kind`` (HOST: this CPU; else a qemu CPU model)."""
    _child(kind, ["--child", str(model_dir), str(out)], timeout)
    got = np.load(out)
    return {
        "k": got["k"],
        "v": got["v"],
        "tokens": got["tokens"],
        "flags": json.loads(str(got["flags"])),
        "text": str(got["text"]),
    }


def integer_matmuls(weights: list[np.ndarray]) -> bytes:
    """An ONNX graph of ``MatMulInteger`` nodes, one per int8 weight ``[in, out]`` (a constant,
    as in the models, so ONNX Runtime packs it the same way): input ``a{i}`` (uint8 rows) with
    its zero point ``z{i}``, output ``y{i}`` (the int32 sums)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inputs, outputs, inits = [], [], [], []
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(w.astype(np.int8), f"w{i}"))
        inputs += [helper.make_tensor_value_info(f"a{i}", TensorProto.UINT8, [None, w.shape[0]]),
                   helper.make_tensor_value_info(f"z{i}", TensorProto.UINT8, [])]  # fmt: skip
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.INT32, None))
        nodes.append(helper.make_node("MatMulInteger", [f"a{i}", f"w{i}", f"z{i}"], [f"y{i}"]))
    g = helper.make_graph(nodes, "int8-matmuls", inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def matmul_numbers(model: str, feeds: str, out: str) -> None:
    """The child of ``run_matmuls``: ``model`` on one thread over the arrays in ``feeds``."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    got = sess.run(names, dict(np.load(feeds)))
    np.savez(out, flags=cpu_flags(), **dict(zip(names, got, strict=True)))


def run_matmuls(
    kind: str, weights: list[np.ndarray], rows: list[tuple[np.ndarray, int]], work: Path,
    timeout: float = 600,
) -> tuple[list[np.ndarray], dict]:  # fmt: skip
    """ONNX Runtime's int8 kernel of ``kind`` on uint8 ``rows`` (with their zero points) times
    int8 ``weights``: the int32 sums and the CPU flags numpy saw. Only the integer matmuls run
    under emulation: qemu emulates AVX2 float code very slowly on some hosts (a 256 x 256
    float32 matmul took 2.4 s on an Intel Xeon with AMX, where the whole-model child did not
    finish in 15 minutes), and the saturation is in the integer kernel."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "matmuls.onnx").write_bytes(integer_matmuls(weights))
    feeds = {}
    for i, (a, zero) in enumerate(rows):
        feeds[f"a{i}"] = a.astype(np.uint8)
        feeds[f"z{i}"] = np.array(zero, np.uint8)
    np.savez(work / "feeds.npz", **feeds)
    out = work / "sums.npz"
    _child(kind, ["--matmul-child", str(work / "matmuls.onnx"), str(work / "feeds.npz"),
                  str(out)], timeout)  # fmt: skip
    got = np.load(out)
    return [got[f"y{i}"] for i in range(len(weights))], json.loads(str(got["flags"]))


def rms_from(a: dict, b: dict) -> float:
    """RMS difference of two children's cross K/V (all layers, K and V together)."""
    d = np.concatenate([(a[x] - b[x]).ravel() for x in ("k", "v")]).astype(np.float64)
    return float(np.sqrt(np.mean(d * d)))


def sabotaged_int8(source: Path, dest: Path) -> Path:
    """int8 with full 8-bit weights (+-127): the build the 7-bit limit exists to prevent."""
    from deskscribe.models.build import build_model
    from deskscribe.whisper import graph

    if not (dest / "manifest.json").exists():
        kept = graph.INT8_WEIGHT_LEVELS
        graph.INT8_WEIGHT_LEVELS = 127
        try:
            build_model(source, dest, "int8", name="int8-8bit", overwrite=True)
        finally:
            graph.INT8_WEIGHT_LEVELS = kept
    return dest


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny.en")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--sabotage", action="store_true", help="add an int8 build with 8-bit weights")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    p.add_argument("--matmul-child", nargs=3, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        window_numbers(*args.child)
        return 0
    if args.matmul_child:
        matmul_numbers(*args.matmul_child)
        return 0
    qemu()
    kinds = [HOST, *[k for k in args.kinds.split(",") if k]]
    print(machine_line(1))
    print("one thread per child; the call's first 30 s window; greedy, no timestamps\n")
    rows, texts = [], []
    work = args.cache / "cpu-kinds"
    work.mkdir(parents=True, exist_ok=True)
    for name in args.models.split(","):
        source = ct2_checkpoint(name, args.cache)
        builds = {v: built_model(source, args.cache / "models" / f"{name}-{v}", v, name)[0]
                  for v in ("fp32", "int8")}  # fmt: skip
        if args.sabotage:
            builds["int8, 8-bit weights"] = sabotaged_int8(source, work / f"{name}-int8-8bit")
        got: dict[tuple[str, str], dict] = {}
        for kind in kinds:
            for label, folder in builds.items():
                got[kind, label] = run_kind(kind, folder, work / f"{name}-{kind}-{label[:4]}.npz")
                print(f"  {name} {label} on {kind}: {got[kind, label]['flags']}", file=sys.stderr)
        for label in builds:
            if label == "fp32":
                continue
            here = rms_from(got[HOST, label], got[HOST, "fp32"])
            for kind in kinds:
                one = got[kind, label]
                dist = rms_from(one, got[kind, "fp32"])
                same = np.array_equal(one["tokens"], got[HOST, label]["tokens"])
                fp32_gap = rms_from(got[kind, "fp32"], got[HOST, "fp32"])
                rows.append([name, label, kind, KINDS.get(kind, "as found"), f"{dist:.4f}",
                             f"{dist / here:.2f}x", f"{fp32_gap:.1e}",
                             "yes" if same else "no"])  # fmt: skip
                if not same:
                    texts.append(f"{name} {label} on {kind}: {one['text']}")
        texts.append(f"{name} int8 here: {got[HOST, 'int8']['text']}")
    print(markdown_table(
        ["model", "build", "CPU kind", "has", "int8 to fp32 RMS (cross K/V)", "against here",
         "fp32 to here's fp32 RMS", "greedy tokens as here"], rows))  # fmt: skip
    print()
    for line in texts:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
