"""Scale-out on Ray (the ``cluster`` extra): ``deskscribe serve --ray`` runs the team server as a
Ray Serve application, and ``deskscribe transcribe --ray`` spreads a batch of files over a cluster
(the runner is ``service.cluster``; this module is its command-line front end).

The Serve application has two deployments:

- ``Ingress``: the FastAPI app of ``server.app`` unchanged (keys, limits, formats, errors, the
  OpenAI routes), with one difference: its ``state.work`` is a ``ClusterWork``. That decodes and
  size-checks each upload here, at the ingress, and sends 16 kHz float32 PCM to a transcriber,
  so a file that is broken or too long is refused before it costs a replica anything and the
  replicas need neither the upload nor FFmpeg's work.
- ``Transcriber``: N replicas (or autoscaled on ongoing requests), a GPU each where the cluster
  has GPUs. Models are multiplexed by the request's ``model`` (Ray Serve model multiplexing):
  requests go to a replica that already holds their model when one is free, and a replica keeps
  at most two loaded.

Every answer says which replica transcribed it in the ``x-deskscribe-replica`` header, so a
client (and the tests) can see the load spread.

Ray is imported only by this module and ``service.cluster``; nothing imports them unless
``--ray`` is given.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import logging
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ..errors import Cancelled, ExtraMissing

try:
    import ray
    from ray import serve
except ImportError as e:  # the front end says what to install
    raise ExtraMissing("cluster", "--ray") from e

from ..service.cluster import ClusterError, connect, forwarded_env
from . import requests as server_requests
from .config import ServerConfig
from .errors import ApiError, bad_request
from .state import QueueFull, WorkPool

log = logging.getLogger(__name__)

APP_NAME = "deskscribe"
REPLICA_HEADER = b"x-deskscribe-replica"
MODELS_PER_REPLICA = 2  # whisper models are big: the least recently used goes first
# Which replica answered the request being handled: set by ``ReplicaHeader``, written by
# ``ClusterWork.run`` (a dict, so that a write deep in the endpoint reaches the middleware).
_ANSWERED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("answered", default=None)


# ---------------------------------------------------------------------------------- replicas


@serve.deployment(name="Transcriber", max_ongoing_requests=1)
class Transcriber:
    """One replica: models by name (multiplexed), one transcription at a time. Requests carry
    decoded PCM and the request's fields; answers are tuples, never exceptions, so that the
    ingress gets the status and message the local server would give."""

    def __init__(self, device: str, threads: int) -> None:
        from ..service.models import runtime_device

        self.device = runtime_device(device)
        self.threads = threads
        self.replica = serve.get_replica_context().replica_id.unique_id

    @serve.multiplexed(max_num_models_per_replica=MODELS_PER_REPLICA)
    async def model(self, name: str):
        from ..models.store import resolve_model
        from ..whisper.model import WhisperModel

        folder = resolve_model(name)
        return await asyncio.to_thread(WhisperModel, folder, self.device, self.threads)

    async def transcribe(self, pcm: np.ndarray, fields: str, on_segment=None) -> tuple:
        t0 = time.monotonic()
        f = server_requests.Fields.from_json(fields)
        name = serve.get_multiplexed_model_id()
        cancel = threading.Event()
        try:
            model = await self.model(name)
            transcript = await asyncio.to_thread(_transcribe_pcm, model, pcm, f, cancel, on_segment)
        except asyncio.CancelledError:
            cancel.set()  # the client went away: stop at the next window
            raise
        except Exception as e:
            return ("error", *_failure(e, name, f))
        transcript.model = name
        return ("ok", transcript, time.monotonic() - t0, self.replica)

    async def transcribe_stream(self, pcm: np.ndarray, fields: str):
        """``transcribe`` for ``stream=true`` (called with ``stream=True``): yields
        ``("segment", seg)`` as they are decoded (a batch at a time), then ``transcribe``'s answer."""
        loop = asyncio.get_running_loop()
        decoded: asyncio.Queue = asyncio.Queue()

        def on_segment(seg) -> None:  # on the decoding thread
            loop.call_soon_threadsafe(decoded.put_nowait, ("segment", seg))

        async def run() -> None:
            answer = await self.transcribe(pcm, fields, on_segment)
            decoded.put_nowait(("end", answer))

        task = asyncio.create_task(run())
        try:
            while True:
                kind, item = await decoded.get()
                if kind == "end":
                    yield item
                    return
                yield (kind, item)
        finally:
            if not task.done():  # the ingress cancelled the stream: stop the decoding too
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


