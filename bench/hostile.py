"""``deskscribe serve`` under hostile clients, at length: what each attack tried, what the
server did, its resident memory before and after, and how a normal client fared meanwhile.

    python bench/hostile.py [--seconds 20] [--fuzz 300] [--files-limit 512] [--model tiny.en]
                            [--only ATTACK]

Two real servers on loopback (one without keys, as a desktop user runs it; one with two keys
and an admin key, ``--max-audio-minutes 1``, ``--files-limit`` open files), each attack bounded
in count and time. While each attack runs a normal client asks ``/health`` every 0.5 s and
transcribes the JFK recording again and again: the table gives their median and worst
latency and any failure. The short versions of these attacks are tests/test_server_hostile.py.
Attacks: playlists naming the server's files, a container lying about its length, DNS
rebinding and cross-site pages, another key's jobs, chunked uploads past the limit (60 and 400
MB, with and without a key), slow headers and bodies (600 sockets from ten addresses), a
connection flood, realtime floods (64 minutes of appends, an oversized frame, a client that
never reads, a long pause setting: the server's CPU for 240 s and 480 s of speech), and
multipart forms and realtime frames fuzzed with Hypothesis.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx2 as httpx
import numpy as np

from common import DEFAULT_CACHE, ROOT, built_model, ct2_checkpoint, machine_line

sys.path.insert(0, str(ROOT / "tests"))
import hostile_support as hs
from server_support import make_store, serve

EVAL = ROOT.parent / "shared" / "eval"
JFK = EVAL / "jfk.flac"


class Normal:
    """The client nobody attacks: /health every 0.5 s, the JFK recording transcribed in a
    loop; samples kept per attack."""

    def __init__(self, server, key: str) -> None:
        self.server, self.key = server, key
        self.health: list[float] = []
        self.transcribe: list[float] = []
        self.failures: list[str] = []
        self._stop = threading.Event()
        self.quiet = threading.Event()  # set: no transcriptions (the CPU attack measures)
        self._threads = [threading.Thread(target=self._health, daemon=True),
                         threading.Thread(target=self._transcribe, daemon=True)]  # fmt: skip
        for t in self._threads:
            t.start()

    def reset(self) -> None:
        self.health, self.transcribe, self.failures = [], [], []

    def _health(self) -> None:
        while not self._stop.wait(0.5):
            t0 = time.monotonic()
            try:
                status = httpx.get(self.server.url + "/health", timeout=10).status_code
            except httpx.HTTPError as e:
                status = type(e).__name__
            if status == 200:
                self.health.append(time.monotonic() - t0)
            else:
                self.failures.append(f"health: {status}")

    def _transcribe(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        while not self._stop.is_set():
            if self.quiet.is_set():
                time.sleep(0.2)
                continue
            t0 = time.monotonic()
            try:
                r = httpx.post(self.server.base_url + "/audio/transcriptions", headers=headers,
                               files={"file": JFK.open("rb")}, data={"model": "whisper-1"},
                               timeout=120)  # fmt: skip
                ok = r.status_code == 200 and "country" in r.text
            except httpx.HTTPError:
                ok = False
            if ok:
                self.transcribe.append(time.monotonic() - t0)
            else:
                self.failures.append("transcribe")

    def stop(self) -> None:
        self._stop.set()


def run_attack(name: str, fn: Callable[[], tuple[str, str, bool]], servers, normal, rows):
    pids = [s.proc.pid for s in servers]
    before = [hs.rss_kib(p) / 1024 for p in pids]
    normal.reset()
    t0 = time.monotonic()
    try:
        tried, did, ok = fn()
    except Exception as e:  # an attack that breaks the bench is a finding too
        tried, did, ok = "?", f"bench error: {type(e).__name__}: {e}"[:120], False
    took = time.monotonic() - t0
    after = [hs.rss_kib(p) / 1024 for p in pids]
    health = normal.health or [float("nan")]
    trans = normal.transcribe or [float("nan")]
    alive = all(s.proc.poll() is None for s in servers)
    rows.append((name, tried, did, "yes" if ok and alive else "NO",
                 " / ".join(f"{b:.0f}->{a:.0f}" for b, a in zip(before, after, strict=True)),
                 f"{1000 * statistics.median(health):.0f} / {1000 * max(health):.0f}",
                 f"{statistics.median(trans):.2f} ({len(normal.transcribe)})",
                 str(len(normal.failures)), f"{took:.0f}"))  # fmt: skip
    print(f"  {name}: {did} [{'passed' if ok else 'FAILED'}]", flush=True)


# --------------------------------------------------------------------------- the attacks


def attacks(args, open_srv, keyed, keys, tmp: Path, normal) -> list[tuple[str, Callable]]:
    from media import tone, write_media

    auth = {"Authorization": f"Bearer {keys['one']}"}
    secret = tmp / "secret.wav"
    subprocess.run(["espeak-ng", "-w", str(secret), "The vault opens with the code seven four "
                    "nine on Sunday morning."], check=True, capture_output=True)  # fmt: skip
    words = ("opens", "749", "sunday", "morning", "vault")

    def playlists():
        uploads = keyed.data / "server" / "uploads"
        answers = []
        for target, n, sec in ((str(secret), 1, 10.0), (os.path.relpath(secret, uploads), 1, 10.0),
                               (str(secret), 20, 0.1)):  # fmt: skip
            m3u8 = hs.playlist(tmp / "talk.m3u8", target, n, sec)
            for route in ("/audio/transcriptions", "/jobs"):
                r = httpx.post(keyed.base_url + route, headers=auth, timeout=60,
                               files={"file": m3u8.open("rb")}, data={"model": "whisper-1"})  # fmt: skip
                answers.append((r.status_code, r.text.lower()))
        leaked = any(w in text for _, text in answers for w in words)
        codes = sorted({c for c, _ in answers})
        return ("6 playlists (absolute, ../, 20 x EXTINF:0.1)", f"{codes}, words leaked: {leaked}",
                codes == [400] and not leaked)  # fmt: skip

    def liar():
        path = hs.claims_one_second(write_media(tmp / "liar.mkv", tone(90.0, 16000), 16000, "flac"))
        r = httpx.post(keyed.base_url + "/audio/transcriptions", headers=auth, timeout=60,
                       files={"file": path.open("rb")}, data={"model": "whisper-1"})  # fmt: skip
        return ("90 s of audio whose header says 1 s (limit 1 min)", f"{r.status_code} "
                f"{r.json()['error']['code']}", r.status_code == 413)  # fmt: skip

    def web():
        base = open_srv.base_url
        a = httpx.get(base + "/jobs", headers={"Host": "rebind.evil.example"}).status_code
        b = httpx.post(base + "/jobs", headers={"Origin": "https://evil.example"},
                       files={"file": JFK.open("rb")}).status_code  # fmt: skip
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect as ws_connect

        try:
            ws_connect(f"{open_srv.ws_url}/realtime?intent=transcription",
                       origin="https://evil.example", open_timeout=10).close()  # fmt: skip
            c = 101
        except InvalidStatus as e:
            c = e.response.status_code
        made = len(httpx.get(base + "/jobs").json()["data"])
        return ("rebinding Host, cross-site POST, cross-site WebSocket",
                f"{a}, {b}, {c}; jobs made: {made}", (a, b, c, made) == (421, 403, 403, 0))  # fmt: skip

    def other_key():
        job = httpx.post(keyed.base_url + "/jobs", headers=auth,
                         files={"file": JFK.open("rb")}).json()["id"]  # fmt: skip
        two = {"Authorization": f"Bearer {keys['two']}"}
        codes = [httpx.request(m, keyed.base_url + p, headers=two).status_code
                 for m, p in (("GET", f"/jobs/{job}"), ("GET", f"/jobs/{job}/result"),
                              ("DELETE", f"/jobs/{job}"))]  # fmt: skip
        listed = job in [
            j["id"] for j in httpx.get(keyed.base_url + "/jobs", headers=two).json()["data"]
        ]
        admin = httpx.get(f"{keyed.base_url}/jobs/{job}",
                          headers={"Authorization": f"Bearer {keys['admin']}"}).status_code  # fmt: skip
        return ("key 2 reads, fetches, deletes and lists key 1's job",
                f"{codes}, listed: {listed}, admin: {admin}",
                codes == [404] * 3 and not listed and admin == 200)  # fmt: skip

    def chunked(megabytes: int, key: str | None, server):
        def attack():
            pid = server.proc.pid
            before = hs.written(pid)
            answer = hs.chunked_upload(server.port, megabytes, key)
            wrote = (hs.written(pid) - before) / 2**20
            status = answer[9:12].decode(errors="replace")
            spooled = sum(f.stat().st_size for f in Path(server.tmpdir).rglob("*") if f.is_file())
            want = "401" if key and key.endswith("wrong") else "413"
            bound = 1 if want == "401" else 25 + 1
            return (f"{megabytes} MB chunked" + (" with a wrong key" if want == "401" else ""),
                    f"{status}, {wrote:.1f} MiB written, TMPDIR {spooled // 1024} KiB",
                    status == want and wrote <= bound and spooled < 65536)  # fmt: skip

        return attack

    def slowloris():
        flood = hs.SlowFlood(keyed.port, 600, [f"127.0.0.{i}" for i in range(2, 12)])
        held = len(flood.sockets)
        deadline = time.monotonic() + args.seconds
        while flood.still_open() and time.monotonic() < deadline:
            time.sleep(0.5)
        left = flood.still_open()
        flood.stop()
        return ("600 slow-header / slow-body sockets, 10 addresses, a byte a second",
                f"{held} opened, {left} open after {args.seconds:g} s", left == 0)  # fmt: skip

    def conn_flood():
        socks, refused = [], 0
        for _ in range(3000):
            try:
                socks.append(hs.connect(keyed.port, "127.0.0.20"))
            except OSError:
                refused += 1
        time.sleep(12)  # past the header timeout
        for s in socks:
            s.setblocking(False)
        open_ = sum(not hs._closed(s) for s in socks)
        for s in socks:
            s.close()
        return ("3000 idle connections from one address", f"{open_} still open after 12 s",
                open_ == 0)  # fmt: skip

    def rt_flood():
        from websockets.sync.client import connect as ws_connect

        noise = (np.random.default_rng(0).standard_normal(24000 * 30) * 3000).astype("<i2")
        append = json.dumps({"type": "input_audio_buffer.append",
                             "audio": base64.b64encode(noise.tobytes()).decode()})  # fmt: skip
        taken0 = hs.realtime_seconds(keyed.url, keys["admin"])
        with ws_connect(f"{keyed.ws_url}/realtime?intent=transcription", additional_headers=auth,
                        max_size=None) as ws:  # fmt: skip
            t0 = time.monotonic()
            sent = 0
            while time.monotonic() - t0 < args.seconds and sent < 64 * 60:
                ws.send(append)
                sent += 30
            took = time.monotonic() - t0
            taken = hs.realtime_seconds(keyed.url, keys["admin"]) - taken0
        return (f"30 s appends for {args.seconds:g} s (up to 64 min)",
                f"{sent} s sent, {taken:.0f} s taken in {took:.0f} s",
                taken <= 60 + 10 * took + 50)  # fmt: skip

    def rt_big():
        from websockets.sync.client import connect as ws_connect

        with ws_connect(f"{keyed.ws_url}/realtime?intent=transcription", additional_headers=auth,
                        max_size=None) as ws:  # fmt: skip
            ws.recv(timeout=30)
            ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": "A" * (15 << 20)}))
            try:
                ws.recv(timeout=30)
                code = None
            except Exception:
                code = ws.close_code
        return ("one 15 MiB append (OpenAI's event limit)", f"closed {code}", code == 1009)

    def rt_silent():
        got, closed = hs.silent_client(keyed.port, f"{keyed.ws_url}/realtime?intent=transcription",
                                       auth, json.dumps({"type": "y" * 60}), args.seconds)  # fmt: skip
        return ("a client that sends bad events and never reads", f"closed: {closed} after "
                f"{got} events read", closed)  # fmt: skip

    def rt_cpu():
        from deskscribe.audio.decode import decode_audio

        normal.quiet.set()  # its transcriptions would count in the server's CPU
        time.sleep(5)
        call = decode_audio(EVAL / "two-speakers.wav")
        cpu = {}
        for seconds in (240, 480):
            audio = np.tile(call, int(np.ceil(seconds * 16000 / call.shape[0])))[: seconds * 16000]
            cpu[seconds] = _stream_cpu(keyed, auth, audio)
        normal.quiet.clear()
        ratio = cpu[480] / max(cpu[240], 1e-6)
        return ("silence_duration_ms=10000, 240 s then 480 s of a real call",
                f"server CPU {cpu[240]:.1f} s, {cpu[480]:.1f} s (x{ratio:.2f})", ratio < 2.6)  # fmt: skip

    return [
        ("playlists", playlists), ("lying duration", liar), ("web pages", web),
        ("another key's job", other_key),
        ("chunked 60 MB", chunked(60, None, open_srv)),
        ("chunked 400 MB", chunked(400, None, open_srv)),
        ("400 MB, wrong key", chunked(400, "ds-wrong", keyed)),
        ("slowloris", slowloris), ("connection flood", conn_flood),
        ("realtime flood", rt_flood), ("realtime 15 MiB frame", rt_big),
        ("realtime, never reads", rt_silent), ("realtime CPU", rt_cpu),
        ("fuzzed forms", lambda: fuzz_forms(open_srv, args.fuzz)),
        ("fuzzed realtime", lambda: fuzz_realtime(keyed, auth, args.fuzz)),
    ]  # fmt: skip


def _stream_cpu(server, auth: dict, audio: np.ndarray) -> float:
    """Stream ``audio`` to a session with a 10 s end-of-turn pause as fast as the server takes
    it (reading its events meanwhile, as a client must), commit, wait for the last item; the
    server's CPU seconds meanwhile."""
    import soxr
    from websockets.sync.client import connect as ws_connect

    pcm = (np.clip(soxr.resample(audio, 16000, 24000), -1, 1) * 32767).astype("<i2").tobytes()
    pid = server.proc.pid
    cpu0 = hs.cpu_seconds(pid)
    with ws_connect(f"{server.ws_url}/realtime?intent=transcription", additional_headers=auth,
                    max_size=None) as ws:  # fmt: skip
        ws.recv(timeout=30)
        done = threading.Event()

        def read() -> None:  # until the commit's item is completed
            while True:
                event = json.loads(ws.recv(timeout=900))
                if event["type"] == "input_audio_buffer.committed" and done.is_set():
                    item = event["item_id"]
                    while (
                        not (e := json.loads(ws.recv(timeout=900)))["type"].endswith(
                            ("completed", "failed")
                        )
                        or e.get("item_id") != item
                    ):
                        pass
                    return

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        ws.send(json.dumps({"type": "session.update", "session": {"type": "transcription",
            "audio": {"input": {"turn_detection": {"type": "server_vad",
                                                    "silence_duration_ms": 10000}}}}}))  # fmt: skip
        step = 24000 * 2  # 1 s
        for i in range(0, len(pcm), step):
            ws.send(json.dumps({"type": "input_audio_buffer.append",
                                "audio": base64.b64encode(pcm[i : i + step]).decode()}))  # fmt: skip
        done.set()
        ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
        reader.join(900)
    return hs.cpu_seconds(pid) - cpu0


