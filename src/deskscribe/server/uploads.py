"""Uploads: the multipart form read as it arrives, its file written straight into the server's
private upload folder and its bytes counted on the way, so a body over the limit is cut off
at the limit (chunked bodies, which declare no length, included) and nothing is spooled
anywhere else (Starlette's own form parser spools to the system's temporary folder first and
checks sizes after). Shared by the audio API, the job API and the Ray ingress.

The form is python-multipart's streaming parser (the one Starlette uses) with our limits:
one file part, named ``file``; at most ``MAX_FIELDS`` other fields of ``MAX_FIELD_BYTES``
each. The client's file name is kept for messages only, cleaned of paths and control
characters; the stored file gets a random name and, as the probe's hint, its ending only
when that is a media type (``audio.untrusted.safe_suffix``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import Request
from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect

from ..audio.untrusted import safe_suffix
from ..fsutil import private_dir
from .errors import ApiError, bad_request
from .guard import FORM_ALLOWANCE

MAX_FIELDS = 64
MAX_FIELD_BYTES = 64 * 1024
WRITE_BYTES = 1 << 20  # file data is written to disk (off the event loop) in pieces this big
MAX_NAME = 200


@dataclass
class Form:
    """The fields (each name's values, in order) and the stored file."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    filename: str = "file"  # as the client named it, cleaned; for messages
    path: Path | None = None
    size: int = 0

    def getlist(self, name: str) -> list[str]:
        return list(self.fields.get(name, ()))

    def get(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else None


def clean_filename(raw: str | None) -> str:
    """A client's file name fit for messages and logs: the last path part, no control
    characters (a NUL gave a 500 before), at most ``MAX_NAME`` characters."""
    name = re.split(r"[\\/]", raw or "")[-1]
    name = "".join(c for c in name if c.isprintable()).strip()
    return name[:MAX_NAME] or "file"


@contextlib.asynccontextmanager
async def upload(request: Request, state):
    """The request's form with its file stored (a `Form`); the file is deleted when the
    request is done (a job moves it into its own folder first)."""
    limit, limit_mb = state.config.upload_limit(request.url.path)
    folder = private_dir(state.config.folder() / "uploads")
    reader = _Reader(request.headers.get("content-type"), folder, limit, limit_mb)
    try:
        await reader.read(request)
        form = reader.form
        if form.path is None:
            raise bad_request("missing required parameter: file (the audio or video to "
                              "transcribe)", "file")  # fmt: skip
        if form.size == 0:
            raise bad_request("the uploaded file is empty", "file")
        yield form
    finally:
        reader.discard()


class _Reader:
    def __init__(self, content_type: str | None, folder: Path, limit: int, limit_mb: float):
        kind, params = parse_options_header(content_type or "")
        if kind != b"multipart/form-data" or not params.get(b"boundary"):
            raise bad_request("missing required parameter: file. Send the request as "
                              "multipart/form-data (as the OpenAI SDKs do), with the audio in "
                              "a part named file", "file")  # fmt: skip
        self.boundary = params[b"boundary"]
        self.folder, self.limit, self.limit_mb = folder, limit, limit_mb
        self.form = Form()
        self._fd: int | None = None
        self._pending = bytearray()  # file data not yet written
        self._part: dict = {}
        self._header = [b"", b""]
        self._fields = 0

    async def read(self, request: Request) -> None:
        parser = MultipartParser(self.boundary, {
            "on_part_begin": self._begin, "on_part_data": self._data,
            "on_part_end": self._end, "on_header_field": self._header_field,
            "on_header_value": self._header_value, "on_header_end": self._header_end,
            "on_headers_finished": self._headers_done,
        })  # fmt: skip
        received = 0
        try:
            async for chunk in request.stream():
                received += len(chunk)
                if received > self.limit + FORM_ALLOWANCE:
                    raise self._too_large()
                parser.write(chunk)
                if len(self._pending) >= WRITE_BYTES:
                    await self._flush()
            parser.finalize()
        except MultipartParseError as e:
            raise bad_request(f"the request is not a valid multipart form: {e}") from None
        except ClientDisconnect:
            raise bad_request("the client went away before the upload was complete") from None
        if self._part:
            raise bad_request("the multipart form ends in the middle of a part")
        await self._flush()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _too_large(self) -> ApiError:
        return ApiError(413, f"the file is over this server's limit of {self.limit_mb:g} MB",
                        param="file", code="file_too_large",
                        headers={"Connection": "close"})  # fmt: skip

    async def _flush(self) -> None:
        if self._pending and self._fd is not None:
            data, self._pending = bytes(self._pending), bytearray()
            await asyncio.to_thread(_write_all, self._fd, data)

    def discard(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self.form.path is not None:
            with contextlib.suppress(OSError):
                self.form.path.unlink()

    # ------------------------------------------------------------------ parser callbacks

    def _begin(self) -> None:
        self._part = {"headers": {}, "data": bytearray(), "file": False}

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header[0] += data[start:end]

    def _header_value(self, data: bytes, start: int, end: int) -> None:
        self._header[1] += data[start:end]

    def _header_end(self) -> None:
        name, value = self._header
        if len(name) + len(value) > MAX_FIELD_BYTES:
            raise bad_request("a part of the form has a header over 64 KiB")
        self._part["headers"][name.lower()] = value
        self._header = [b"", b""]

    def _headers_done(self) -> None:
        disposition = self._part["headers"].get(b"content-disposition", b"")
        _kind, options = parse_options_header(disposition)
        name = options.get(b"name", b"").decode("utf-8", "replace")
        self._part["name"] = name
        if b"filename" not in options:
            self._fields += 1
            if self._fields > MAX_FIELDS:
                raise bad_request(f"the form has more than {MAX_FIELDS} fields")
            return
        if name != "file":
            raise bad_request(f"unexpected file part {clean_filename(name)!r}: send the audio "
                              "in the part named file", "file")  # fmt: skip
        if self.form.path is not None:
            raise bad_request("send one file per request", "file")
        self.form.filename = clean_filename(options[b"filename"].decode("utf-8", "replace"))
        path = self.folder / f"{uuid.uuid4().hex}{safe_suffix(self.form.filename)}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
        self._fd = os.open(path, flags, 0o600)
        self.form.path = path
        self._part["file"] = True

    def _data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        if self._part.get("file"):
            self.form.size += len(piece)
            if self.form.size > self.limit:
                raise self._too_large()
            self._pending += piece
            return
        if len(self._part["data"]) + len(piece) > MAX_FIELD_BYTES:
            raise bad_request(f"the field {clean_filename(self._part.get('name'))!r} is over "
                              "64 KiB", self._part.get("name"))  # fmt: skip
        self._part["data"] += piece

    def _end(self) -> None:
        part, self._part = self._part, {}
        if not part.get("file"):
            value = bytes(part["data"]).decode("utf-8", "replace")
            self.form.fields.setdefault(part.get("name", ""), []).append(value)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
