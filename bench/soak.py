"""The server over a long run: is memory flat, does latency hold?

    python bench/soak.py [--minutes 60] [--model tiny.en] [--variant int8] [--streams 2]
                         [--every 1] [--realtime] [--no-shared-batch] [--env NAME=VALUE]

A real ``deskscribe serve`` answers requests from ``--streams`` clients (the official openai
SDK) without pause for ``--minutes``: the real recordings of ``../shared/eval`` in turn, in
every response format, with a streaming request now and then. With ``--realtime`` one more
client keeps a Realtime session open the whole time, streaming the recordings at 24 kHz.
Every ``--every`` minutes it samples the server's resident memory (from /proc) and the
requests' p50/p95 latency of that interval; at the end the growth of memory from the end of
the warm-up (the first 10 %, at least 2 minutes) to the end, the target being at most 5 % (from
one sample to another, and from the median of the first few to that of the last few), and
the slope of a line fitted to the second half (MiB per minute: what a day would add).

Shared batches are on (``--shared-batch-cpu``: the code path a GPU server runs) unless
``--no-shared-batch``; ``--env`` sets a variable for the server (e.g. ``MALLOC_ARENA_MAX=2``),
to compare allocator settings run by run.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from common import DEFAULT_CACHE, ROOT, built_model, ct2_checkpoint, machine_line

sys.path.insert(0, str(ROOT / "tests"))
from server_support import make_store, serve

EVAL = ROOT.parent / "shared" / "eval"
FORMATS = ("json", "verbose_json", "srt", "vtt", "text")


def rss_of(pid: int) -> float:
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def anon_of(pid: int) -> float:
    """Anonymous resident memory (the heap, not the mapped model files), MiB."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    import openai

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--variant", default="int8")
    ap.add_argument("--streams", type=int, default=2)
    ap.add_argument("--every", type=float, default=1.0, help="minutes between samples")
    ap.add_argument("--realtime", action="store_true")
    ap.add_argument("--no-shared-batch", action="store_true")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args()
    env = dict(item.split("=", 1) for item in args.env)
    name = f"{args.model}-{args.variant}"
    folder, _ = built_model(ct2_checkpoint(args.model, args.cache),
                            args.cache / "models" / name, args.variant, name)  # fmt: skip
    files = [*sorted((EVAL / "ami").glob("*.wav")), EVAL / "two-speakers.wav", EVAL / "jfk.flac"]
    print(machine_line(os.cpu_count() or 1))
    print(f"model {name}; {args.streams} client(s) for {args.minutes:g} min"
          + (" + one realtime session" if args.realtime else "")
          + ("; shared batches off" if args.no_shared_batch else "; shared batches on")
          + "".join(f"; {k}={v}" for k, v in env.items()))  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    store = make_store(root, {name: folder})
    # Batches shared between the streams' requests (on the CPU only when asked): the code
    # path a GPU server runs, soaked here too.
    shared = () if args.no_shared_batch else ("--shared-batch-cpu",)
    server = serve(store, root / "data", "--model", name, "--workers", str(args.streams),
                   "--max-queue", "64", *shared, env=env)  # fmt: skip
    stop = threading.Event()
    lock = threading.Lock()
    latencies: list[float] = []
    failures: list[str] = []
    counts = {"requests": 0, "realtime_items": 0}

    def client_loop(k: int) -> None:
        client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0, timeout=600)
        i = k
        while not stop.is_set():
            path, fmt = files[i % len(files)], FORMATS[i % len(FORMATS)]
            t0 = time.perf_counter()
            try:
                with open(path, "rb") as fh:
                    if i % 7 == 3:
                        for _ in client.audio.transcriptions.create(
                            file=fh, model="whisper-1", stream=True
                        ):
                            pass
                    else:
                        client.audio.transcriptions.create(
                            file=fh, model="whisper-1", response_format=fmt
                        )
            except Exception as e:
                with lock:
                    failures.append(f"{type(e).__name__}: {e}")
            else:
                with lock:
                    latencies.append(time.perf_counter() - t0)
                    counts["requests"] += 1
            i += args.streams

    def realtime_loop() -> None:
        import soxr

        from deskscribe.audio.decode import decode_audio

        clips = [(np.clip(soxr.resample(decode_audio(f), 16000, 24000), -1, 1) * 32767)
                 .astype("<i2") for f in files]  # fmt: skip
        try:
            asyncio.run(_realtime(server, clips, stop, lock, counts))
        except Exception as e:
            with lock:
                failures.append(f"realtime: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=client_loop, args=(k,), daemon=True)
               for k in range(args.streams)]  # fmt: skip
    if args.realtime:
        threads.append(threading.Thread(target=realtime_loop, daemon=True))
    for t in threads:
        t.start()
    samples: list[tuple[float, float, float]] = []
    t_start = time.monotonic()
    print("\n| minute | server RSS MiB | of it anonymous | requests | p50 s | p95 s | failures "
          "| realtime items |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    try:
        while (elapsed := (time.monotonic() - t_start) / 60) < args.minutes:
            time.sleep(min(args.every * 60, max(1.0, (args.minutes - elapsed) * 60)))
            with lock:
                lat, latencies[:] = np.array(latencies), []
                n, bad, rt = counts["requests"], len(failures), counts["realtime_items"]
            minute = (time.monotonic() - t_start) / 60
            rss, anon = rss_of(server.proc.pid), anon_of(server.proc.pid)
            samples.append((minute, rss, anon))
            p50 = f"{np.percentile(lat, 50):.2f}" if lat.size else "-"
            p95 = f"{np.percentile(lat, 95):.2f}" if lat.size else "-"
            print(f"| {minute:.1f} | {rss:.0f} | {anon:.0f} | {n} | {p50} | {p95} | {bad} | {rt} |",
                  flush=True)  # fmt: skip
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
    warm = max(2.0, args.minutes * 0.1)
    after = [m for t, m, _ in samples if t >= warm]
    if len(after) >= 2:
        growth = (after[-1] - after[0]) / after[0] * 100
        print(f"\nRSS after warm-up ({warm:g} min): {after[0]:.0f} -> {after[-1]:.0f} MiB, "
              f"growth {growth:+.1f} % (target <= 5 %); max {max(after):.0f} MiB")  # fmt: skip
        # One sample swings by several per cent with what is decoding at that moment: the
        # medians of the first and the last few after warm-up say more.
        k = max(1, min(5, len(after) // 4))
        a, b = float(np.median(after[:k])), float(np.median(after[-k:]))
        print(f"median of the first / last {k} samples after warm-up: {a:.0f} -> {b:.0f} MiB, "
              f"growth {(b - a) / a * 100:+.1f} %")  # fmt: skip
    late = np.array([(t, m) for t, m, _ in samples if t >= args.minutes / 2])
    if len(late) >= 3:
        slope = np.polyfit(late[:, 0], late[:, 1], 1)[0]
        print(f"second half: RSS slope {slope:+.2f} MiB/min ({slope * 1440:+.0f} MiB a day "
              f"at that rate), mean {late[:, 1].mean():.0f} MiB")  # fmt: skip
    print(f"{counts['requests']} requests, {len(failures)} failures"
          + (f"; first: {failures[0]}" if failures else ""))  # fmt: skip
    return 1 if failures else 0


async def _realtime(server, clips, stop: threading.Event, lock, counts: dict) -> None:
    """One Realtime session for the whole run: the clips streamed at real time, 100 ms at a
    time with 1 s of silence between them; completed items counted."""
    import openai

    client = openai.AsyncOpenAI(api_key="-", base_url=server.base_url,
                                websocket_base_url=server.ws_url)  # fmt: skip
    async with client.realtime.connect(extra_query={"intent": "transcription"}) as conn:
        await conn.recv()  # session.created
        await conn.session.update(session={
            "type": "transcription",
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                                "transcription": {"model": "whisper-1", "language": "en"},
                                "turn_detection": {"type": "server_vad"}}},
        })  # fmt: skip

        async def feed() -> None:
            step, silence, i = 2400, np.zeros(24000, dtype="<i2"), 0
            while not stop.is_set():
                pcm = np.concatenate([clips[i % len(clips)], silence])
                for a in range(0, pcm.shape[0], step):
                    if stop.is_set():
                        return
                    chunk = base64.b64encode(pcm[a : a + step].tobytes()).decode("ascii")
                    await conn.input_audio_buffer.append(audio=chunk)
                    await asyncio.sleep(0.1)
                i += 1

        feeder = asyncio.create_task(feed())
        try:
            while not stop.is_set():
                try:
                    event = await asyncio.wait_for(conn.recv(), 5)
                except TimeoutError:
                    continue
                if event.type == "error":
                    raise RuntimeError(f"error event: {event.error.message}")
                if event.type.endswith("input_audio_transcription.completed"):
                    with lock:
                        counts["realtime_items"] += 1
        finally:
            feeder.cancel()


if __name__ == "__main__":
    raise SystemExit(main())
