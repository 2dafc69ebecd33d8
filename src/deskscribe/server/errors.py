"""Every error the server answers, in OpenAI's envelope:
``{"error": {"message", "type", "param", "code"}}``, so the official SDKs raise their typed
exceptions (``BadRequestError``, ``AuthenticationError``, ``NotFoundError``, ...) with our
message in them."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import DeskScribeError

log = logging.getLogger(__name__)

TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    503: "server_error",
}


class ApiError(DeskScribeError):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.type = type or TYPES.get(status, "invalid_request_error")
        self.headers = headers or {}

    def body(self) -> dict:
        return envelope(self.message, self.type, self.param, self.code)


def envelope(message: str, type: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def response(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def install(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api(_request: Request, err: ApiError) -> JSONResponse:
        return response(err)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        first = err.errors()[0] if err.errors() else {}
        where = [str(p) for p in first.get("loc", ()) if p not in ("body", "query", "form")]
        param = ".".join(where) or None
        what = first.get("msg", "invalid request")
        message = f"{param}: {what}" if param else what
        if first.get("type") == "missing":
            message = f"missing required parameter: {param}"
        return response(ApiError(400, message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, err: StarletteHTTPException) -> JSONResponse:
        message = err.detail if isinstance(err.detail, str) else "request failed"
        if err.status_code == 404 and message == "Not Found":
            message = "no such route; the API is under /v1 (e.g. POST /v1/audio/transcriptions)"
        return response(ApiError(err.status_code, message, headers=dict(err.headers or {})))

    @app.exception_handler(Exception)
    async def _bug(_request: Request, err: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return response(ApiError(500, f"internal error ({type(err).__name__}); see the server log"))
