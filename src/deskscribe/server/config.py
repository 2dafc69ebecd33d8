"""The server's settings, and its API keys.

Keys are random tokens (``deskscribe serve --new-key FILE`` makes one, prints it once and
appends its SHA-256 to FILE). The key file holds only hashes, one per line (``sha256:HEX``),
so a copy of it does not let anyone in. A request's bearer token is hashed and compared in
constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import DeskScribeError
from ..fsutil import private_dir, write_atomic

PREFIX = "sha256:"


class ServerConfigError(DeskScribeError):
    """A setting the server cannot start with; the message says what to change."""


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    model: str | None = None  # the default model (None: the app's default, else the newest)
    device: str = "auto"
    key_hashes: frozenset[str] = frozenset()  # hex SHA-256 of the allowed keys; empty: no keys
    # Keys that also see every key's jobs (an admin's); they are valid keys everywhere.
    admin_key_hashes: frozenset[str] = frozenset()
    max_upload_mb: float = 25.0  # per request of the audio API (OpenAI's own limit)
    max_job_upload_mb: float = 2048.0  # per job: long recordings are what jobs are for
    max_audio_seconds: float = 4 * 3600.0
    max_queue: int = 16  # requests waiting for a worker; more get 429
    workers: int = 1  # transcriptions at once
    # Windows per batch that the chunks of concurrent transcriptions share (0: not shared).
    shared_batch_rows: int = 16
    shared_batch_on_cpu: bool = False  # a GPU's batches only, unless asked (shared_batches.py)
    max_sessions: int = 8  # realtime sessions at once
    # A realtime session whose client sends nothing this long is closed (0: never): an
    # abandoned one would hold a --max-sessions slot and its decoder thread for good.
    realtime_idle_seconds: float = 900.0
    idle_ttl: float = 600.0  # a model unused this long is released (0: never)
    preload: bool = False
    cors_origins: tuple[str, ...] = ()
    # Host names the server answers to besides loopback names and IP literals ("*": any).
    allowed_hosts: tuple[str, ...] = ()
    data_dir: Path | None = None  # jobs and uploads (None: <app data>/server)
    job_retention_hours: float = 7 * 24.0  # finished jobs are purged after this (0: kept)
    max_queued_job_gb: float = 20.0  # uploads of queued and running jobs, in all
    # Slow clients (guard.py, connections.py): complete headers within header_timeout, no
    # pause over body_timeout in a body, idle keep-alive connections closed after keep_alive.
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keep_alive: float = 5.0
    max_connections: int = 1024  # open at once, in all (clamped below the file limit)
    max_connections_per_client: int = 64  # per client address
    # Realtime audio is taken at most this many times faster than real time, after the first
    # REALTIME_BURST_SECONDS (a client cannot make a session decode an hour in a minute).
    realtime_max_speed: float = 10.0
    extra: dict = field(default_factory=dict)

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

    def upload_limit(self, path: str) -> tuple[int, float]:
        """(bytes, MB) an upload to the route ``path`` may have: jobs take long files."""
        mb = self.max_job_upload_mb if path.startswith("/v1/jobs") else self.max_upload_mb
        return int(mb * 1024 * 1024), mb

    def check(self) -> None:
        """Refuse what would be unsafe: anything but loopback without a key."""
        if not self.key_hashes and not is_loopback(self.host):
            raise ServerConfigError(
                f"refusing to serve on {self.host} without an API key: anyone on the network "
                "could use it. Make a key with `deskscribe serve --new-key keys.txt`, then "
                "start with `--api-key-file keys.txt` (or serve on 127.0.0.1)"
            )
        if self.workers < 1 or self.max_queue < 0 or self.max_upload_mb <= 0:
            raise ServerConfigError("--workers must be >= 1, --max-queue >= 0, --max-upload-mb > 0")
        if self.max_job_upload_mb <= 0:
            raise ServerConfigError("--max-job-upload-mb must be > 0")
        if self.shared_batch_rows < 0:
            raise ServerConfigError("--shared-batch must be >= 0 (0: batches not shared)")
        if min(self.header_timeout, self.body_timeout, self.keep_alive) <= 0:
            raise ServerConfigError("--header-timeout, --body-timeout, --keep-alive must be > 0")
        if self.max_connections < 1 or self.max_connections_per_client < 1:
            raise ServerConfigError("--max-connections and --max-connections-per-client: >= 1")
        if self.realtime_max_speed < 1 or self.max_queued_job_gb <= 0:
            raise ServerConfigError("--realtime-max-speed must be >= 1, --max-queued-job-gb > 0")
        if self.job_retention_hours < 0:
            raise ServerConfigError("--job-retention-hours must be >= 0 (0: keep finished jobs)")

    def folder(self) -> Path:
        """The server's folder: ``--data-dir`` as it is when it exists (its mode is the
        user's choice: a shared 1777 folder keeps its sticky bit), else created private; the
        default one private. What the server writes inside is private either way."""
        if self.data_dir is None:
            from ..paths import data_dir

            self.data_dir = data_dir() / "server"
            return private_dir(self.data_dir)
        return private_dir(self.data_dir, tighten=False)


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def bearer(headers) -> str | None:
    """The token of an ``Authorization: Bearer TOKEN`` header, if there is one."""
    value = headers.get("authorization") or ""
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None


def key_matches(key: str | None, hashes: frozenset[str]) -> bool:
    if not key:
        return False
    digest = hash_key(key)
    found = False
    for h in hashes:  # every hash compared, in constant time each
        found |= hmac.compare_digest(digest, h)
    return found


def read_key_file(path: Path) -> frozenset[str]:
    """The hashes in a key file. Blank lines and ``#`` comments are skipped; a line that is not
    a hash (a key pasted in as it is) is refused: the file must not hold keys in the clear."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise ServerConfigError(f"cannot read the API key file {path}: {e.strerror or e}") from e
    hashes = set()
    for number, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        digest = line[len(PREFIX) :] if line.startswith(PREFIX) else ""
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ServerConfigError(
                f"{path}, line {number}: not a key hash. The file holds `sha256:HEX` lines only "
                "(never a key in the clear); add keys with `deskscribe serve --new-key FILE`"
            )
        hashes.add(digest)
    if not hashes:
        raise ServerConfigError(f"the API key file {path} has no keys; add one with --new-key")
    return frozenset(hashes)


def new_key(path: Path, name: str = "") -> str:
    """Make a key, append its hash to ``path`` (created private), return the key itself."""
    key = "ds-" + secrets.token_urlsafe(32)
    path = Path(path)
    if not path.parent.exists():
        private_dir(path.parent)
    line = f"{PREFIX}{hash_key(key)}" + (f"  # {name}" if name else "")
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if old and not old.endswith("\n"):
        old += "\n"
    write_atomic(path, old + line + "\n", private=True)
    return key
