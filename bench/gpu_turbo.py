"""Batched decoding of a large-v3-turbo-shaped model on a GPU: throughput per batch size.

Writes a Hugging Face checkpoint with turbo's shape and random weights (as turbo_shape.py
does; 809 M parameters, fp16), builds it (fp16 on CUDA), and times, for batch 1, 8 and 16:

- the encoder, per 30 s window (one batched run, median of ``--runs``);
- the decoder, per token, through ``WindowDecoder.decode_batch`` (our real decoding loop:
  logit filters, candidate selection, cache bookkeeping), greedy and beam 5, for ``--tokens``
  steps (random weights give garbage text, so end-of-text is suppressed);
- the real-time factor for a 10-minute file: 20 windows of ``--tokens`` tokens each, the
  encoder and decoder times above, and the VAD (measured on this machine's CPU, where it
  runs alongside the GPU work, so the slower of the two counts).

It prints the provider that really ran, the batch size ``auto_batch_size`` picks from free
GPU memory, and GPU memory in use. ``--e2e`` also runs the whole batched pipeline
(``transcribe_file(..., batched=True)``) on the bench recording, which exercises the code path
end to end (timings there are pessimistic: random weights decode the maximum length).

    python bench/gpu_turbo.py                         # on a CUDA machine: turbo shape, fp16
    python bench/gpu_turbo.py --device cpu --quick    # smoke test: a narrow model on the CPU

``--quick`` keeps turbo's vocabulary, mel bins and 4 decoder layers but narrows everything
else (d_model 256, 2 encoder layers) so the script runs in about a minute on a laptop CPU;
its figures say nothing about turbo, only that the script and code paths work.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_CACHE, machine_line, markdown_table, peak_rss_mb
from turbo_shape import ALIGNMENT_HEADS, TURBO, gpu_memory_mb, write_random_checkpoint

QUICK = {
    **TURBO,
    "d_model": 256,
    "encoder_attention_heads": 4,
    "decoder_attention_heads": 4,
    "encoder_layers": 2,
    "encoder_ffn_dim": 1024,
    "decoder_ffn_dim": 1024,
}
QUICK_ALIGNMENT_HEADS = [[2, 1], [3, 0], [3, 2]]
FILE_SECONDS = 600.0  # the 10-minute file of the estimate
WINDOWS = math.ceil(FILE_SECONDS / 30)


def write_checkpoint(folder: Path, cfg: dict, heads: list, seed: int = 0) -> None:
    """A random-weight checkpoint of ``cfg``'s shapes (turbo_shape's writer), written once."""
    marker = folder / "bench.json"
    if marker.exists() and json.loads(marker.read_text(encoding="utf-8")) == cfg:
        return
    write_random_checkpoint(folder, cfg, heads, seed)
    marker.write_text(json.dumps(cfg), encoding="utf-8")


def build(ckpt: Path, dest: Path, variant: str) -> float | None:
    from deskscribe.models.build import BUILDER_VERSION, build_model

    manifest = dest / "manifest.json"
    if manifest.exists():
        info = json.loads(manifest.read_text(encoding="utf-8"))
        if info.get("builder_version") == BUILDER_VERSION and info.get("variant") == variant:
            return None
    start = time.perf_counter()
    build_model(ckpt, dest, variant, name=f"{dest.name}", overwrite=True)
    return time.perf_counter() - start


def median_time(fn, runs: int) -> float:
    fn()  # warm-up (allocations, cuDNN algorithm choice)
    times = []
    for _ in range(max(1, runs)):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_batch(model, batch: int, tokens: int, runs: int) -> dict:
    """Encoder s per window; decoder s per token (greedy, beam 5) through decode_batch."""
    from deskscribe.whisper.decoding import DecodingOptions, WindowDecoder

    rng = np.random.default_rng(batch)
    mel = (rng.standard_normal((batch, model.n_mels, 3000)) * 0.5).astype(np.float32)
    features = None

    def encode() -> None:
        nonlocal features
        features = model.encode(mel)

    enc = median_time(encode, runs)
    tk = model.tokenizer
    out = {"batch": batch, "encoder_s_per_window": enc / batch, "encoder_batch_s": enc}
    for name, beam in (("greedy", None), ("beam5", 5)):
        # No end-of-text and no timestamps: every window decodes exactly ``tokens`` tokens.
        suppress = sorted({*WindowDecoder(model, DecodingOptions()).suppress_ids(), tk.eot})
        opts = DecodingOptions(
            beam_size=beam, sample_len=tokens, without_timestamps=True, suppress_tokens=suppress
        )
        decoder = WindowDecoder(model, opts)
        seconds = median_time(lambda d=decoder: d.decode_batch(features, "en"), max(1, runs // 2))
        out[f"{name}_batch_s"] = seconds
        out[f"{name}_s_per_token"] = seconds / (tokens * batch)
    return out


def vad_seconds_per_minute(seconds: float = 60.0) -> float:
    """CPU time of our streaming VAD per minute of audio (speech-like noise bursts)."""
    from deskscribe.whisper.chunking import speech_chunks

    rng = np.random.default_rng(0)
    audio = (rng.standard_normal(int(16000 * seconds)) * 0.1).astype(np.float32)
    blocks = [audio[i : i + 480000] for i in range(0, len(audio), 480000)]
    start = time.perf_counter()
    for _ in speech_chunks(blocks):
        pass
    return (time.perf_counter() - start) * 60.0 / seconds


def estimate(row: dict, tokens: int, vad_per_min: float) -> dict:
    """Seconds for the 10-minute file at this batch size, greedy and beam 5."""
    batches = math.ceil(WINDOWS / row["batch"])
    out = {}
    for name in ("greedy", "beam5"):
        gpu = batches * (row["encoder_batch_s"] + row[f"{name}_batch_s"])
        wall = max(gpu, vad_per_min * FILE_SECONDS / 60)  # the VAD thread runs alongside
        out[name] = {"gpu_s": gpu, "wall_s": wall, "x_real_time": FILE_SECONDS / wall}
    return out


def e2e(model, batch: int) -> dict | None:
    """The whole batched pipeline on the bench recording (if one was made)."""
    from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_file

    recordings = sorted((DEFAULT_CACHE / "audio").glob("speech-*.wav"))
    if not recordings:
        return None
    path = recordings[-1]
    start = time.perf_counter()
    transcript = transcribe_file(
        model, path, TranscribeOptions(language="en", batched=True, batch_size=batch)
    )
    seconds = time.perf_counter() - start
    return {
        "audio": path.name,
        "audio_s": transcript.duration,
        "wall_s": seconds,
        "segments": len(transcript.segments),
        "x_real_time": (transcript.duration or 0) / seconds,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cuda", "cpu", "auto"), default="cuda")
    p.add_argument("--variant", default=None, help="default: fp16 on CUDA, fp32 on the CPU")
    p.add_argument("--quick", action="store_true", help="a narrow model: a smoke test")
    p.add_argument("--batches", default="1,8,16")
    p.add_argument("--tokens", type=int, default=100, help="tokens per window")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--e2e", action="store_true", help="also run the whole batched pipeline")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = p.parse_args(argv)

    from deskscribe.whisper.batched import auto_batch_size, gpu_free_bytes
    from deskscribe.whisper.model import WhisperModel

    cfg, heads = (QUICK, QUICK_ALIGNMENT_HEADS) if args.quick else (TURBO, ALIGNMENT_HEADS)
    variant = args.variant or ("fp32" if args.device == "cpu" else "fp16")
    root = args.cache.resolve() / "gpu_turbo" / ("quick" if args.quick else "turbo")
    print(f"machine: {machine_line(args.threads or 0)}", flush=True)
    start = time.perf_counter()
    write_checkpoint(root / "checkpoint", cfg, heads)
    print(f"checkpoint ready in {time.perf_counter() - start:.1f} s", flush=True)
    built = build(root / "checkpoint", root / f"model-{variant}", variant)
    if built is not None:
        print(f"built {variant} in {built:.1f} s", flush=True)
    start = time.perf_counter()
    model = WhisperModel(root / f"model-{variant}", device=args.device, threads=args.threads)
    print(
        f"loaded in {time.perf_counter() - start:.1f} s on {model.runtime.label} "
        f"({model.runtime.provider}); notes: {'; '.join(dict.fromkeys(model.runtime.notes)) or '-'}"
    )
    free = gpu_free_bytes() if model.sessions.on_gpu else None
    print(
        f"auto batch size: {auto_batch_size(model)}"
        + (f" (free GPU memory {free / 2**30:.1f} GiB)" if free else "")
    )

    vad = vad_seconds_per_minute()
    rows = []
    for batch in [int(b) for b in args.batches.split(",") if b.strip()]:
        row = time_batch(model, batch, args.tokens, args.runs)
        row["estimate"] = estimate(row, args.tokens, vad)
        row["gpu_mb"] = gpu_memory_mb() if model.sessions.on_gpu else None
        rows.append(row)
        print(f"batch {batch}: done", flush=True)
    table = []
    for r in rows:
        est = r["estimate"]
        table.append(
            [
                r["batch"],
                f"{1000 * r['encoder_s_per_window']:.1f}",
                f"{1000 * r['greedy_s_per_token']:.2f}",
                f"{1000 * r['beam5_s_per_token']:.2f}",
                f"{est['greedy']['wall_s']:.2f} ({est['greedy']['x_real_time']:.0f}x)",
                f"{est['beam5']['wall_s']:.2f} ({est['beam5']['x_real_time']:.0f}x)",
                f"{r['gpu_mb']:.0f}" if r["gpu_mb"] else "-",
            ]
        )
    print()
    print(f"model: {model.name} ({variant}, {'quick shape' if args.quick else 'turbo shape'})")
    print(
        markdown_table(
            [
                "batch",
                "encoder ms/window",
                "decoder ms/token greedy",
                "decoder ms/token beam5",
                "10-min file s greedy",
                "10-min file s beam5",
                "GPU MiB",
            ],
            table,
        )
    )
    print(
        f"(estimate: {WINDOWS} windows x {args.tokens} tokens; VAD on this CPU "
        f"{vad:.2f} s per audio minute runs alongside and bounds the file at "
        f"{60 / vad:.0f}x real time; peak RSS {peak_rss_mb():.0f} MiB)"
    )
    result = {"variant": variant, "quick": args.quick, "provider": model.runtime.provider}
    result.update(rows=rows, vad_s_per_min=vad)
    if args.e2e:
        run = e2e(model, max(rows, key=lambda r: r["batch"])["batch"])
        if run:
            print(
                f"pipeline: {run['audio']} ({run['audio_s'] / 60:.1f} min) in {run['wall_s']:.1f} s "
                f"({run['x_real_time']:.0f}x real time, {run['segments']} segments of random text)"
            )
        result["e2e"] = run
    out = args.cache.resolve() / "results" / f"gpu_turbo-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"(raw figures: {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
