"""The server's front door: one pure ASGI middleware, outermost, that every HTTP request and
WebSocket passes before any route sees it. In this order:

1. **Host** (421): only the names the server was told (``--allowed-host``), loopback names and
   IP literals. A DNS-rebinding page reaches 127.0.0.1 under its own name, which is refused.
2. **Origin** (403): a browser request (it carries ``Origin``, or ``Sec-Fetch-Site:
   cross-site``) only from the origins given with ``--cors``, or the server's own. A web page
   the user visits cannot drive a loopback server, key or no key.
3. **The API key** (401) on every route but ``/health`` (``/docs`` and ``/openapi.json``
   included) and CORS preflights; the realtime socket answers a missing key in its own
   protocol (``realtime.py``). Before any byte of a body is read.
4. **Draining** (503), then a declared body over the route's limit (413).
5. **The body's pace** while the app reads it: no byte for ``body_timeout`` seconds, or under
   ``MIN_BODY_RATE`` on average after that long, ends the request with 408 and closes the
   connection (a slow-body client cannot hold a connection and a worker's upload forever).

Refusals close the connection (``Connection: close``): a refused body is never read. The
request metrics, the in-flight count (for the drain) and the connection watch's phases
(``connections.py``: slow headers between requests) are kept here too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from urllib.parse import urlsplit

from . import errors as api_errors
from .config import ServerConfig, bearer, hash_key, key_matches
from .errors import ApiError

PUBLIC = ("/health",)  # answered without a key: load balancers and the desktop app's check
UNMETERED = ("/metrics",)  # and answered while draining
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})
MIN_BODY_RATE = 1024  # bytes a second, on average, once a body has taken body_timeout
FORM_ALLOWANCE = 64 * 1024  # a form's own fields, on top of the file's limit


def host_allowed(host: str | None, config: ServerConfig) -> bool:
    """Whether a request's ``Host`` names this server. IP literals always do (a rebinding
    attack needs a name of the attacker's); names only when loopback or allowed."""
    if host is None:  # HTTP/1.0 without Host: not a browser
        return True
    allowed = config.allowed_hosts
    if "*" in allowed:
        return True
    name = _host_name(host)
    if name is None:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    return name in LOOPBACK_NAMES or name in {h.lower() for h in allowed}


