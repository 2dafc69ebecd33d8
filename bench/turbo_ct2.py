"""Ours against faster-whisper on large-v3-turbo's shape: the same random weights, int8, the
same threads, side by side.

The turbo-shaped checkpoint of ``turbo_shape.py`` (random weights, fp16 safetensors) is
built twice: by our builder (variant int8) and by CTranslate2's Transformers converter
(``--quantization int8``, in the bench-only environment of ``bench/ct2_env.sh``: transformers
on CPU torch 2.13.0). Then each engine runs in child processes of its own:

- ``micro``: the encoder per 30 s window (median of ``--runs``), and the decoder per token,
  greedy (batch 1) and beam 5: each side's whole decoding call on one encoded window with
  end-of-text suppressed, timed at ``--tokens`` + 10 and at 10 new tokens, the difference
  divided by the difference of the tokens each side actually decoded (so the prompt and the
  cross-attention set-up drop out). CTranslate2 4.8's Whisper decodes ``max_length // 2`` new
  tokens (measured on this shape and on tiny.en), so its side asks for twice as many, and
  faster-whisper's ``max_new_tokens`` N yields (prompt + N) / 2;
- ``batched``: each side's batched file path (its Silero VAD, ``--batch`` chunks at a time,
  beam 5, no timestamps, one temperature, end-of-text suppressed, ``--tokens`` per chunk)
  over the ``--minutes`` recording of ``file_speed.py``.

The weights are random, so the text is garbage; both sides are held to the same number of
tokens. Our decoder's loop guard (a repeating window ends early, as in openai/whisper) is
switched off in our children, since CTranslate2 has none and would otherwise decode more.
Peak RSS is each child's own. The CPU flags, the int8 operators in our graphs, ONNX
Runtime's time per operator in one encoder window, and CTranslate2's chosen ISA and GEMM
backend (``CT2_VERBOSE=1``) are printed with the table.

    bash bench/ct2_env.sh                      # once: the converter's environment
    python bench/turbo_ct2.py [--threads N] [--tokens 100] [--minutes 10] [--batch 8]
                              [--runs 3] [--skip-batched] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_CACHE, ROOT, emit, machine_line, markdown_table, peak_rss_mb, run_child
from turbo_shape import ALIGNMENT_HEADS, TURBO, existing_checkpoint, write_checkpoint

BEAM = 5
HEAD_TOKENS = 10  # new tokens of the shorter decoding call


# --------------------------------------------------------------------------- preparing


def ct2_source(ckpt: Path, dest: Path) -> Path:
    """The checkpoint as the converter and faster-whisper want it: the same weights (linked),
    a generation config with what a real turbo's has (suppressed tokens, languages,
    alignment heads) and a preprocessor config with 128 mel bins."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        link = dest / name
        if not link.exists():
            link.symlink_to(ckpt / name)
    vocab = json.loads((ckpt / "tokenizer.json").read_text(encoding="utf-8"))
    specials = {t["content"]: t["id"] for t in vocab.get("added_tokens", [])}
    languages = {
        c: i
        for c, i in specials.items()
        if c.startswith("<|") and c.endswith("|>") and 2 <= len(c) - 4 <= 3 and c[2:-2].isalpha()
    }
    eot = specials["<|endoftext|>"]
    generation = {
        "alignment_heads": ALIGNMENT_HEADS,
        "begin_suppress_tokens": [220, eot],
        "suppress_tokens": [],
        "lang_to_id": languages,
        "decoder_start_token_id": specials["<|startoftranscript|>"],
        "eos_token_id": eot,
        "pad_token_id": eot,
        "no_timestamps_token_id": specials["<|notimestamps|>"],
        "is_multilingual": True,
    }
    (dest / "generation_config.json").write_text(json.dumps(generation), encoding="utf-8")
    (dest / "preprocessor_config.json").write_text(
        json.dumps(
            {
                "feature_size": TURBO["num_mel_bins"],
                "sampling_rate": 16000,
                "hop_length": 160,
                "chunk_length": 30,
                "n_fft": 400,
            }
        ),
        encoding="utf-8",
    )
    return dest


