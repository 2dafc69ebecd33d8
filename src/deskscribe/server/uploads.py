"""Uploads: the multipart form parsed and its file stored in the server's private upload
folder (size-checked while it is copied), deleted when the request is done. Shared by the
audio API and the job API."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

from fastapi import Request
from starlette.datastructures import UploadFile

from .errors import ApiError, bad_request


@contextlib.asynccontextmanager
async def upload(request: Request, state):
    """The parsed form and the uploaded file, stored in the server's private upload folder;
    deleted when the request is done."""
    try:
        form = await request.form(max_files=1, max_fields=64)
    except Exception as e:  # starlette raises MultiPartException / HTTPException
        raise bad_request(f"the request is not a valid multipart form: {e}") from None
    part = form.get("file")
    if not isinstance(part, UploadFile):
        raise bad_request("missing required parameter: file (the audio or video to transcribe)",
                          "file")  # fmt: skip
    folder = state.config.folder() / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    suffix = Path(part.filename or "").suffix[:12]
    path = folder / f"{uuid.uuid4().hex}{suffix}"
    try:
        limit, _mb = state.config.upload_limit(request.url.path)
        size = await asyncio.to_thread(_copy, part, path, limit)
        if size == 0:
            raise bad_request("the uploaded file is empty", "file")
        yield form, path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
        await form.close()


def _copy(upload: UploadFile, path: Path, limit: int) -> int:
    size = 0
    upload.file.seek(0)
    with open(path, "wb") as out:
        while chunk := upload.file.read(1 << 20):
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the file is over this server's limit of "
                               f"{limit / 1048576:g} MB", param="file", code="file_too_large")  # fmt: skip
            out.write(chunk)
    return size
