"""The job API's routes (``/v1/jobs``), on `jobs.Jobs`: each request sees the jobs of its own
key only (an admin key, all of them)."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from ..transcript import Transcript
from .errors import bad_request
from .formats import MEDIA_TYPES, body
from .jobs import MAX_QUEUED, RESULT_FORMATS, Jobs
from .requests import check_media, parse_fields
from .state import ServerState
from .uploads import upload


def _owner(request: Request, state: ServerState) -> tuple[str, str | None]:
    """(the owner a new job gets, the owner whose jobs this request sees: None for all).
    Without keys every job is ''; an admin key sees every key's."""
    digest = getattr(request.state, "key_hash", None) or ""
    if not state.config.key_hashes:
        return "", None
    return digest, None if digest in state.config.admin_key_hashes else digest


def mount(app: FastAPI, state: ServerState) -> None:
    jobs = Jobs(state)
    app.state.jobs = jobs
    state.services.append(jobs)  # started after the state, stopped before it

    @app.post("/v1/jobs", status_code=202)
    async def create_job(request: Request):
        async with upload(request, state) as form:
            f = parse_fields(form, "transcribe")
            if f.stream:
                raise bad_request("stream is not available for jobs; poll GET /v1/jobs/{id} "
                                  "for progress", "stream")  # fmt: skip
            f.filename = form.filename
            model, _folder = await asyncio.to_thread(state.model_folder, f.model)
            await asyncio.to_thread(
                check_media, form.path, f.filename, state.config.max_audio_seconds, "file"
            )
            owner, _seen = _owner(request, state)
            job = await asyncio.to_thread(jobs.add, form.path, f, model, owner)
        return JSONResponse(job, status_code=202)

    @app.get("/v1/jobs")
    async def list_jobs(request: Request, limit: int = Query(100, ge=1, le=MAX_QUEUED * 10)):
        data = await asyncio.to_thread(jobs.newest, limit + 1, _owner(request, state)[1])
        return {"object": "list", "data": data[:limit], "has_more": len(data) > limit}

    @app.get("/v1/jobs/{job_id}")
    async def get_job(request: Request, job_id: str):
        return await asyncio.to_thread(jobs.get, job_id, _owner(request, state)[1])

    @app.get("/v1/jobs/{job_id}/result")
    async def job_result(request: Request, job_id: str, format: str | None = None):
        if format is not None and format not in RESULT_FORMATS:
            raise bad_request(f"format {format[:40]!r} is not one of "
                              f"{', '.join(RESULT_FORMATS)}", "format")  # fmt: skip
        f, data = await asyncio.to_thread(jobs.result, job_id, _owner(request, state)[1])
        fmt = format or f.response_format
        if fmt == "deskscribe":
            return JSONResponse(data)
        out = body(Transcript.from_dict(data), fmt, granularities=f.granularities,
                   include_logprobs=f.include_logprobs, task=f.task)  # fmt: skip
        if isinstance(out, dict):
            return JSONResponse(out)
        return PlainTextResponse(out, media_type=MEDIA_TYPES.get(fmt, "text/plain"))

    @app.delete("/v1/jobs/{job_id}")
    async def delete_job(request: Request, job_id: str):
        return await asyncio.to_thread(jobs.delete, job_id, _owner(request, state)[1])