def convert_ct2(source: Path, out: Path) -> float:
    """CTranslate2's converter over ``source`` into ``out`` (int8); returns its wall time."""
    python = subprocess.run(
        ["bash", str(ROOT / "bench" / "ct2_env.sh")], capture_output=True, text=True, check=True
    ).stdout.strip()
    converter = Path(python).with_name("ct2-transformers-converter")
    start = time.perf_counter()
    done = subprocess.run(
        [str(converter), "--model", str(source), "--output_dir", str(out),
         "--quantization", "int8", "--copy_files", "tokenizer.json", "preprocessor_config.json",
         "--force"],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit("the CTranslate2 converter failed:\n" + done.stderr[-3000:])
    return time.perf_counter() - start


def suppressed(tokenizer_json: Path) -> list[int]:
    """Our default suppressed set plus end-of-text: the list both sides are given."""
    from deskscribe.whisper.decoding import DecodingOptions, WindowDecoder
    from deskscribe.whisper.tokenizer import WhisperTokenizer

    class _Model:  # WindowDecoder reads only these to build the set
        tokenizer = WhisperTokenizer(tokenizer_json)

        class dims:
            n_text_ctx = TURBO["max_target_positions"]

    ids = WindowDecoder(_Model, DecodingOptions()).suppress_ids()
    return sorted({*ids, _Model.tokenizer.eot})


# --------------------------------------------------------------------------- children


def _median(fn, runs: int) -> float:
    times = []
    for _ in range(max(2, runs)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:])  # the first call warms up


def _no_loop_guard() -> None:
    import deskscribe.whisper.decoding as decoding

    decoding.looping_rows = lambda seq: np.zeros(len(seq), dtype=bool)


def _ct2_log_to(path: Path) -> None:
    """CTranslate2's verbose start-up lines (ISA, GEMM backend) go to fd 2: send it to a file."""
    os.environ["CT2_VERBOSE"] = "1"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.dup2(fd, 2)


def _ct2_lines(path: Path) -> list[str]:
    keep = ("CPU:", "ISA", "backend", "MKL", "oneDNN", "compute type")
    text = path.read_text(errors="replace") if path.exists() else ""
    lines = [line.split("] ", 1)[-1] for line in text.splitlines()]
    return [line for line in lines if any(k in line for k in keep)][:8]