# --------------------------------------------------------------------------- fuzzing


def fuzz_forms(server, examples: int):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    seen: dict[int, int] = {}
    bad: list[str] = []
    text = st.text(max_size=40)
    field = st.tuples(st.sampled_from(["model", "language", "prompt", "response_format",
                                       "temperature", "timestamp_granularities[]", "stream",
                                       "include[]", "chunking_strategy", "speakers", "x"]), text)  # fmt: skip

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(fields=st.lists(field, max_size=8), name=st.text(max_size=60),
           data=st.binary(max_size=2048), cut=st.integers(0, 64))  # fmt: skip
    def one(fields, name, data, cut):
        body = b""
        for k, v in fields:
            body += (f'--{hs.BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n'
                     ).encode() + v.encode("utf-8", "surrogatepass") + b"\r\n"  # fmt: skip
        safe = name.replace('"', "").replace("\r", "").replace("\n", "")
        body += hs.multipart_head({}, safe).replace(b'filename=""', b'filename="x"') + data
        body += hs.multipart_tail()[: max(1, len(hs.multipart_tail()) - cut)]
        r = httpx.post(server.base_url + "/audio/transcriptions", content=body, timeout=60,
                       headers={"Content-Type": f"multipart/form-data; boundary={hs.BOUNDARY}"})  # fmt: skip
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        if r.status_code >= 500 or "error" not in r.json():
            bad.append(f"{r.status_code}: {r.text[:80]}")

    one()
    return (f"{examples} random forms (fields, names, bytes, cut endings)",
            f"statuses {dict(sorted(seen.items()))}, 5xx or no envelope: {len(bad)}", not bad)  # fmt: skip


