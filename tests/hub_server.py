"""A small, real Hugging Face hub for tests: the endpoints huggingface_hub 2.4.0 calls.

* ``GET /api/models/{repo}/revision/{rev}?blobs=true`` — ``model_info(files_metadata=True)``.
* ``HEAD|GET /{repo}/resolve/{rev}/{path}`` — plain files: 200 with ``ETag`` (git blob sha1),
  ``X-Repo-Commit``, ``Content-Length``; LFS files: 302 to the "CDN" (a second listener on
  another port, so the client treats it as another origin and keeps the ``Location``) with
  ``X-Linked-Etag`` (sha256), ``X-Linked-Size`` and ``X-Repo-Commit``.
* ``GET /lfs/{sha256}`` on the CDN, with ``Range: bytes=N-`` answered by 206.

Fault knobs (each fires once per count): ``drop_after[path] = n`` closes the connection after
byte ``n`` of that file; ``corrupt[path] = times`` flips served bytes; ``refuse_connections()``
stops listening (the client sees connection refused). ``gated[repo] = token``: that repo
answers 401 ``GatedRepo`` to requests without ``Authorization: Bearer token``. ``etags[path] = text`` serves that
ETag (and, for LFS files, X-Linked-Etag) instead: hostile metadata. Every request is recorded in
``requests`` as ``(method, path, headers)``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


@dataclass
class HubFile:
    path: str
    disk: Path
    size: int
    git_sha1: str
    sha256: str | None  # set for LFS files
    pointer: bytes = b""


@dataclass
class HubRepo:
    repo_id: str
    commit: str
    files: dict[str, HubFile] = field(default_factory=dict)


def _hash(path: Path, algo: str, prefix: bytes = b"") -> str:
    digest = hashlib.new(algo, prefix)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def load_repo(repo_id: str, folder: Path, lfs: tuple[str, ...] = ("*.safetensors",)) -> HubRepo:
    files = {}
    for disk in sorted(p for p in folder.rglob("*") if p.is_file()):
        path = disk.relative_to(folder).as_posix()
        size = disk.stat().st_size
        if any(fnmatch.fnmatch(path, pattern) for pattern in lfs):
            sha = _hash(disk, "sha256")
            pointer = (
                f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {size}\n"
            ).encode()
            git = hashlib.sha1(b"blob %d\0" % len(pointer) + pointer).hexdigest()
            files[path] = HubFile(path, disk, size, git, sha, pointer)
        else:
            git = _hash(disk, "sha1", b"blob %d\0" % size)
            files[path] = HubFile(path, disk, size, git, None)
    commit = hashlib.sha1("".join(f.git_sha1 for f in files.values()).encode()).hexdigest()
    return HubRepo(repo_id, commit, files)


class HubServer:
    """Hub + CDN listeners on 127.0.0.1, random ports. Use as a context manager."""

    def __init__(self, repos: list[HubRepo]) -> None:
        self.repos = {r.repo_id: r for r in repos}
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.drop_after: dict[str, int] = {}
        self.corrupt: dict[str, int] = {}
        self.etags: dict[str, str] = {}
        self.offline = False
        self.gated: dict[str, str] = {}  # repo id -> the token that may read it
        self.lock = threading.Lock()
        self._servers = [self._listener(), self._listener()]
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._servers[0].server_address[1]}"

    @property
    def cdn_url(self) -> str:
        return f"http://127.0.0.1:{self._servers[1].server_address[1]}"

    def _listener(self) -> ThreadingHTTPServer:
        hub = self

        class Handler(_Handler):
            server_state = hub

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        return server

    def start(self) -> HubServer:
        for server in self._servers:
            t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
            t.daemon = True
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()

    def refuse_connections(self) -> None:
        """Go dark: stop listening, and hang up on connections kept alive from before."""
        self.offline = True
        self.stop()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        if self._threads:
            self.stop()

    def seen(self, method: str, fragment: str) -> list[dict[str, str]]:
        """Headers of the recorded requests whose method matches and path contains ``fragment``."""
        with self.lock:
            return [h for m, p, h in self.requests if m == method and fragment in p]

    def _take(self, knobs: dict[str, Any], path: str) -> Any:
        with self.lock:
            value = knobs.get(path)
            if value is None:
                return None
            if knobs is self.corrupt:
                if value <= 1:
                    del knobs[path]
                else:
                    knobs[path] = value - 1
                return True
            del knobs[path]
            return value


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_state: HubServer
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(body=False)

    def do_GET(self) -> None:
        self._route(body=True)

    # ----------------------------------------------------------------------- routing

    def _route(self, body: bool) -> None:
        hub = self.server_state
        if hub.offline:  # a kept-alive connection from before: hang up without a word
            self.close_connection = True
            return
        path = unquote(urlsplit(self.path).path)
        with hub.lock:
            hub.requests.append(
                (self.command, path, {k.lower(): v for k, v in self.headers.items()})
            )
        if path.startswith("/api/models/"):
            return self._model_info(path[len("/api/models/") :])
        if path.startswith("/lfs/"):
            sha = path[len("/lfs/") :]
            for repo in hub.repos.values():
                for f in repo.files.values():
                    if f.sha256 == sha:
                        return self._send_file(f, {}, body)
            return self._error(404, "EntryNotFound")
        for repo_id, repo in hub.repos.items():
            prefix = f"/{repo_id}/resolve/"
            if path.startswith(prefix) and not self._allowed(repo_id):
                return self._error(401, "GatedRepo")
            if path.startswith(prefix):
                revision, _, name = path[len(prefix) :].partition("/")
                return self._resolve(repo, revision, name, body)
        return self._error(404, "RepoNotFound")

    def _allowed(self, repo_id: str) -> bool:
        """A gated repo answers only requests that carry its token (as the hub does for
        users who have not accepted its conditions)."""
        token = self.server_state.gated.get(repo_id)
        return token is None or self.headers.get("Authorization") == f"Bearer {token}"

    def _model_info(self, rest: str) -> None:
        repo_id, _, revision = rest.partition("/revision/")
        repo = self.server_state.repos.get(repo_id)
        if repo is None:
            return self._error(404, "RepoNotFound")
        if not self._allowed(repo_id):
            return self._error(401, "GatedRepo")
        if revision not in ("", "main", repo.commit):
            return self._error(404, "RevisionNotFound")
        siblings = []
        for f in repo.files.values():
            entry: dict[str, Any] = {"rfilename": f.path, "blobId": f.git_sha1}
            if f.sha256:
                entry["size"] = len(f.pointer)
                entry["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": len(f.pointer)}
            else:
                entry["size"] = f.size
            siblings.append(entry)
        data = json.dumps({"id": repo_id, "sha": repo.commit, "siblings": siblings}).encode()
        self._reply(200, {"Content-Type": "application/json"}, data)

    def _resolve(self, repo: HubRepo, revision: str, name: str, body: bool) -> None:
        if revision not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound")
        f = repo.files.get(name)
        if f is None:
            return self._error(404, "EntryNotFound")
        common = {"X-Repo-Commit": repo.commit}
        etag = self.server_state.etags.get(name)
        if f.sha256 is None:
            return self._send_file(f, {**common, "ETag": f'"{etag or f.git_sha1}"'}, body)
        headers = {
            **common,
            "ETag": f'"{f.git_sha1}"',
            "X-Linked-Etag": f'"{etag or f.sha256}"',
            "X-Linked-Size": str(f.size),
            "Location": f"{self.server_state.cdn_url}/lfs/{f.sha256}",
        }
        self._reply(302, headers, b"")

    # ----------------------------------------------------------------------- replies

    def _error(self, status: int, code: str) -> None:
        data = json.dumps({"error": code}).encode()
        self._reply(status, {"X-Error-Code": code, "Content-Type": "application/json"}, data)

    def _reply(self, status: int, headers: dict[str, str], data: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _send_file(self, f: HubFile, headers: dict[str, str], body: bool) -> None:
        start, end = 0, f.size - 1
        status = 200
        m = _RANGE.match(self.headers.get("Range", ""))
        if m:
            start = int(m.group(1))
            end = min(int(m.group(2)), f.size - 1) if m.group(2) else f.size - 1
            if start >= f.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{f.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            status = 206
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
        self.end_headers()
        if not body:
            return
        hub = self.server_state
        drop_at = hub._take(hub.drop_after, f.path)
        corrupt = hub._take(hub.corrupt, f.path)
        with open(f.disk, "rb") as fh:
            fh.seek(start)
            pos = start
            while pos <= end:
                block = fh.read(min(1 << 20, end + 1 - pos))
                if drop_at is not None and pos + len(block) > drop_at:
                    self.wfile.write(block[: max(drop_at - pos, 0)])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if corrupt and pos == start:
                    block = bytes(b ^ 0xFF for b in block[:4096]) + block[4096:]
                self.wfile.write(block)
                pos += len(block)