def _host_name(host: str) -> str | None:
    """``name`` of ``name[:port]`` / ``[v6]:port``, lower-case; None when malformed."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end > 0 else None
    name, _, port = host.partition(":")
    if port and not port.isdigit():
        return None
    return name.rstrip(".") or None


def origin_allowed(origin: str, host: str | None, config: ServerConfig) -> bool:
    """An ``Origin`` the server takes requests from: one given with ``--cors``, or its own."""
    if origin in config.cors_origins or "*" in config.cors_origins:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return bool(host) and parts.scheme in ("http", "https") and parts.netloc == host


class Guard:
    """The checks above, for one app; ``watch`` is the connection watch when the server runs
    under uvicorn with it (None in a Ray ingress)."""

    def __init__(self, app, state) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send):
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        watch = getattr(self.state, "connections", None)
        if watch is not None:
            watch.begin(scope.get("client"), kind)
        try:
            if kind == "websocket":
                refusal = self._refuse_socket(scope)
                if refusal is not None:
                    await send({"type": "websocket.close", "code": 1008, "reason": refusal})
                    return
                await self.app(scope, receive, send)
            else:
                await self._http(scope, receive, send)
        finally:
            if watch is not None:
                watch.end(scope.get("client"), kind)

    # ------------------------------------------------------------------ websocket

    def _refuse_socket(self, scope) -> str | None:
        headers = _headers(scope)
        config = self.state.config
        if not host_allowed(headers.get("host"), config):
            return "host_not_allowed"
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, headers.get("host"), config):
            return "origin_not_allowed"
        return None

    # ------------------------------------------------------------------ http

    async def _http(self, scope, receive, send):
        state, path = self.state, scope["path"]
        headers = _headers(scope)
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            refusal.headers.setdefault("Connection", "close")
            await api_errors.response(refusal)(scope, receive, send)
            return
        status = {"code": 500}

        async def send_status(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        t0 = time.monotonic()
        state.enter()
        try:
            await self.app(scope, _paced(receive, state.config.body_timeout), send_status)
        finally:
            state.leave()
            if path not in UNMETERED:
                route = getattr(scope.get("route"), "path", None) or "unmatched"
                m = state.metrics
                m.requests.labels(route, scope["method"], str(status["code"])).inc()
                m.latency.labels(route).observe(time.monotonic() - t0)

    def _refusal(self, scope, headers: dict[str, str]) -> ApiError | None:
        state, config, path = self.state, self.state.config, scope["path"]
        host = headers.get("host")
        if not host_allowed(host, config):
            return ApiError(
                421,
                f"this server does not answer to the name {_clip(host)!r}: start it with "
                "--allowed-host NAME to serve under that name",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        cross = headers.get("sec-fetch-site") == "cross-site"
        if (origin is not None and not origin_allowed(origin, host, config)) or (
            origin is None and cross and not _navigation(scope, headers)
        ):
            return ApiError(
                403,
                f"cross-site requests are refused (Origin {_clip(origin or '?')!r}): this "
                "server takes browser requests only from the origins given with --cors",
                code="origin_not_allowed",
            )
        preflight = scope["method"] == "OPTIONS" and "access-control-request-method" in headers
        if config.key_hashes and path not in PUBLIC and not preflight:
            key = bearer(headers)
            if not key_matches(key, config.key_hashes | config.admin_key_hashes):
                return ApiError(
                    401,
                    "missing API key: send `Authorization: Bearer KEY`" if not key
                    else "incorrect API key",
                    code="invalid_api_key",
                )  # fmt: skip
            scope.setdefault("state", {})["key_hash"] = hash_key(key)
        if state.draining and path not in UNMETERED:
            return ApiError(
                503,
                "the server is shutting down; retry on another server or later",
                code="draining",
                headers={"Retry-After": "5"},
            )
        length = headers.get("content-length")
        limit, limit_mb = config.upload_limit(path)
        if length is not None and length.isdigit() and int(length) > limit + FORM_ALLOWANCE:
            return ApiError(
                413,
                f"the upload is {int(length) / 1048576:.1f} MB; this server takes at most "
                f"{limit_mb:g} MB per file" + _bigger(path),
                param="file",
                code="file_too_large",
            )
        return None


def _paced(receive, idle: float):
    """``receive`` for a request whose body is read under the pace rules (module docstring);
    once the body is complete it is passed through (a streaming response waits on it for
    the client's disconnect, untimed)."""
    pace = {"done": False, "first": None, "bytes": 0}

    async def paced():
        if pace["done"] or not idle:
            return await receive()
        now = time.monotonic()
        pace["first"] = pace["first"] or now
        try:
            message = await asyncio.wait_for(receive(), idle)
        except asyncio.TimeoutError:  # (TimeoutError itself from 3.11 on)
            raise _slow(f"no data for {idle:g} s") from None
        if message["type"] != "http.request":
            return message
        pace["bytes"] += len(message.get("body", b""))
        if not message.get("more_body", False):
            pace["done"] = True
            return message
        took = time.monotonic() - pace["first"]
        if took > idle and pace["bytes"] < MIN_BODY_RATE * took:
            raise _slow(f"{pace['bytes']} bytes in {took:.0f} s")
        return message

    return paced


def _slow(why: str) -> ApiError:
    return ApiError(
        408,
        f"the request body came too slowly ({why}); send it at least {MIN_BODY_RATE // 1024} KiB/s",
        code="request_timeout",
        headers={"Connection": "close"},
    )


def _navigation(scope, headers: dict[str, str]) -> bool:
    """A top-level page load (a bookmark, a link): not a request a page makes on its own."""
    return scope["method"] in ("GET", "HEAD") and headers.get("sec-fetch-mode") == "navigate"


def _headers(scope) -> dict[str, str]:
    """The request's headers, lower-case names; the first of a repeated one. Two ``Host``
    headers (RFC 9112 says refuse them: which one a proxy read is anyone's guess) read as a
    host nobody allowed."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers") or ():
        key = name.decode("latin-1").lower()
        if key == "host" and key in out:
            out[key] = "two host headers"
        out.setdefault(key, value.decode("latin-1"))
    return out


def _clip(text: str | None, n: int = 80) -> str:
    text = text or ""
    return text if len(text) <= n else text[:n] + "…"


def _bigger(path: str) -> str:
    return "" if path.startswith("/v1/jobs") else " here (the job API, /v1/jobs, takes more)"
