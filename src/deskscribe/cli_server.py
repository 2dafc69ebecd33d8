"""``deskscribe serve``: the team server (needs the ``server`` extra)."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
from pathlib import Path

log = logging.getLogger(__name__)

INSTALL_HINT = 'the server needs its extra: pip install "deskscribe[server]"'


def add_parsers(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser(
        "serve",
        help="serve OpenAI's speech API (REST, realtime) and a job queue to a team",
        description="Serve DeskScribe's engine with OpenAI's audio API: any tool or SDK that "
        "speaks it (base URL http://HOST:PORT/v1) works unchanged.",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--model", help="the default model (what 'whisper-1' means)")
    s.add_argument("--compute", choices=["auto", "cpu", "gpu", "cuda", "directml", "coreml"],
                   default="auto", help="where the models run")  # fmt: skip
    s.add_argument("--api-key-file", type=Path, metavar="FILE",
                   help="hashes of the allowed keys (make one with --new-key FILE)")  # fmt: skip
    s.add_argument("--admin-key-file", type=Path, metavar="FILE",
                   help="hashes of keys that may also see and delete every key's jobs")  # fmt: skip
    s.add_argument("--new-key", type=Path, metavar="FILE",
                   help="make an API key, add its hash to FILE, print the key once, and exit")  # fmt: skip
    s.add_argument("--max-upload-mb", type=float, default=25.0,
                   help="per request of the audio API")  # fmt: skip
    s.add_argument("--max-job-upload-mb", type=float, default=2048.0,
                   help="per job (POST /v1/jobs: long recordings)")  # fmt: skip
    s.add_argument("--max-audio-minutes", type=float, default=240.0)
    s.add_argument("--max-queue", type=int, default=16, help="requests that may wait (then 429)")
    s.add_argument("--workers", type=int, default=1, help="transcriptions at once")
    s.add_argument("--shared-batch", type=int, default=16, metavar="ROWS",
                   help="30 s windows per batch that concurrent transcriptions share "
                   "(0: each decodes its own)")  # fmt: skip
    s.add_argument("--shared-batch-cpu", action="store_true",
                   help="share batches on the CPU too (by default only on a GPU)")  # fmt: skip
    s.add_argument("--max-sessions", type=int, default=8, help="realtime sessions at once")
    s.add_argument("--realtime-idle-seconds", type=float, default=900.0,
                   help="close a realtime session that sends nothing this long (0: never)")  # fmt: skip
    s.add_argument("--idle-ttl", type=float, default=600.0,
                   help="release a model unused this many seconds (0: keep)")  # fmt: skip
    s.add_argument("--preload", action="store_true", help="load the default model at start")
    s.add_argument("--cors", action="append", default=[], metavar="ORIGIN",
                   help="allow browser pages from ORIGIN (repeatable; none by default)")  # fmt: skip
    s.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name clients use for this server, besides loopback names and "
                   "IP addresses (repeatable; '*': any, which lets DNS rebinding in)")  # fmt: skip
    s.add_argument("--data-dir", type=Path, help="jobs and uploads (default: the app's data)")
    s.add_argument("--job-retention-hours", type=float, default=168.0,
                   help="purge finished jobs after this long (0: keep them)")  # fmt: skip
    s.add_argument("--max-queued-job-gb", type=float, default=20.0,
                   help="uploads of queued and running jobs, in all (then 429)")  # fmt: skip
    s.add_argument("--header-timeout", type=float, default=10.0, metavar="S",
                   help="close a connection whose request headers take longer")  # fmt: skip
    s.add_argument("--body-timeout", type=float, default=30.0, metavar="S",
                   help="end a request whose body pauses longer (or crawls, after that long)")  # fmt: skip
    s.add_argument("--keep-alive-seconds", type=float, default=5.0,
                   help="close an idle keep-alive connection after this long")  # fmt: skip
    s.add_argument("--max-connections", type=int, default=1024,
                   help="open connections in all (kept below the open-file limit)")  # fmt: skip
    s.add_argument("--max-connections-per-client", type=int, default=64,
                   help="open connections per client address (raise it behind a proxy)")  # fmt: skip
    s.add_argument("--realtime-max-speed", type=float, default=10.0, metavar="X",
                   help="realtime audio is taken at most X times faster than real time")  # fmt: skip
    s.add_argument("--drain-seconds", type=float, default=120.0,
                   help="on SIGTERM, wait this long for work in flight before exiting")  # fmt: skip
    s.add_argument("--ray", metavar="auto|ADDRESS",
                   help="run as a Ray Serve app on this cluster (needs the cluster extra)")  # fmt: skip
    s.add_argument("--replicas", default="1", metavar="N|auto",
                   help="with --ray: transcriber replicas (auto: scaled on load)")  # fmt: skip


def serve(args: argparse.Namespace) -> int:
    if args.new_key:
        from .server.config import new_key

        key = new_key(args.new_key)
        print(key)
        print(f"(its hash was added to {args.new_key}; the key is not stored anywhere: keep "
              "it now)", file=sys.stderr)  # fmt: skip
        return 0
    _fewer_malloc_arenas()  # before anything starts a thread
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError:
        print(f"deskscribe: {INSTALL_HINT}", file=sys.stderr)
        return 2
    from .server.app import create_app
    from .server.config import ServerConfig, ServerConfigError, read_key_file
    from .server.state import ServerState

    try:
        config = ServerConfig(
            host=args.host, port=args.port, model=args.model, device=args.compute,
            key_hashes=read_key_file(args.api_key_file) if args.api_key_file else frozenset(),
            admin_key_hashes=(read_key_file(args.admin_key_file) if args.admin_key_file
                              else frozenset()),
            max_upload_mb=args.max_upload_mb, max_job_upload_mb=args.max_job_upload_mb,
            max_audio_seconds=args.max_audio_minutes * 60,
            max_queue=args.max_queue, workers=args.workers, max_sessions=args.max_sessions,
            realtime_idle_seconds=args.realtime_idle_seconds,
            shared_batch_rows=args.shared_batch, shared_batch_on_cpu=args.shared_batch_cpu,
            idle_ttl=args.idle_ttl, preload=args.preload, cors_origins=tuple(args.cors),
            allowed_hosts=tuple(args.allowed_host), data_dir=args.data_dir,
            job_retention_hours=args.job_retention_hours,
            max_queued_job_gb=args.max_queued_job_gb, header_timeout=args.header_timeout,
            body_timeout=args.body_timeout, keep_alive=args.keep_alive_seconds,
            max_connections=args.max_connections,
            max_connections_per_client=args.max_connections_per_client,
            realtime_max_speed=args.realtime_max_speed,
        )  # fmt: skip
        config.check()
    except ServerConfigError as e:
        print(f"deskscribe: {e}", file=sys.stderr)
        return 2
    logging.getLogger("deskscribe").setLevel(logging.INFO)
    if args.ray:
        from .errors import ExtraMissing

        try:
            from .server.cluster import serve_on_ray
        except ExtraMissing as e:
            print(f"deskscribe: {e}", file=sys.stderr)
            return 2
        return serve_on_ray(config, args.ray, args.replicas, args.drain_seconds)
    from .server.connections import ConnectionWatch
    from .server.realtime import WS_MAX_BYTES, WS_QUEUE

    state = ServerState(config)
    state.connections = ConnectionWatch(config)
    app = create_app(state=state)
    server = _draining_server(
        uvicorn.Config(app, host=config.host, port=config.port, log_level="info",
                       http=state.connections.protocol_class(), ws="websockets",
                       ws_max_size=WS_MAX_BYTES, ws_max_queue=WS_QUEUE,
                       # A client streaming faster than the session takes audio is not read
                       # meanwhile (backpressure): its pong waits behind its audio, and a ping
                       # timeout would cut it off. Dead sessions end by the idle timeout.
                       ws_ping_timeout=None,
                       timeout_keep_alive=config.keep_alive,
                       lifespan="on", timeout_graceful_shutdown=10),
        state, args.drain_seconds,
    )  # fmt: skip
    keys = f"{len(config.key_hashes)} key(s)" if config.key_hashes else "no key (loopback only)"
    print(f"DeskScribe server on http://{config.host}:{config.port}/v1 ({keys}, "
          f"{config.workers} worker(s))", file=sys.stderr, flush=True)  # fmt: skip
    server.run()
    return 0


MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter


def _fewer_malloc_arenas() -> None:
    """glibc gives threads that allocate at once their own heap arenas (up to 8 per core) and
    keeps what each has held: the server's event loop, workers, realtime and ONNX Runtime
    threads. Measured (bench/soak.py, tiny.en int8, 2 clients and a realtime session): 1163
    MiB resident after 4 minutes with glibc's default, 693 MiB with 2 arenas, at the same
    request rate. Only glibc, only before the threads start, and not when MALLOC_ARENA_MAX
    is set already (the user's choice)."""
    import ctypes
    import os

    if not sys.platform.startswith("linux") or "MALLOC_ARENA_MAX" in os.environ:
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no arenas to limit)
        return
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    if mallopt(_M_ARENA_MAX, MALLOC_ARENAS) != 1:
        log.info("could not limit malloc arenas")


def _draining_server(uvicorn_config, state, drain_seconds: float):
    """A uvicorn server where SIGTERM (or the first Ctrl+C) drains: new requests get 503 at
    once, requests and sessions in flight finish (up to ``drain_seconds``), then it exits 0.
    A second signal stops at once."""
    import uvicorn

    class Draining(uvicorn.Server):
        draining = False

        def handle_exit(self, sig: int, frame) -> None:
            if self.draining:
                super().handle_exit(sig, frame)
                return
            self.draining = state.draining = True
            log.info("draining: %d request(s), %d session(s) in flight",
                     state.inflight, state.sessions)  # fmt: skip
            threading.Thread(target=self._wait, name="drain", daemon=True).start()

        def _wait(self) -> None:
            state.drain(drain_seconds)
            self.should_exit = True

    return Draining(uvicorn_config)
