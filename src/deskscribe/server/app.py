"""The FastAPI app: OpenAI's audio API (transcriptions, translations, models), health and
metrics; the realtime WebSocket and the job API are mounted from their modules.

Blocking work (decoding media, inference) runs on the state's work pool, never on the event
loop, so health checks, metrics and other clients' realtime sessions answer while files are
transcribed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import threading
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from ..errors import Cancelled
from . import errors as api_errors
from .config import ServerConfig
from .errors import ApiError
from .formats import MEDIA_TYPES, body, text_of, word_logprob
from .guard import Guard
from .requests import Fields, Outcome, check_media, parse_fields, run
from .state import QueueFull, ServerState
from .uploads import upload

log = logging.getLogger(__name__)


def create_app(config: ServerConfig | None = None, state: ServerState | None = None) -> FastAPI:
    state = state or ServerState(config or ServerConfig())
    config = state.config

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        state.start()
        yield
        state.stop()

    app = FastAPI(title="DeskScribe server", docs_url="/docs", redoc_url=None, lifespan=lifespan)
    app.state.deskscribe = state
    api_errors.install(app)
    if config.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["authorization", "content-type"],
        )
    # Outermost (added last): Host, Origin and the key are checked before CORS or a route
    # sees the request, and before any byte of its body is read (guard.py).
    app.add_middleware(Guard, state=state)

    @app.get("/health")
    async def health():
        return {"status": "draining" if state.draining else "ok",
                "inflight": state.inflight, "queued": state.work.waiting,
                "running": state.work.running, "sessions": state.sessions,
                "models_loaded": [m.name for m in state.models.loaded()],
                "limits": {"max_upload_mb": state.config.max_upload_mb,
                           "max_job_upload_mb": state.config.max_job_upload_mb,
                           "max_audio_minutes": state.config.max_audio_seconds / 60}}  # fmt: skip

    @app.get("/metrics")
    async def metrics():
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models():
        from ..models.store import list_models

        found = await asyncio.to_thread(list_models)
        return {"object": "list", "data": [
            {"id": m.name, "object": "model", "owned_by": "deskscribe",
             "created": _created(m.built_at), "multilingual": m.multilingual,
             "variant": m.variant}
            for m in found
        ]}  # fmt: skip

    @app.get("/v1/models/{name}")
    async def model(name: str):
        found, _folder = await asyncio.to_thread(state.model_folder, name)
        return {"id": found, "object": "model", "owned_by": "deskscribe", "created": 0}

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(request: Request):
        return await _audio(request, "transcribe")

    @app.post("/v1/audio/translations")
    async def translations(request: Request):
        return await _audio(request, "translate")

    async def _audio(request: Request, task: str):
        async with upload(request, state) as form:
            f = parse_fields(form, task)
            f.filename, path = form.filename, form.path
            # 404 and 400/413 before the request waits for a worker; run() does not repeat them.
            resolved = await asyncio.to_thread(state.model_folder, f.model)
            await asyncio.to_thread(check_media, path, f.filename, state.config.max_audio_seconds)
            if f.stream:
                return _stream(state, path, f, resolved)
            outcome = await _submit(state, path, f, resolved=resolved)
        return _respond(outcome, f)

    from . import job_routes, realtime

    realtime.mount(app, state)
    job_routes.mount(app, state)
    return app


def _created(built_at: str) -> int:
    from datetime import datetime

    try:
        return int(datetime.fromisoformat(built_at).timestamp())
    except (TypeError, ValueError):
        return 0


async def _submit(
    state: ServerState, path: Path, f: Fields, on_segment=None, resolved=None
) -> Outcome:
    cancel = threading.Event()
    try:
        outcome = await state.work.run(
            run, state, path, f, cancel=cancel, on_segment=on_segment, resolved=resolved
        )
    except QueueFull as full:
        raise ApiError(
            429,
            f"the server is busy ({state.work.waiting} requests waiting); retry in "
            f"{full.retry_after} s",
            code="queue_full",
            headers={"Retry-After": str(full.retry_after)},
        ) from None
    except ApiError as e:
        state.metrics.failures.labels(e.code or str(e.status)).inc()
        raise
    except Cancelled:
        raise ApiError(499, "cancelled") from None
    _count(state, outcome)
    return outcome


def _count(state: ServerState, outcome: Outcome) -> None:
    duration = outcome.transcript.duration or 0.0
    state.metrics.audio_seconds.labels("file").inc(duration)
    if duration > 0:
        state.metrics.rtf.observe(outcome.seconds / duration)


def _respond(outcome: Outcome, f: Fields):
    out = body(outcome.transcript, f.response_format, granularities=f.granularities,
               include_logprobs=f.include_logprobs, task=f.task)  # fmt: skip
    if isinstance(out, dict):
        return JSONResponse(out)
    return PlainTextResponse(out, media_type=MEDIA_TYPES.get(f.response_format, "text/plain"))


def _stream(state: ServerState, path: Path, f: Fields, resolved) -> StreamingResponse:
    """SSE: a ``transcript.text.delta`` per segment as it is decoded, then
    ``transcript.text.done`` and ``[DONE]``. The response outlives the handler, whose upload
    is deleted when it returns: the stored file is handed over (renamed, in the same folder)
    and deleted when the stream ends."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue()
    keep = path.with_name("stream-" + path.name)  # (the upload's own name is random)
    os.replace(path, keep)
    first = {"value": True}

    def on_segment(seg) -> None:
        text = seg.text.strip()
        if not text:
            return
        delta = text if first["value"] else " " + text
        first["value"] = False
        loop.call_soon_threadsafe(queue.put_nowait, ("delta", delta, seg))

    async def produce():
        try:
            outcome = await _submit(state, keep, f, on_segment, resolved)
            await queue.put(("done", outcome, None))
        except ApiError as e:
            await queue.put(("error", e, None))
        finally:
            with contextlib.suppress(OSError):
                keep.unlink()

    async def events():
        task = asyncio.create_task(produce())
        try:
            while True:
                kind, value, seg = await queue.get()
                if kind == "delta":
                    event = {"type": "transcript.text.delta", "delta": value}
                    if f.include_logprobs:
                        event["logprobs"] = [word_logprob(w) for w in seg.words]
                elif kind == "done":
                    event = {"type": "transcript.text.done", "text": text_of(value.transcript)}
                else:
                    event = value.body()
                yield f"data: {json.dumps(event)}\n\n"
                if kind != "delta":
                    break
            yield "data: [DONE]\n\n"
        finally:
            if not task.done():
                task.cancel()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache"})  # fmt: skip
