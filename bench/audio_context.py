"""Live passes with a shorter encoder context: is the text the same, and how much faster?

    python bench/audio_context.py [--models tiny.en,base] [--variants int8,fp32]
                                  [--pads none,0.5,1,2] [--cache bench/out]

A live pass decodes a buffer of a few seconds. Padded to a 30 s window, the encoder's work is
the same for 2 s as for 30 s; with ``context_pad_seconds`` only the buffer plus that much
silence (whole seconds) is encoded (whisper.cpp's ``audio_ctx``). This runs the pass the live
path runs (sequential, greedy with the temperature fallback, word timestamps) on buffers of
real speech, once per pad:

- the JFK recording (11 s) and the real phone call cut at its reference segments into
  buffers of at most 12 s: WER against the reference words;
- the first 4, 8 and 16 s of each AMI meeting clip (far-field, four people, overlap) and all
  of the above: WER against the same pass with the 30 s window (how often the text changes);
- the mean time of a pass (ms), its tokens, and how many passes fell back to sampling.

The first line gives the CPU and its int8-relevant flags (kernels differ between CPUs).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

from common import (
    DEFAULT_CACHE,
    ROOT,
    ami_clips,
    built_model,
    call_segments,
    ct2_checkpoint,
    machine_line,
    markdown_table,
    normalize,
)

EVAL = ROOT.parent / "shared" / "eval"
SR = 16000
CALL_PIECE_SECONDS = 12.0


def call_pieces(audio: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """The call cut between reference segments into buffers of at most 12 s, with their words."""
    pieces, group = [], []
    for seg in call_segments(EVAL):
        if group and seg[1] - group[0][0] > CALL_PIECE_SECONDS:
            pieces.append(group)
            group = []
        group.append(seg)
    pieces.append(group)
    out = []
    for g in pieces:
        start, end = max(0.0, g[0][0] - 0.3), g[-1][1] + 0.3
        out.append((audio[int(start * SR) : int(end * SR)], " ".join(s[2] for s in g)))
    return out


def buffers() -> tuple[list[tuple[str, np.ndarray, str | None]], float]:
    from deskscribe.audio.decode import decode_audio

    out: list[tuple[str, np.ndarray, str | None]] = []
    out.append(("jfk", decode_audio(EVAL / "jfk.flac"), (EVAL / "jfk.txt").read_text().strip()))
    for i, (audio, text) in enumerate(call_pieces(decode_audio(EVAL / "two-speakers.wav"))):
        out.append((f"call-{i}", audio, text))
    for clip in ami_clips(EVAL):
        audio = decode_audio(clip["path"])
        for seconds in (4, 8, 16):
            out.append((f"{clip['name']}-{seconds}s", audio[: seconds * SR], None))
    return out, sum(a.shape[0] for _, a, _ in out) / SR


def run_pass(model, audio: np.ndarray, pad: float | None) -> tuple[str, float, int, bool]:
    from deskscribe.whisper.options import TranscribeOptions
    from deskscribe.whisper.transcribe import transcribe_blocks

    options = TranscribeOptions(
        language="en", beam_size=None, word_timestamps=True, context_pad_seconds=pad
    )
    began = time.perf_counter()
    segments = list(transcribe_blocks(model, [audio], options))
    took = time.perf_counter() - began
    tokens = sum(len(s.tokens) for s in segments)
    fallback = any(s.temperature > 0 for s in segments)
    return " ".join(s.text for s in segments), took, tokens, fallback


def pooled_wer(pairs: list[tuple[str, str]]) -> float:
    import jiwer

    refs = [normalize(r) or "<empty>" for r, _ in pairs]
    hyps = [normalize(h) or "<empty>" for _, h in pairs]
    return float(jiwer.wer(refs, hyps))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="tiny.en,base")
    p.add_argument("--variants", default="int8,fp32")
    p.add_argument("--pads", default="none,0.5,1,2", help="seconds of silence; none: 30 s")
    p.add_argument("--threads", type=int, default=0, help="0: ONNX Runtime's choice")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = p.parse_args(argv)
    from deskscribe.whisper.model import WhisperModel

    pads = [None if v == "none" else float(v) for v in args.pads.split(",")]
    if None not in pads:
        pads.insert(0, None)  # the 30 s window is the yardstick of agreement
    bufs, seconds = buffers()
    print(f"# audio context, {machine_line(args.threads or os.cpu_count() or 0)}")
    print(f"{len(bufs)} buffers of real speech, {seconds:.0f} s in all")
    rows = []
    for m in args.models.split(","):
        for v in args.variants.split(","):
            folder = built_model(
                ct2_checkpoint(m, args.cache), args.cache / "models" / f"{m}-{v}", v, m
            )[0]
            model = WhisperModel(folder, device="cpu", threads=args.threads)
            run_pass(model, bufs[0][1], None)  # warm-up (first-run allocations)
            texts: dict[float | None, list[str]] = {}
            times: dict[float | None, list[float]] = {}
            tokens: dict[float | None, list[int]] = {}
            fallbacks: dict[float | None, int] = {}
            for pad in pads:
                done = [run_pass(model, audio, pad) for _, audio, _ in bufs]
                texts[pad] = [d[0] for d in done]
                times[pad] = [d[1] for d in done]
                tokens[pad] = [d[2] for d in done]
                fallbacks[pad] = sum(d[3] for d in done)
            for pad in pads:
                refd = [(r, h) for (_, _, r), h in zip(bufs, texts[pad], strict=True) if r]
                agree = list(zip(texts[None], texts[pad], strict=True))
                rows.append([
                    f"{m} {v}", "30 s" if pad is None else f"+{pad:g} s",
                    f"{pooled_wer(refd):.1%}", f"{pooled_wer(agree):.1%}",
                    f"{1000 * np.mean(times[pad]):.0f}", f"{np.mean(tokens[pad]):.1f}",
                    str(fallbacks[pad]),
                    f"{np.mean(times[None]) / np.mean(times[pad]):.2f}x",
                ])  # fmt: skip
                if pad is not None:
                    for (name, _, _), a, b in zip(bufs, texts[None], texts[pad], strict=True):
                        if normalize(a) != normalize(b):
                            print(f"  {m} {v} +{pad:g} s {name}:\n    30 s: {a}\n    short: {b}")
            del model
    print()
    print(markdown_table(
        ["model", "context", "WER vs reference (jfk, call)", "WER vs 30 s (all)",
         "pass ms", "tokens / pass", "passes with fallback", "speed-up"], rows))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