def _transcribe_pcm(model, pcm: np.ndarray, f, cancel: threading.Event, on_segment=None):
    from ..transcript import Transcript
    from ..whisper.options import TranscriptionInfo
    from ..whisper.transcribe import transcribe_blocks

    duration = pcm.shape[0] / 16000
    info = TranscriptionInfo(language=None, duration=duration)
    block = 30 * 16000  # the blocks ``audio.decode`` would stream
    blocks = (pcm[i : i + block] for i in range(0, pcm.shape[0], block))
    options = server_requests.transcribe_options(f)
    segments = []
    for seg in transcribe_blocks(
        model, blocks, options, total_seconds=duration, cancel=cancel, info=info
    ):
        segments.append(seg)
        if on_segment is not None:
            on_segment(seg)
    return Transcript(segments=segments, language=info.language, duration=duration,
                      source=f.filename, model=model.name)  # fmt: skip


def _failure(e: Exception, name: str, f) -> tuple[int, str, str | None, str | None]:
    """(status, message, param, code) for what went wrong on a replica, as ``requests.run``
    says it for the local server (one mapping: ``service.failures``)."""
    err = server_requests.api_error(e, f, name)
    message = err.message.replace("on the server", "on the cluster")
    return err.status, message, err.param, err.code


# ---------------------------------------------------------------------------------- ingress


class ClusterWork(WorkPool):
    """``state.work`` at the ingress. Transcription requests (``requests.run``) are decoded
    and checked here, then sent to the transcriber deployment; anything else (the job API,
    diarized_json, which needs the file itself) runs on this pool, at the ingress, as on a
    single server.

    ``capacity`` transcriptions may run on the cluster and ``max_queue`` more wait; past that a
    request is refused at once (429), as the local server does."""

    def __init__(self, handle, capacity: int, config: ServerConfig, metrics) -> None:
        super().__init__(config.workers, config.max_queue, metrics)
        self.handle, self.capacity = handle, capacity
        self.remote = 0  # requests on the cluster now (running there or queued for a replica)
        # Decoding is blocking FFmpeg work: off the event loop, a few at a time.
        self._decode = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="decode")

    async def run(self, fn, *args, cancel=None, **kwargs):
        if fn is not server_requests.run or kwargs.get("progress") is not None:
            return await super().run(fn, *args, cancel=cancel, **kwargs)
        state, path, f = args
        if f.response_format == "diarized_json":
            return await super().run(fn, *args, cancel=cancel, **kwargs)
        with self._lock:
            if self.remote >= self.capacity + self.max_queue:
                raise QueueFull(self.retry_after())
            self.remote += 1
        t0 = time.monotonic()
        try:
            loop = asyncio.get_running_loop()
            name, pcm = await loop.run_in_executor(self._decode, _decoded, state, path, f)
            answer = await self._remote(name, pcm, f, kwargs.get("on_segment"))
        finally:
            with self._lock:
                self.remote -= 1
                self._durations = [*self._durations[-19:], time.monotonic() - t0]
        kind, *rest = answer
        if kind == "error":
            status, message, param, code = rest
            if status == 499:
                raise Cancelled(message)
            raise ApiError(status, message, param=param, code=code)
        transcript, _seconds, replica = rest
        holder = _ANSWERED.get()
        if holder is not None:
            holder["replica"] = replica
        return server_requests.Outcome(transcript, time.monotonic() - t0, name)

    async def _remote(self, name: str, pcm: np.ndarray, f, on_segment=None) -> tuple:
        """The replica's answer; with ``on_segment`` (a stream) each segment is handed on as
        the replica decodes it, before the answer."""
        from ray.exceptions import RayError

        handle = self.handle.options(multiplexed_model_id=name, stream=on_segment is not None)
        if on_segment is None:
            response = handle.transcribe.remote(pcm, f.to_json())
        else:
            response = handle.transcribe_stream.remote(pcm, f.to_json())
        try:
            if on_segment is None:
                return await response
            async for item in response:
                if item[0] != "segment":
                    return item
                on_segment(item[1])
            raise RayError("the transcriber's stream ended without an answer")
        except asyncio.CancelledError:
            response.cancel()  # the client hung up: the replica stops at its next window
            raise
        except RayError as e:
            log.warning("the cluster failed a request: %s", e)
            raise ApiError(503, f"the cluster could not run this request ({type(e).__name__}); "
                           "retry", code="cluster_unavailable",
                           headers={"Retry-After": "5"}) from None  # fmt: skip

    def shutdown(self) -> None:
        self._decode.shutdown(wait=False, cancel_futures=True)
        super().shutdown()