def micro_worker(side: str, folder: str, threads: int, runs: int, tokens: int, ids: list) -> None:
    rng = np.random.default_rng(1)
    mel = (rng.standard_normal((1, TURBO["num_mel_bins"], 3000)) * 0.5).astype(np.float32)
    counts: dict[str, int] = {}
    log = Path(tempfile.mkstemp(suffix=".ct2.log")[1])
    if side == "ours":
        from deskscribe.whisper.decoding import DecodingOptions, WindowDecoder
        from deskscribe.whisper.model import WhisperModel

        _no_loop_guard()
        model = WhisperModel(folder, device="cpu", threads=threads)
        feats = {}
        encoder_s = _median(lambda: feats.update(x=model.encode(mel)), runs)

        def decode(n: int, beam: int) -> None:
            opt = DecodingOptions(language="en", without_timestamps=True, sample_len=n,
                                  beam_size=beam, suppress_tokens=ids, suppress_blank=False)  # fmt: skip
            got = WindowDecoder(model, opt).decode(feats["x"], "en")
            counts[f"b{beam}_n{n}"] = len(got.tokens)
    else:
        _ct2_log_to(log)
        import ctranslate2
        from faster_whisper import WhisperModel as FasterWhisper
        from faster_whisper.tokenizer import Tokenizer as FwTokenizer

        model = FasterWhisper(folder, device="cpu", compute_type="int8", cpu_threads=threads,
                              num_workers=1)  # fmt: skip
        feats = {}
        sv = ctranslate2.StorageView.from_array(mel)
        encoder_s = _median(lambda: feats.update(x=model.model.encode(sv, to_cpu=False)), runs)
        tk = FwTokenizer(model.hf_tokenizer, True, task="transcribe", language="en")
        prompt = model.get_prompt(tk, [], without_timestamps=True)

        def decode(n: int, beam: int) -> None:
            # CTranslate2 4.8's Whisper decodes max_length // 2 new tokens (measured here on
            # the turbo shape and on tiny.en alike), not max_length less the prompt.
            got = model.model.generate(feats["x"], [prompt], beam_size=beam, max_length=2 * n,
                                       suppress_tokens=ids, suppress_blank=False)  # fmt: skip
            counts[f"b{beam}_n{n}"] = len(got[0].sequences_ids[0])

    per_token = {}
    for beam in (1, BEAM):
        short = _median(lambda b=beam: decode(HEAD_TOKENS, b), runs)
        long = _median(lambda b=beam: decode(HEAD_TOKENS + tokens, b), runs)
        more = counts[f"b{beam}_n{HEAD_TOKENS + tokens}"] - counts[f"b{beam}_n{HEAD_TOKENS}"]
        per_token[f"token_b{beam}_s"] = (long - short) / max(1, more)  # tokens actually decoded
        per_token[f"decode_b{beam}_s"] = long
    emit({"encoder_s": encoder_s, **per_token, "tokens": counts, "peak_rss_mb": peak_rss_mb(),
          "ct2_log": _ct2_lines(log) if side == "fw" else []})  # fmt: skip


def batched_worker(side: str, folder: str, audio: str, threads: int, batch: int, tokens: int,
                   ids: list) -> None:  # fmt: skip
    log = Path(tempfile.mkstemp(suffix=".ct2.log")[1])
    if side == "ours":
        from deskscribe.whisper.model import WhisperModel
        from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_file

        _no_loop_guard()
        model = WhisperModel(folder, device="cpu", threads=threads)
        start = time.perf_counter()
        opts = TranscribeOptions(
            language="en", beam_size=BEAM, batched=True, batch_size=batch,
            without_timestamps=True, temperatures=(0.0,), compression_ratio_threshold=None,
            logprob_threshold=None, no_speech_threshold=None, word_timestamps=False,
            max_new_tokens=tokens, suppress_tokens=tuple(ids),
        )  # fmt: skip
        segments = transcribe_file(model, audio, opts).segments
        texts = [s.text for s in segments]
    else:
        _ct2_log_to(log)
        from faster_whisper import BatchedInferencePipeline
        from faster_whisper import WhisperModel as FasterWhisper

        model = FasterWhisper(folder, device="cpu", compute_type="int8", cpu_threads=threads,
                              num_workers=1)  # fmt: skip
        start = time.perf_counter()
        segments, _ = BatchedInferencePipeline(model).transcribe(
            audio, language="en", beam_size=BEAM, batch_size=batch, without_timestamps=True,
            temperature=0.0, compression_ratio_threshold=None, log_prob_threshold=None,
            no_speech_threshold=None, word_timestamps=False,
            # its max_length is the prompt (4 tokens here) + max_new_tokens, and CTranslate2
            # decodes half of that: ask for what makes ``tokens``
            max_new_tokens=2 * tokens - 4, suppress_tokens=ids,
        )  # fmt: skip
        segments = list(segments)
        texts = [s.text for s in segments]
    emit({"wall_s": time.perf_counter() - start, "segments": len(texts),
          "tokens": sum(len([t for t in s.tokens if t < 50257]) for s in segments),
          "chars": sum(len(t) for t in texts), "peak_rss_mb": peak_rss_mb()})  # fmt: skip


