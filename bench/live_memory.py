"""Long live session: hours of real speech through the service layer; is memory flat?

    python bench/live_memory.py [--hours 2] [--model tiny.en] [--variant int8] [--every 10]

Runs a real ``LiveSession`` (the one the window and ``deskscribe live`` drive: recorder thread,
session files on disk, streaming transcriber, transcript store, events) on a
``PushedCapture`` fed with the real recordings of ``../shared/eval`` (AMI meeting clips, the
phone call, jfk.flac) one after the other, over and over, as fast as recognition takes them
(never more than 4 s of audio waiting for it), so two hours of meeting take less than two
hours. Nobody
reads the session's events (no callback, no reader): the bounded event queue must not grow
past its limit.

Every ``--every`` minutes of audio it prints the resident memory (RSS), the events waiting,
the committed segments and how far behind recognition is; at the end the growth from the
first checkpoint and the slope over the second half (MiB per hour of audio). Flat means the
slope is the size of the transcript itself (a few hundred KiB an hour), not of the audio.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import DEFAULT_CACHE, ROOT, built_model, ct2_checkpoint, machine_line, rss_mb

EVAL = ROOT.parent / "shared" / "eval"
SR = 16000
BLOCK = SR // 2


def trimmed_rss_mb() -> float:
    """RSS after handing freed heap back to the system (glibc ``malloc_trim``), so that what
    is counted is memory still in use, not free pages the allocator kept."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: RSS as it is
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return rss_mb()


def real_clips() -> list[tuple[str, np.ndarray]]:
    from deskscribe.audio.decode import decode_audio

    paths = [*sorted((EVAL / "ami").glob("*.wav")), EVAL / "two-speakers.wav", EVAL / "jfk.flac"]
    clips = [(p.name, decode_audio(p)) for p in paths if p.exists()]
    if not clips:
        raise SystemExit(f"no real recordings in {EVAL}")
    return clips


def _slope(points: list[tuple[float, float]]) -> float:
    hours = np.array([h for h, _ in points])
    mib = np.array([m for _, m in points])
    return float(np.polyfit(hours, mib, 1)[0]) if np.ptp(hours) > 0 else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--model", default="tiny.en", choices=["tiny.en", "base"])
    ap.add_argument("--variant", default="int8", choices=["int8", "fp32", "fp16"])
    ap.add_argument("--every", type=float, default=10.0, help="minutes of audio per checkpoint")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args()

    data = Path(tempfile.mkdtemp(prefix="deskscribe-live-memory-"))
    os.environ["DESKSCRIBE_DATA_DIR"] = str(data)  # the session folder goes here
    sys.path.insert(0, str(ROOT / "tests"))
    from deskscribe.service.live import LiveOptions, LiveSession
    from deskscribe.whisper.model import WhisperModel
    from pushed import PushedCapture

    folder, _ = built_model(
        ct2_checkpoint(args.model, args.cache),
        args.cache / "models" / f"{args.model}-{args.variant}",
        args.variant,
        f"{args.model}-{args.variant}",
    )
    model = WhisperModel(folder, device="cpu")
    clips = real_clips()
    print(machine_line(model.runtime.threads or os.cpu_count() or 1))
    print(
        f"model {model.name} on {model.runtime.label}; {len(clips)} real recordings "
        f"({sum(a.shape[0] for _, a in clips) / SR / 60:.1f} min) looped to {args.hours} h"
    )
    capture = PushedCapture(["system"])
    session = LiveSession(model, LiveOptions(source="system"), capture=capture)
    session.start()
    total = int(args.hours * 3600 * SR)
    every = int(args.every * 60 * SR)
    pushed, next_mark, t0 = 0, every, time.monotonic()
    marks: list[tuple[float, float]] = []  # (hours of audio, RSS MiB)
    print(
        "| audio | wall | RSS MiB | RSS trimmed | Python blocks | events waiting | dropped "
        "| segments | behind s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    gap = np.zeros(SR, dtype=np.float32)
    while pushed < total:
        for _name, audio in clips:
            for piece in (audio, gap):
                for i in range(0, piece.shape[0], BLOCK):
                    block = piece[i : i + BLOCK][: total - pushed]
                    if not block.shape[0]:
                        break
                    capture.push(block)
                    pushed += block.shape[0]
                    while capture.waiting_seconds() + session.queued_seconds > 4.0:
                        time.sleep(0.02)
                    if pushed >= next_mark:
                        next_mark += every
                        hours = pushed / SR / 3600
                        rss = rss_mb()
                        trimmed = trimmed_rss_mb()
                        marks.append((hours, trimmed))
                        print(
                            f"| {hours * 60:.0f} min | {(time.monotonic() - t0) / 60:.1f} min "
                            f"| {rss:.0f} | {trimmed:.0f} | {sys.getallocatedblocks()} "
                            f"| {session.events.qsize()} | {session.events.dropped} "
                            f"| {len(session.store)} | {session.behind_seconds:.1f} |",
                            flush=True,
                        )
                if pushed >= total:
                    break
            if pushed >= total:
                break
    session.stop()
    transcript = session.wait(600)
    wall = time.monotonic() - t0
    words = len(transcript.text.split()) if transcript else 0
    print(
        f"\n{pushed / SR / 3600:.2f} h of audio in {wall / 60:.1f} min "
        f"({pushed / SR / wall:.1f}x real time); {words} words; final RSS {rss_mb():.0f} MiB; "
        f"events waiting {session.events.qsize()} (dropped {session.events.dropped})"
    )
    if len(marks) >= 3:
        later = marks[1:]  # from the second checkpoint: the models' arenas have grown by then
        print(
            f"trimmed RSS: {marks[0][1]:.0f} MiB at the first checkpoint, "
            f"{min(m for _, m in later):.0f}-{max(m for _, m in later):.0f} MiB after it; "
            f"least-squares slope {_slope(later):+.1f} MiB per hour of audio"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
