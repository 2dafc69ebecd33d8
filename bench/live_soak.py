"""Hour-long live meeting in real time: CPU, memory and latency over the hour, plotted.

    python bench/live_soak.py [--minutes 60] [--model tiny.en] [--variant int8]
                              [--capture pushed|pulse] [--out bench/out/live_soak] [--no-compare]

A real ``LiveSession`` (recorder thread, session files, streaming transcriber, health
monitor, degradation) fed in real time with the real recordings of ``../shared/eval`` (AMI
meeting clips, the phone call, jfk.flac) looped with 1 s pauses, for ``--minutes``. With
``--capture pushed`` (the default) the audio is pushed into a ``PushedCapture`` in 0.1 s
blocks on the wall clock, as a device would deliver it. With ``--capture pulse`` it goes
through the real capture path: a private PulseAudio server (the tests' ``tests/pulse.py``),
``paplay`` into a null sink, the session recording the sink's monitor through PortAudio, as
``deskscribe live --source system`` does. The session's own health
readings (once a second: CPU share of the machine, RSS, lag, decode times, commit latency) are
kept and plotted as ``<out>.png`` (matplotlib), and written as ``<out>.jsonl``.

At the end it checks what an hour must keep:
- the recording is exact: the session's track holds every pushed sample, equal to them (with
  ``pulse``: the clip is found in the track, and a second of it every minute is found again
  where it should be, with its correlation and its lag: a lost block would shift the lag);
- the transcript is complete: its WER against the file path (``transcribe_file``, the same
  model, on the same audio) — words the live path lost would show up as deletions;
- memory is flat after warm-up (least-squares slope of RSS over the second half, MiB/hour);
- latency does not grow (commit latency median of the first and the last quarter).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from common import DEFAULT_CACHE, ROOT, built_model, ct2_checkpoint, machine_line, wer
from live_memory import real_clips

sys.path.insert(0, str(ROOT / "tests"))
from conversations import best_match, clip_offset, write_wav
from pulse import PulseServer

SR = 16000
BLOCK = SR // 10


def looped(clips: list[np.ndarray], seconds: float) -> np.ndarray:
    gap = np.zeros(SR, dtype=np.float32)
    parts, n, total = [], 0, int(seconds * SR)
    while n < total:
        for clip in clips:
            for piece in (clip, gap):
                parts.append(piece)
                n += piece.shape[0]
            if n >= total:
                break
    return np.concatenate(parts)[:total]


def feed(capture, audio: np.ndarray) -> None:
    """Push ``audio`` in 0.1 s blocks on the wall clock (real time)."""
    began = time.monotonic()
    for i in range(0, audio.shape[0], BLOCK):
        capture.push(audio[i : i + BLOCK])
        time.sleep(max(0.0, began + (i + BLOCK) / SR - time.monotonic()))


def found_again(recorded: np.ndarray, audio: np.ndarray) -> str:
    """Where the played audio is in the recorded track, and a second of it every minute found
    again there: its correlation and its lag (ms) from where it should be."""
    offset = round(clip_offset(recorded, audio) * SR)
    reach = SR // 20  # 50 ms either way
    corrs, lags = [], []
    for minute in range(0, audio.shape[0] // SR, 60):
        start = minute * SR
        while (
            start + SR < audio.shape[0] and np.sqrt(np.mean(audio[start : start + SR] ** 2)) < 0.01
        ):
            start += SR // 2  # a pause between clips: the next second with speech
        piece = audio[start : start + SR]
        lo = offset + start - reach
        window = recorded[max(0, lo) : lo + SR + 2 * reach]
        if lo < 0 or window.shape[0] < SR + 2 * reach or piece.shape[0] < SR:
            corrs.append(0.0)
            continue
        best, score = best_match(window, piece)
        corrs.append(score)
        lags.append((best - reach) * 1000 / SR)
    return (
        f"found at {offset / SR:.2f} s of a {recorded.shape[0] / SR:.0f} s track; {len(corrs)} "
        f"seconds found again: correlation min {min(corrs):.2f}, lag {min(lags or [0]):+.1f} "
        f"to {max(lags or [0]):+.1f} ms"
    )


def run_pushed(model, audio: np.ndarray, on_event, streaming):
    sys.path.insert(0, str(ROOT / "tests"))
    from deskscribe.audio.sessions import read_track
    from deskscribe.service.live import LiveOptions, LiveSession
    from pushed import PushedCapture

    capture = PushedCapture(["system"], max_seconds=120)
    session = LiveSession(
        model, LiveOptions(source="system", streaming=streaming), on_event, capture=capture
    )
    session.start()
    feed(capture, audio)
    session.stop()
    transcript = session.wait(timeout=600)
    recorded = read_track(session.folder, "system")
    exact = recorded.shape[0] == audio.shape[0]
    diff = float(np.max(np.abs(recorded[: audio.shape[0]] - audio))) if exact else float("nan")
    check = (
        f"{'exact' if exact else 'LENGTH DIFFERS'} ({recorded.shape[0]} of {audio.shape[0]} "
        f"samples, max diff {diff:.1e})"
    )
    return transcript, check


def run_pulse(model, audio: np.ndarray, on_event, streaming):
    from deskscribe.audio.devices import find_device
    from deskscribe.audio.sessions import read_track
    from deskscribe.service.live import LiveOptions, LiveSession

    folder = Path(tempfile.mkdtemp(prefix="ds-live-soak-"))
    wav = write_wav(folder / "played.wav", audio)
    (folder / "pulse").mkdir()
    pulse = PulseServer(folder / "pulse")
    pulse.start()
    os.environ.update(pulse.env)
    try:
        monitor = pulse.add_null_sink("soak")
        system = find_device("system", monitor)
        options = LiveOptions(source="system", system=system, streaming=streaming)
        session = LiveSession(model, options, on_event)
        session.start()
        while session.state == "starting":
            time.sleep(0.05)
        time.sleep(2.5)  # an idle null sink renders in 2 s blocks: let audio start flowing
        player = pulse.play(wav, "soak")
        player.wait()
        time.sleep(2.0)  # the last utterance's pause: let it commit on its own
        session.stop()
        transcript = session.wait(timeout=600)
        recorded = read_track(session.folder, "system")
    finally:
        pulse.stop()
    return transcript, found_again(recorded, audio)


def repeats(text: str, n: int = 6, within: int = 40) -> int:
    """Runs of ``n`` words that already occurred in the ``within`` words before them: a live
    path that commits a phrase twice shows up here (real speech repeats short phrases)."""
    words = [w.strip('.,?!;:"').lower() for w in text.split()]
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    found, i = 0, 0
    while i < len(grams):
        if grams[i] in grams[max(0, i - within) : max(0, i - n + 1)]:
            found += 1
            i += n  # one repeated phrase counts once
        else:
            i += 1
    return found


def plot(readings: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [r["elapsed"] / 60 for r in readings]
    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    axes[0].plot(minutes, [r["cpu_percent"] for r in readings], lw=0.6, label="CPU (1 s)")
    axes[0].plot(minutes, [r["cpu_avg_percent"] for r in readings], lw=1.5, label="avg (60 s)")
    axes[0].axhline(30, color="r", ls="--", lw=0.8, label="budget 30 %")
    axes[0].set_ylabel("% of machine")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[1].plot(minutes, [r["memory_mb"] for r in readings], lw=1.2)
    axes[1].set_ylabel("RSS MiB")
    axes[2].plot(minutes, [r["commit_latency_s"] for r in readings], lw=1.2, label="commit")
    axes[2].plot(minutes, [r["behind"] for r in readings], lw=0.8, label="behind")
    axes[2].set_ylabel("seconds")
    axes[2].set_xlabel("minutes into the session")
    axes[2].legend(loc="upper right", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def slope_per_hour(readings: list[dict]) -> float:
    half = readings[len(readings) // 2 :]
    if len(half) < 2:
        return float("nan")
    hours = np.array([r["elapsed"] / 3600 for r in half])
    return float(np.polyfit(hours, [r["memory_mb"] for r in half], 1)[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--model", default="tiny.en", choices=["tiny.en", "base"])
    ap.add_argument("--variant", default="int8", choices=["int8", "fp32"])
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--out", type=Path, default=DEFAULT_CACHE / "live_soak")
    ap.add_argument("--no-compare", action="store_true", help="skip the file-path transcript")
    ap.add_argument("--capture", default="pushed", choices=["pushed", "pulse"])
    ap.add_argument("--context-pad", default="2",
                    help="seconds of silence after a live pass's audio (the live default), "
                         "or 'none' for 30 s windows")  # fmt: skip
    args = ap.parse_args()

    os.environ["DESKSCRIBE_DATA_DIR"] = tempfile.mkdtemp(prefix="deskscribe-live-soak-")
    from deskscribe.service.live import HealthReport
    from deskscribe.transcript.export import render
    from deskscribe.whisper.model import WhisperModel
    from deskscribe.whisper.streaming import StreamingOptions
    from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_blocks

    name = f"{args.model}-{args.variant}"
    folder, _ = built_model(
        ct2_checkpoint(args.model, args.cache), args.cache / "models" / name, args.variant, name
    )
    model = WhisperModel(folder, device="cpu")
    audio = looped([a for _, a in real_clips()], args.minutes * 60)
    print(f"# live soak, {machine_line(os.cpu_count() or 0)}")
    print(f"model {model.name}; {audio.shape[0] / SR / 60:.1f} min of real speech, real time, "
          f"capture {args.capture}, context pad {args.context_pad}")  # fmt: skip

    readings: list[dict] = []
    lock = threading.Lock()

    def on_event(event) -> None:
        if isinstance(event, HealthReport):
            with lock:
                readings.append(event.health.__dict__.copy())

    t0 = time.monotonic()
    run = run_pulse if args.capture == "pulse" else run_pushed
    pad = None if args.context_pad == "none" else float(args.context_pad)
    transcript, recording = run(model, audio, on_event, StreamingOptions(context_pad_seconds=pad))
    wall = time.monotonic() - t0
    live_text = " ".join(s.text for s in transcript.segments)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out.with_suffix(".jsonl"), "w", encoding="utf-8") as f:
        for r in readings:
            f.write(json.dumps(r) + "\n")
    title = f"{model.name}, {args.minutes:.0f} min live, capture {args.capture}"
    plot(readings, args.out.with_suffix(".png"), title)

    q = max(1, len(readings) // 4)
    first = [r["commit_latency_s"] for r in readings[:q]]
    last = [r["commit_latency_s"] for r in readings[-q:]]
    cpu = [r["cpu_percent"] for r in readings]
    print()
    print("| minutes | wall min | CPU avg / peak % | RSS start / end MiB | slope MiB/h (2nd half) "
          "| commit median 1st / last quarter s | behind max s | decodes | recording |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    print(
        f"| {audio.shape[0] / SR / 60:.1f} | {wall / 60:.1f} | {np.mean(cpu):.0f} / {max(cpu):.0f} "
        f"| {readings[0]['memory_mb']:.0f} / {readings[-1]['memory_mb']:.0f} "
        f"| {slope_per_hour(readings):+.1f} | {np.median(first):.2f} / {np.median(last):.2f} "
        f"| {max(r['behind'] for r in readings):.1f} | {readings[-1]['decodes']} "
        f"| {recording} |"
    )
    args.out.with_suffix(".live.txt").write_text(live_text + "\n", encoding="utf-8")
    args.out.with_suffix(".live.json").write_text(render(transcript, "json"), "utf-8")
    if not args.no_compare:
        options = TranscribeOptions()
        offline = " ".join(s.text for s in transcribe_blocks(model, [audio], options))
        args.out.with_suffix(".file.txt").write_text(offline + "\n", encoding="utf-8")
        print(f"live vs file path on the same audio: WER {wer(offline, live_text):.1%} "
              f"({len(live_text.split())} vs {len(offline.split())} words)")  # fmt: skip
        print(f"phrases of 6 words said again within 40 words: live {repeats(live_text)}, "
              f"file path {repeats(offline)}")  # fmt: skip
    print(f"plot: {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