def kernels_worker(folder: str, threads: int) -> None:
    """Our int8 operators (graph op types) and ONNX Runtime's time per operator type over one
    encoder window, from its profiler."""
    import onnx
    import onnxruntime as ort

    import deskscribe.whisper.model as model_module
    import deskscribe.whisper.runtime as runtime
    from deskscribe.whisper.model import WhisperModel

    ops: dict[str, dict[str, int]] = {}
    for graph in sorted(Path(folder).glob("*.onnx")):
        proto = onnx.load(str(graph), load_external_data=False)
        kinds: dict[str, int] = {}
        for node in proto.graph.node:
            kinds[node.op_type] = kinds.get(node.op_type, 0) + 1
        ops[graph.name] = {k: v for k, v in kinds.items() if "Integer" in k or "Quant" in k}
    prof_dir = Path(tempfile.mkdtemp())
    plain = runtime.session_options

    def profiled(provider: str, threads: int = 0) -> ort.SessionOptions:
        opts = plain(provider, threads)
        opts.enable_profiling = True
        opts.profile_file_prefix = str(prof_dir / "ort")
        return opts

    runtime.session_options = model_module.session_options = profiled
    model = WhisperModel(folder, device="cpu", threads=threads)
    mel = np.zeros((1, TURBO["num_mel_bins"], 3000), np.float32)
    model.encode(mel)
    model.encode(mel)
    files = []
    for sess in (model.sessions.encoder, model.sessions.decoder):
        files.append(sess.end_profiling())
    by_op: dict[str, float] = {}
    for f in files:
        for ev in json.loads(Path(f).read_text()):
            if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time"):
                op = ev.get("args", {}).get("op_name", "?")
                by_op[op] = by_op.get(op, 0.0) + ev.get("dur", 0) / 1e6
    top = sorted(by_op.items(), key=lambda kv: -kv[1])[:8]
    emit({"ops": ops, "time_by_op": top, "ort": ort.__version__})


# --------------------------------------------------------------------------- parent


def ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}x" if theirs > 0 else "–"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--skip-batched", action="store_true")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--keep", action="store_true", help="keep the checkpoint and both models")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        kind, *rest = args.worker
        if kind == "kernels":
            kernels_worker(rest[0], args.threads)
            return 0
        side, folder, ids = rest[0], rest[1], json.loads(rest[-1])
        if kind == "micro":
            micro_worker(side, folder, args.threads, args.runs, args.tokens, ids)
        else:
            batched_worker(side, folder, rest[2], args.threads, args.batch, args.tokens, ids)
        return 0

    import onnxruntime as ort

    print(f"machine: {machine_line(args.threads)}; ONNX Runtime {ort.__version__}", flush=True)
    root = args.cache.resolve() / "turbo"
    ckpt = root / "checkpoint"
    try:
        return run(args, root, ckpt)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
            print(f"removed {root} (pass --keep to keep it)")


