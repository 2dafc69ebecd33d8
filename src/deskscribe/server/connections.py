"""Open connections under a cap, and no connection held by a client that never finishes its
request headers (slowloris).

uvicorn accepts every connection and waits for headers without a deadline; a few hundred
idle sockets were enough to exhaust the file descriptors and stop ``/health`` answering.
`ConnectionWatch` wraps uvicorn's HTTP protocol class (``protocol_class``, given to uvicorn
as ``http=``) and:

- caps connections per client address (``max_connections_per_client``: the newest is
  answered 429 and closed) and in all (``max_connections``, kept below the process's file
  limit: the oldest connection still waiting for its headers is closed to make room, else
  the newest is answered 503);
- closes a connection whose request headers are not complete ``header_timeout`` seconds
  after it opened or after its previous response (408): this also ends a client that
  trickles a body the app did not want to read, which would otherwise cancel uvicorn's
  keep-alive timer with every byte.

The phases come from `guard.Guard`, which sees each request begin and end (``begin`` /
``end``); a body that is read too slowly is `guard`'s to end. WebSockets are left to their
own protocol once upgraded (pings, the realtime idle timeout) and are dropped from the watch
when they close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

SWEEP_SECONDS = 0.5
FD_RESERVE = 64  # descriptors kept for model files, the job database, logs, pipes
HEADERS, APP, SOCKET = "headers", "app", "websocket"


@dataclass
class _Entry:
    protocol: object
    transport: asyncio.Transport
    client: str
    phase: str = HEADERS
    since: float = 0.0
    closing_since: float | None = None


def _reply(transport, status: bytes, retry_after: int | None = None) -> None:
    extra = b"retry-after: %d\r\n" % retry_after if retry_after else b""
    with contextlib.suppress(Exception):
        transport.write(b"HTTP/1.1 " + status + b"\r\nconnection: close\r\ncontent-length: 0\r\n"
                        + extra + b"\r\n")  # fmt: skip
        transport.close()


def _reset(transport) -> None:
    """Drop a connection now, with a reset (linger 0), discarding the data queued for a peer
    that does not read it: a plain close keeps the socket, and the megabytes queued in it,
    until the peer has read them, which it never does."""
    sock = transport.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def fd_limit() -> int | None:
    """The soft limit on open files, raised to the hard one (up to 65536) where allowed."""
    try:
        import resource
    except ImportError:  # Windows: no such limit to mind
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    return None if soft == resource.RLIM_INFINITY else soft


class ConnectionWatch:
    def __init__(self, config) -> None:
        self.header_timeout = config.header_timeout
        self.per_client = config.max_connections_per_client
        self.max_total = config.max_connections
        limit = fd_limit()
        if limit is not None and limit - FD_RESERVE < self.max_total:
            self.max_total = max(16, limit - FD_RESERVE)
            log.info("at most %d connections (the open-file limit is %d)", self.max_total, limit)
        self._entries: dict[tuple, _Entry] = {}  # by the client's (address, port)
        self._per_client: dict[str, int] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self.refused = 0  # connections answered 429/503 at once (for the hostile bench)
        self.timed_out = 0

    # ------------------------------------------------------------------ protocol side

    def protocol_class(self) -> type:
        """uvicorn's HTTP protocol (httptools, else h11) with this watch on it."""
        from uvicorn.protocols.http.auto import AutoHTTPProtocol

        watch = self

        class Watched(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
            def connection_made(self, transport) -> None:
                super().connection_made(transport)
                watch.admit(self, transport)

            def connection_lost(self, exc) -> None:
                watch.release(self)
                super().connection_lost(exc)

        return Watched

    def admit(self, protocol, transport) -> None:
        client = getattr(protocol, "client", None)
        address = client[0] if client else "?"
        now = time.monotonic()
        if self._per_client.get(address, 0) >= self.per_client:
            self.refused += 1
            _reply(transport, b"429 Too Many Requests", retry_after=5)
            return
        if len(self._entries) >= self.max_total and not self._evict(now):
            self.refused += 1
            _reply(transport, b"503 Service Unavailable", retry_after=5)
            return
        key = tuple(client) if client else (address, id(protocol))
        self._entries[key] = _Entry(protocol, transport, address, HEADERS, now)
        self._per_client[address] = self._per_client.get(address, 0) + 1
        if self._sweeper is None:
            self._schedule()

    def release(self, protocol) -> None:
        client = getattr(protocol, "client", None)
        key = tuple(client) if client else None
        entry = self._entries.get(key) if key else None
        if entry is None or entry.protocol is not protocol:
            return
        self._forget(key, entry)

    def _forget(self, key, entry: _Entry) -> None:
        self._entries.pop(key, None)
        left = self._per_client.get(entry.client, 1) - 1
        if left > 0:
            self._per_client[entry.client] = left
        else:
            self._per_client.pop(entry.client, None)

    def _evict(self, now: float) -> bool:
        """Close the connection that has waited longest for its headers: a client that
        means to send a request sends its headers in milliseconds, so under a flood the
        oldest waiting one is the likeliest to be an attacker's."""
        waiting = [e for e in self._entries.values()
                   if e.phase == HEADERS and e.closing_since is None]  # fmt: skip
        if not waiting:
            return False
        oldest = min(waiting, key=lambda e: e.since)
        self._close(oldest, now, b"503 Service Unavailable")
        return True

    # ------------------------------------------------------------------ guard side

    def begin(self, client, kind: str) -> None:
        entry = self._entries.get(tuple(client)) if client else None
        if entry is not None:
            entry.phase = SOCKET if kind == "websocket" else APP

    def end(self, client, kind: str) -> None:
        entry = self._entries.get(tuple(client)) if client else None
        if entry is not None and kind == "http":
            entry.phase, entry.since = HEADERS, time.monotonic()

    def abort(self, client) -> None:
        """Drop a connection at once (a WebSocket whose close cannot be sent: its client
        reads nothing, and the socket would stay open with megabytes queued for it)."""
        entry = self._entries.get(tuple(client)) if client else None
        if entry is not None:
            _reset(entry.transport)

    # ------------------------------------------------------------------ the sweep

    def _schedule(self) -> None:
        with contextlib.suppress(RuntimeError):
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(SWEEP_SECONDS, self._sweep)

    def _sweep(self) -> None:
        now = time.monotonic()
        for key, entry in list(self._entries.items()):
            if entry.closing_since is not None:
                if now - entry.closing_since > 5.0:  # a peer that does not read our close
                    _reset(entry.transport)
                    if entry.phase == SOCKET:
                        self._forget(key, entry)
                continue
            if entry.transport.is_closing():
                if entry.phase == SOCKET:  # upgraded: no connection_lost comes to us
                    if not entry.transport.get_write_buffer_size():
                        self._forget(key, entry)
                    else:  # closing, with data its client does not read: abort in 5 s
                        entry.closing_since = now
                continue
            if entry.phase == HEADERS and now - entry.since > self.header_timeout:
                self.timed_out += 1
                self._close(entry, now, b"408 Request Timeout")
        self._sweeper = None
        if self._entries:
            self._schedule()

    def _close(self, entry: _Entry, now: float, status: bytes) -> None:
        entry.closing_since = now
        _reply(entry.transport, status)

    @property
    def open(self) -> int:
        return len(self._entries)