def _decoded(state, path: Path, f) -> tuple[str, np.ndarray]:
    """(model name, 16 kHz mono float32 PCM) of a stored upload, with the local server's checks
    and messages (``requests.run``): only real media is decoded (``untrusted``; a playlist is
    a 400), and decoding stops past the limit (413), whatever the container claims."""
    from ..audio.decode import MediaError, MediaTooLongError, decode_blocks
    from .requests import check_media, too_long

    max_seconds = state.config.max_audio_seconds
    check_media(path, f.filename, max_seconds)
    name, _folder = state.model_folder(f.model)
    try:
        with decode_blocks(path, 60.0, untrusted=True, max_seconds=max_seconds) as blocks:
            parts = list(blocks)
    except MediaTooLongError as e:
        raise too_long(e.seconds, max_seconds) from None
    except MediaError as e:
        message = str(e).replace(path.name, f.filename)
        raise bad_request(f"the uploaded file could not be decoded: {message}", "file") from None
    pcm = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    return name, np.ascontiguousarray(pcm, dtype=np.float32)


class ReplicaHeader:
    """ASGI middleware: ``x-deskscribe-replica: ID`` on answers a transcriber replica gave."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        holder: dict = {}
        token = _ANSWERED.set(holder)

        async def send_with(message):
            if message["type"] == "http.response.start" and "replica" in holder:
                headers = [*message.get("headers", []),
                           (REPLICA_HEADER, holder["replica"].encode())]  # fmt: skip
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with)
        finally:
            _ANSWERED.reset(token)


@serve.deployment(name="Ingress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256)
@serve.ingress()
class Ingress:
    """The FastAPI app of ``server.app``, built on the replica (its state holds threads)."""

    def __init__(self, config: ServerConfig, transcriber, capacity: int) -> None:
        from .state import ServerState

        self.state = ServerState(config)
        self.state.work = ClusterWork(transcriber, capacity, config, self.state.metrics)

    def __serve_build_asgi_app__(self):
        from .app import create_app

        app = create_app(state=self.state)
        app.add_middleware(ReplicaHeader)
        return app

    async def drain(self, seconds: float) -> tuple[int, int]:
        """As the single server's SIGTERM: from now on new requests get 503 ``draining``;
        wait up to ``seconds`` for the requests and realtime sessions in flight here (those
        sent to transcribers included) to finish. Returns what is still in flight."""
        self.state.draining = True  # at once, before the waiting thread starts
        return await asyncio.to_thread(self.state.drain, seconds)


# ---------------------------------------------------------------------------------- serve


@dataclasses.dataclass
class Plan:
    """How the transcriber deployment is laid out on the cluster."""

    options: dict  # for ``Transcriber.options``
    threads: int  # ONNX Runtime threads per replica (0: its choice, on a GPU)
    capacity: int  # transcriptions at once, at most
    label: str  # for the start message


def plan(replicas: str, resources: dict, device: str = "auto") -> Plan:
    """Replicas for ``--replicas N|auto`` on a cluster with ``resources``
    (``ray.cluster_resources()``): a GPU each (or a share) where there are GPUs and the device
    is not the CPU, else a share of the CPUs, with as many ONNX Runtime threads as it has
    CPUs so that replicas do not fight over cores."""
    gpus = float(resources.get("GPU", 0)) if device != "cpu" else 0.0
    cpus = float(resources.get("CPU", 1)) or 1.0
    if replicas == "auto":
        if gpus >= 1:
            actor, threads, most = {"num_gpus": 1, "num_cpus": min(1.0, cpus / gpus)}, 0, int(gpus)
        else:
            threads = max(1, min(4, int(cpus)))
            actor, most = {"num_cpus": threads}, max(1, int(cpus // threads))
        scaling = {"min_replicas": 1, "initial_replicas": 1, "max_replicas": most,
                   "target_ongoing_requests": 1, "upscale_delay_s": 5,
                   "downscale_delay_s": 300}  # fmt: skip
        where = "GPU" if gpus >= 1 else f"{threads} CPU"
        return Plan({"autoscaling_config": scaling, "ray_actor_options": actor}, threads, most,
                    f"1-{most} transcriber replica(s), autoscaled, {where} each")  # fmt: skip
    try:
        n = int(replicas)
    except ValueError:
        raise ClusterError(f"--replicas takes a number or auto, not {replicas!r}") from None
    if n < 1:
        raise ClusterError("--replicas must be at least 1")
    if gpus > 0:
        share = min(1.0, gpus / n)
        actor, threads = {"num_gpus": share, "num_cpus": min(1.0, cpus / n)}, 0
        where = f"{share:g} GPU"
    else:
        share = cpus / n
        threads = max(1, int(share))
        actor = {"num_cpus": min(float(threads), share)}
        where = f"{actor['num_cpus']:g} CPU"
    return Plan({"num_replicas": n, "ray_actor_options": actor}, threads, n,
                f"{n} transcriber replica(s), {where} each")  # fmt: skip


def with_env(actor_options: dict) -> dict:
    return {**actor_options, "runtime_env": {"env_vars": forwarded_env()}}


def _drain(seconds: float, again: threading.Event) -> None:
    """The ingress drains (``Ingress.drain``); waiting stops early on a second signal."""
    response = serve.get_deployment_handle("Ingress", APP_NAME).drain.remote(seconds)
    deadline = time.monotonic() + seconds + 30
    while not again.is_set() and time.monotonic() < deadline:
        try:
            inflight, sessions = response.result(timeout_s=0.5)
        except TimeoutError:
            continue
        except Exception as e:  # the ingress is gone: nothing left to wait for
            log.warning("the drain failed: %s", e)
            return
        if inflight or sessions:
            print(f"deskscribe: {inflight} request(s) and {sessions} session(s) still in flight "
                  f"after {seconds:g} s: stopping them", file=sys.stderr, flush=True)  # fmt: skip
        return


def serve_on_ray(config: ServerConfig, address: str, replicas: str, drain_seconds: float) -> int:
    """``deskscribe serve --ray``: deploy, say where, and wait for SIGTERM / Ctrl+C; then
    drain as the single server does (new requests get 503, those in flight finish, up to
    ``drain_seconds``; a second signal stops that wait) and delete the application."""
    try:
        connect(address)
        layout = plan(replicas, ray.cluster_resources(), config.device)
    except ClusterError as e:
        print(f"deskscribe: {e}", file=sys.stderr)
        return 2
    stop, again = threading.Event(), threading.Event()

    def on_signal(*_) -> None:
        (again if stop.is_set() else stop).set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    serve.start(http_options={"host": config.host, "port": config.port})
    wait = {"graceful_shutdown_timeout_s": drain_seconds}
    transcriber = Transcriber.options(
        **{**layout.options, "ray_actor_options": with_env(layout.options["ray_actor_options"])},
        **wait,
    ).bind(config.device, layout.threads)
    ingress = Ingress.options(ray_actor_options=with_env({"num_cpus": 0}), **wait)
    serve.run(ingress.bind(config, transcriber, layout.capacity), name=APP_NAME,
              route_prefix="/")  # fmt: skip
    keys = f"{len(config.key_hashes)} key(s)" if config.key_hashes else "no key (loopback only)"
    print(f"DeskScribe server on http://{config.host}:{config.port}/v1 ({keys}, Ray cluster "
          f"{address}, {layout.label})", file=sys.stderr, flush=True)  # fmt: skip
    stop.wait()
    print("deskscribe: stopping: letting requests in flight finish", file=sys.stderr, flush=True)
    _drain(drain_seconds, again)
    serve.delete(APP_NAME)
    if not serve.status().applications:  # the proxy was ours alone: free the port too
        serve.shutdown()
    ray.shutdown()
    return 0