def run(args: argparse.Namespace, root: Path, ckpt: Path) -> int:
    if existing_checkpoint(ckpt) is None:
        shutil.rmtree(ckpt, ignore_errors=True)
        write_checkpoint(ckpt)
    ours_dir, ct2_dir = root / "model-int8", root / "ct2-int8"
    if not (ours_dir / "manifest.json").exists():
        print("building ours (int8) ...", flush=True)
        r = run_child(ROOT / "bench" / "turbo_shape.py",
                      ["--build-worker", str(ckpt), str(ours_dir), "int8"], timeout=3600)  # fmt: skip
        if "error" in r:
            raise SystemExit(f"our build failed: {r['error']}")
        print(f"  {r['build_s']:.0f} s", flush=True)
    if not (ct2_dir / "model.bin").exists():
        print("converting for CTranslate2 (int8) ...", flush=True)
        took = convert_ct2(ct2_source(ckpt, root / "ct2-source"), ct2_dir)
        print(f"  {took:.0f} s", flush=True)
    ids = json.dumps(suppressed(ckpt / "tokenizer.json"))
    me = Path(__file__)
    common = ["--threads", str(args.threads), "--tokens", str(args.tokens)]

    micro = {}
    for side, folder in (("ours", ours_dir), ("fw", ct2_dir)):
        print(f"micro: {side} ...", flush=True)
        micro[side] = run_child(
            me,
            [*common, "--runs", str(args.runs), "--worker", "micro", side, str(folder), ids],
            timeout=3600,
        )
        if "error" in micro[side]:
            raise SystemExit(f"{side} failed: {micro[side]['error']}")
        print(f"  {json.dumps({k: v for k, v in micro[side].items() if k != 'ct2_log'})}")
    batched = {}
    if not args.skip_batched:
        from file_speed import make_recording

        audio, _, duration = make_recording(args.cache.resolve(), args.minutes)
        for side, folder in (("ours", ours_dir), ("fw", ct2_dir)):
            print(f"batched over {duration / 60:.1f} min: {side} ...", flush=True)
            batched[side] = run_child(
                me,
                [*common, "--batch", str(args.batch), "--worker", "batched", side, str(folder),
                 str(audio), ids],
                timeout=7200,
            )  # fmt: skip
            if "error" in batched[side]:
                raise SystemExit(f"{side} failed: {batched[side]['error']}")
            print(f"  {json.dumps(batched[side])}", flush=True)
    kernels = run_child(me, ["--threads", str(args.threads), "--worker", "kernels",
                             str(ours_dir)], timeout=1800)  # fmt: skip

    o, f = micro["ours"], micro["fw"]
    rows = [
        ["encoder, one 30 s window (s)", f"{o['encoder_s']:.2f}", f"{f['encoder_s']:.2f}",
         ratio(o["encoder_s"], f["encoder_s"])],
        ["decoder per token, greedy, batch 1 (ms)", f"{1000 * o['token_b1_s']:.1f}",
         f"{1000 * f['token_b1_s']:.1f}", ratio(o["token_b1_s"], f["token_b1_s"])],
        [f"decoder per token, beam {BEAM} (ms)", f"{1000 * o[f'token_b{BEAM}_s']:.1f}",
         f"{1000 * f[f'token_b{BEAM}_s']:.1f}", ratio(o[f"token_b{BEAM}_s"], f[f"token_b{BEAM}_s"])],
        ["peak RSS, encoder + decoder (GiB)", f"{o['peak_rss_mb'] / 1024:.2f}",
         f"{f['peak_rss_mb'] / 1024:.2f}", ratio(o["peak_rss_mb"], f["peak_rss_mb"])],
    ]  # fmt: skip
    if batched:
        bo, bf = batched["ours"], batched["fw"]
        rows += [
            [f"batched path, {args.minutes:g} min, batch {args.batch}, beam {BEAM}, "
             f"{args.tokens} tok/chunk (s)", f"{bo['wall_s']:.0f}", f"{bf['wall_s']:.0f}",
             ratio(bo["wall_s"], bf["wall_s"])],
            ["batched path: segments / text tokens out", f"{bo['segments']} / {bo['tokens']}",
             f"{bf['segments']} / {bf['tokens']}", ""],
            ["peak RSS, batched path (GiB)", f"{bo['peak_rss_mb'] / 1024:.2f}",
             f"{bf['peak_rss_mb'] / 1024:.2f}", ratio(bo["peak_rss_mb"], bf["peak_rss_mb"])],
        ]  # fmt: skip
    print()
    print(markdown_table(["int8, turbo shape, random weights", "ours", "faster-whisper",
                          "ours / faster-whisper"], rows))  # fmt: skip
    print(f"\ntokens decoded per call (ours): {o['tokens']}")
    print(f"tokens decoded per call (faster-whisper): {f['tokens']}")
    for line in f.get("ct2_log", []):
        print(f"CTranslate2: {line}")
    if "error" not in kernels:
        for graph, ops in kernels["ops"].items():
            print(f"our int8 operators in {graph}: {ops}")
        top = ", ".join(f"{op} {s:.2f} s" for op, s in kernels["time_by_op"])
        print(f"ONNX Runtime {kernels['ort']}, two encoder windows by operator: {top}")
    else:
        print(f"kernels: {kernels['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
