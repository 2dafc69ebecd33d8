"""Whole-process time of transcribing one short file: ``deskscribe transcribe`` against the
equivalent faster-whisper script, on the same weights, side by side.

Everything a user waits for is in the figure: Python start, imports, model load, the VAD,
decoding and writing the text. Runs alternate (ours, theirs, ours, ...) so that a drifting
machine moves both; each figure is the median of ``--runs``, with the user+system CPU
time of the finished child (``resource.getrusage``). Files: the first 10 s of JFK's speech and
3 minutes of real meeting audio (six 30 s AMI clips end to end). Both sides int8 on the CPU, the
batched path (Silero VAD, batch 8), beam 5, English, the same threads.

Both sides start from compiled bytecode, as installed apps do (pip compiles a wheel's modules
when it installs them, the installers ship them compiled): faster-whisper's site-packages
already hold it, our editable checkout gets it from ``compileall`` first. With
``PYTHONDONTWRITEBYTECODE`` set (as on the development box) and no ``__pycache__``, every run
of ours compiled its modules again: 0.13 s of a 1.1 s run.

    python bench/short_files.py [--whisper tiny.en|base] [--runs 7] [--threads 2]
    python bench/short_files.py --peer FILE CT2_FOLDER THREADS     # the faster-whisper side
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_CACHE, ROOT, built_model, ct2_checkpoint, machine_line, markdown_table

EVAL = ROOT.parent / "shared" / "eval"


def peer(path: str, folder: str, threads: int) -> None:
    """What a faster-whisper user writes: load, transcribe batched, write the text."""
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(folder, device="cpu", compute_type="int8", cpu_threads=threads)
    segments, _ = BatchedInferencePipeline(model).transcribe(
        path, language="en", beam_size=5, batch_size=8
    )
    text = "\n".join(s.text.strip() for s in segments)
    Path(path).with_suffix(".peer.txt").write_text(text + "\n", encoding="utf-8")


def recordings(cache: Path) -> dict[str, Path]:
    out = cache / "short-files"
    out.mkdir(parents=True, exist_ok=True)
    ten, three = out / "jfk-10s.wav", out / "meeting-180s.wav"
    if not ten.exists():
        subprocess.run(["sox", str(EVAL / "jfk.flac"), "-r", "16000", "-c", "1", str(ten),
                        "trim", "0", "10"], check=True)  # fmt: skip
    if not three.exists():
        clips = [
            str(EVAL / "ami" / f"{c}.wav")
            for c in ("dev00", "trn03", "trn05", "dev01", "trn01", "trn07")
        ]
        subprocess.run(["sox", *clips, "-r", "16000", "-c", "1", str(three)], check=True)
    return {"10 s": ten, "3 min": three}


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, user + system CPU s) of one whole process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed:\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--whisper", default="tiny.en", choices=["tiny.en", "base"])
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    p.add_argument("--peer", nargs=3, metavar=("FILE", "CT2", "THREADS"))
    args = p.parse_args()
    if args.peer:
        peer(args.peer[0], args.peer[1], int(args.peer[2]))
        return 0
    source = ct2_checkpoint(args.whisper, args.cache)
    ours_model, _ = built_model(
        source, args.cache / "models" / f"{args.whisper}-int8", "int8", args.whisper
    )
    import deskscribe

    compileall.compile_dir(Path(deskscribe.__file__).parent, quiet=1)
    work = Path(tempfile.mkdtemp(prefix="short-files-"))
    env = dict(os.environ, DESKSCRIBE_DATA_DIR=str(work / "data"),
               DESKSCRIBE_SETTINGS=str(work / "settings.json"))  # fmt: skip
    print(f"machine: {machine_line(args.threads)}")
    print(f"Whisper {args.whisper} int8 on both sides, {args.threads} threads, beam 5, "
          f"batched (batch 8), {args.runs} runs each, alternating; medians\n")  # fmt: skip
    rows = []
    for label, path in recordings(args.cache).items():
        ours = [sys.executable, "-m", "deskscribe", "transcribe", str(path), "--model",
                str(ours_model), "--device", "cpu", "--threads", str(args.threads),
                "--beam-size", "5", "--batch-size", "8", "--language", "en", "--quiet",
                "--overwrite", "--output-dir", str(work)]  # fmt: skip
        theirs = [sys.executable, __file__, "--peer", str(path), str(source), str(args.threads)]
        timed(ours, env), timed(theirs, env)  # warm the page cache for both
        a, b = [], []
        for _ in range(args.runs):
            a.append(timed(ours, env))
            b.append(timed(theirs, env))
        med = [statistics.median(x[i] for x in runs) for runs in (a, b) for i in range(2)]
        ratio = statistics.median(x[0] / y[0] for x, y in zip(a, b, strict=True))
        rows.append([label, f"{med[0]:.2f}", f"{med[2]:.2f}", f"{ratio:.2f}x",
                     f"{med[1]:.2f}", f"{med[3]:.2f}"])  # fmt: skip
        print(f"  {label}: ours {med[0]:.2f} s, faster-whisper {med[2]:.2f} s", file=sys.stderr)
    print(markdown_table(
        ["file", "ours wall s", "faster-whisper wall s", "ratio (paired median)",
         "ours CPU s", "faster-whisper CPU s"], rows))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
