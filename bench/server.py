"""The team server under load: the official openai client at 1, 4 and 8 concurrent streams.

    python bench/server.py [--model tiny.en] [--variant int8] [--levels 1,4,8] [--workers 2]
                           [--shared-batch 16,0] [--long-minutes 12] [--ray]

Starts a real ``deskscribe serve`` (loopback, its own model store) and sends it the real
recordings of ``../shared/eval`` (eleven AMI meeting clips, the phone call, jfk.flac) with
``client.audio.transcriptions.create``: at each concurrency level every file once, and
prints the throughput (seconds of audio per second of wall time), p50/p95 latency per
request. In the same run, the same
files through ``deskscribe transcribe`` (one process, one after the other) give the
baseline, so the server's overhead is a ratio measured side by side. Then one long file (the
clips concatenated to ``--long-minutes``) through the server, and with ``--ray`` the same
levels through a two-replica local Ray cluster (``deskscribe serve --ray``; needs the
``cluster`` extra). ``--shared-batch`` runs the levels once per setting of the server's
``--shared-batch`` (windows per batch that concurrent requests share; 0: not shared; with
``--shared-batch-cpu``, since on the CPU they are not shared by default), side by side, and prints how many decode calls ran in another request's batch.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from common import DEFAULT_CACHE, ROOT, built_model, ct2_checkpoint, machine_line

sys.path.insert(0, str(ROOT / "tests"))
from server_support import free_port, make_store, serve

EVAL = ROOT.parent / "shared" / "eval"
SR = 16000


def recordings() -> list[Path]:
    files = [*sorted((EVAL / "ami").glob("*.wav")), EVAL / "two-speakers.wav", EVAL / "jfk.flac"]
    return [f for f in files if f.exists()]


def seconds_of(path: Path) -> float:
    from deskscribe.audio.decode import probe

    return float(probe(path).duration or 0.0)


def long_file(files: list[Path], minutes: float, out: Path) -> Path:
    import soundfile as sf

    from deskscribe.audio.decode import decode_audio

    pieces, total = [], 0
    while total < minutes * 60 * SR:
        for f in files:
            a = decode_audio(f)
            pieces.append(a)
            total += a.shape[0]
            if total >= minutes * 60 * SR:
                break
    sf.write(out, np.concatenate(pieces)[: int(minutes * 60 * SR)], SR, subtype="PCM_16")
    return out


def level(client, files: list[Path], concurrency: int) -> dict:
    latencies: list[float] = []

    def one(path: Path) -> float:
        t0 = time.perf_counter()
        with open(path, "rb") as fh:
            client.audio.transcriptions.create(file=fh, model="whisper-1")
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        latencies = list(pool.map(one, files))
    wall = time.perf_counter() - t0
    audio = sum(seconds_of(f) for f in files)
    lat = np.array(latencies)
    return {"concurrency": concurrency, "wall": wall, "audio_per_s": audio / wall,
            "p50": float(np.percentile(lat, 50)), "p95": float(np.percentile(lat, 95))}  # fmt: skip


def merged_calls(url: str) -> int:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics") as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith("deskscribe_shared_batch_merged_calls "):
            return int(float(line.split()[1]))
    return 0


def cli_baseline(store: Path, files: list[Path], out: Path) -> float:
    """``deskscribe transcribe`` on the same files (one process; model load included)."""
    env = {**os.environ, "DESKSCRIBE_MODELS_DIR": str(store)}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "deskscribe", "transcribe", "--output-dir", str(out),
                    *map(str, files)], env=env, check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - t0


def table(rows: list[dict], title: str) -> None:
    print(f"\n{title}")
    print("| streams | wall s | audio s / s | p50 s | p95 s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['concurrency']} | {r['wall']:.1f} | {r['audio_per_s']:.1f} | "
              f"{r['p50']:.2f} | {r['p95']:.2f} |")  # fmt: skip


def main() -> int:
    import openai

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--variant", default="int8")
    ap.add_argument("--levels", default="1,4,8")
    ap.add_argument("--workers", type=int, default=2, help="the server's --workers")
    ap.add_argument("--shared-batch", default="16,0", help="the server's --shared-batch values")
    ap.add_argument("--long-minutes", type=float, default=12.0)
    ap.add_argument("--ray", action="store_true", help="also through a 2-replica Ray cluster")
    ap.add_argument("--ray-only", action="store_true", help="only the Ray levels (and baseline)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args()
    name = f"{args.model}-{args.variant}"
    folder, _ = built_model(ct2_checkpoint(args.model, args.cache),
                            args.cache / "models" / name, args.variant, name)  # fmt: skip
    files = recordings()
    audio = sum(seconds_of(f) for f in files)
    print(machine_line(os.cpu_count() or 1))
    print(f"model {name}; {len(files)} real recordings, {audio / 60:.1f} min; server --workers "
          f"{args.workers}")  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="bench-server-"))
    try:
        store = make_store(root, {name: folder})
        base = cli_baseline(store, files, root / "cli-out")
        print(f"deskscribe transcribe (one process, sequential): {base:.1f} s, "
              f"{audio / base:.1f} audio s / s")  # fmt: skip
        rows: list[dict] = []
        for n, shared in enumerate([] if args.ray_only else args.shared_batch.split(",")):
            server = serve(store, root / f"data-{n}", "--model", name, "--workers",
                           str(args.workers), "--max-queue", "64", "--max-upload-mb", "200",
                           "--shared-batch", shared, "--shared-batch-cpu")  # fmt: skip
            try:
                client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0,
                                       timeout=3600)  # fmt: skip
                level(client, files[:1], 1)  # warm-up: the model loads
                levels = [level(client, files, int(c)) for c in args.levels.split(",")]
                table(levels, f"through deskscribe serve --shared-batch {shared} (openai client)")
                print(f"decode calls in another request's batch: {merged_calls(server.url)}")
                print(f"overhead at 1 stream against deskscribe transcribe: "
                      f"{levels[0]['wall'] / base:.2f}x its time (model load included in the CLI's)")  # fmt: skip
                rows += [{**r, "shared_batch": int(shared)} for r in levels]
                if n:
                    continue
                big = long_file(files, args.long_minutes, root / "long.wav")
                t0 = time.perf_counter()
                with open(big, "rb") as fh:
                    client.audio.transcriptions.create(file=fh, model="whisper-1")
                took = time.perf_counter() - t0
                print(f"\n{args.long_minutes:g}-minute file through the server: {took:.1f} s "
                      f"({args.long_minutes * 60 / took:.1f}x real time)")  # fmt: skip
            finally:
                server.stop()
        if args.ray or args.ray_only:
            ray_rows = ray_levels(store, root, name, files, args.levels)
            table(ray_rows, "through deskscribe serve --ray (2 replicas, local cluster)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"baseline_s": base, "levels": rows}))
    return 0


def ray_levels(store: Path, root: Path, name: str, files: list[Path], levels: str) -> list[dict]:
    import openai

    port = free_port()
    tmp = root / "ray"
    ray = str(Path(sys.executable).with_name("ray"))  # the venv's, beside this Python
    subprocess.run([ray, "start", "--head", "--num-cpus", str(os.cpu_count() or 2),
                    "--port", str(port), "--include-dashboard=false",
                    f"--temp-dir={tmp}"], check=True, capture_output=True)  # fmt: skip
    try:
        server = serve(store, root / "data-ray", "--model", name, "--ray", f"127.0.0.1:{port}",
                       "--replicas", "2")  # fmt: skip
        try:
            client = openai.OpenAI(base_url=server.base_url, api_key="-", max_retries=0,
                                   timeout=3600)  # fmt: skip
            level(client, files[:2], 2)
            return [level(client, files, int(c)) for c in levels.split(",")]
        finally:
            server.stop()
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True)


if __name__ == "__main__":
    raise SystemExit(main())