def fuzz_realtime(server, auth: dict, examples: int):
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from websockets.sync.client import connect as ws_connect

    kinds = [
        "session.update",
        "transcription_session.update",
        "input_audio_buffer.append",
        "input_audio_buffer.commit",
        "input_audio_buffer.clear",
        "response.create",
    ]
    leaf = (
        st.none()
        | st.booleans()
        | st.integers(-(10**6), 10**6)
        | st.floats()
        | st.text(max_size=30)
    )
    value = st.recursive(leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(
        st.text(max_size=12), c, max_size=4), max_leaves=12)  # fmt: skip
    events: list = []

    @settings(max_examples=examples, deadline=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(kind=st.sampled_from(kinds) | st.text(max_size=20),
           body=st.dictionaries(st.sampled_from(["session", "audio", "event_id", "item_id"]),
                                value, max_size=3))  # fmt: skip
    def one(kind, body):
        events.append(json.dumps({"type": kind, **body}, allow_nan=True))

    one()
    server_errors = 0
    closed_early = False
    with ws_connect(f"{server.ws_url}/realtime?intent=transcription", additional_headers=auth,
                    max_size=None) as ws:  # fmt: skip
        ws.recv(timeout=30)
        for event in events:
            ws.send(event)
        ws.send(json.dumps({"type": "input_audio_buffer.clear"}))
        try:
            while True:
                e = json.loads(ws.recv(timeout=10))
                if e["type"] == "error" and e["error"]["type"] == "server_error":
                    server_errors += 1
                if e["type"] == "input_audio_buffer.cleared":
                    break
        except TimeoutError:
            pass
        except Exception:
            closed_early = True
    return (f"{len(events)} random realtime events", f"server errors {server_errors}, closed: "
            f"{closed_early}", not server_errors and not closed_early)  # fmt: skip


# --------------------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="length of the timed attacks")
    ap.add_argument("--fuzz", type=int, default=300, help="examples per fuzzed target")
    ap.add_argument("--files-limit", type=int, default=512, help="the keyed server's ulimit -n")
    ap.add_argument("--model", default="tiny.en")
    ap.add_argument("--only", action="append", default=[], metavar="ATTACK",
                    help="run only the attacks whose name contains this (repeatable)")  # fmt: skip
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = ap.parse_args()
    from deskscribe.server.config import new_key

    name = f"{args.model}-fp32"
    folder, _ = built_model(ct2_checkpoint(args.model, args.cache),
                            args.cache / "models" / name, "fp32", name)  # fmt: skip
    tmp = Path(tempfile.mkdtemp(prefix="bench-hostile-"))
    store = make_store(tmp, {name: folder})
    keys = {"one": new_key(tmp / "keys.txt"), "two": new_key(tmp / "keys.txt"),
            "admin": new_key(tmp / "admin.txt")}  # fmt: skip
    spool = {k: tmp / f"tmp-{k}" for k in ("open", "keyed")}
    for d in spool.values():
        d.mkdir()
    open_srv = serve(store, tmp / "open", env={"TMPDIR": str(spool["open"])})
    keyed = serve(store, tmp / "keyed", "--api-key-file", str(tmp / "keys.txt"),
                  "--admin-key-file", str(tmp / "admin.txt"), "--max-audio-minutes", "1",
                  env={"TMPDIR": str(spool["keyed"])}, files_limit=args.files_limit)  # fmt: skip
    open_srv.tmpdir, keyed.tmpdir = spool["open"], spool["keyed"]
    print(machine_line(os.cpu_count() or 1))
    print(f"model {name}; keyed server: ulimit -n {args.files_limit}, --max-audio-minutes 1")
    normal = Normal(keyed, keys["one"])
    rows: list[tuple] = []
    try:
        time.sleep(3)
        for label, fn in attacks(args, open_srv, keyed, keys, tmp, normal):
            if not args.only or any(o in label for o in args.only):
                run_attack(label, fn, [open_srv, keyed], normal, rows)
    finally:
        normal.stop()
        open_srv.stop()
        keyed.stop()
    head = ("attack", "tried", "the server", "passed", "RSS MiB (open / keyed)",
            "/health ms p50 / max", "normal request s (n)", "normal failures", "s")  # fmt: skip
    print("\n| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    passed = sum(r[3] == "yes" for r in rows)
    print(f"\n{passed} of {len(rows)} attacks passed")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
