"""The job API's table: one row per job in SQLite (``jobs.db``), in submission order. WAL with
``synchronous=FULL``, so a job the server answered 202 for is on disk before the answer.
The database and its WAL files are created readable by this user only."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,  -- submission order: the queue's order
    id TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    finished_at INTEGER,
    filename TEXT NOT NULL,
    model TEXT NOT NULL,
    fields TEXT NOT NULL,  -- requests.Fields as JSON
    upload TEXT NOT NULL,  -- the upload's file name in jobs/<id>/
    duration REAL,
    error TEXT,  -- JSON {"message", "type", "code"} when failed
    owner TEXT NOT NULL DEFAULT '',  -- SHA-256 of the key that made it ('' without keys)
    bytes INTEGER NOT NULL DEFAULT 0  -- the upload's size, for the queued-bytes cap
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, seq);
"""
VERSION = 2
# Each step takes the schema from its index + 1 to the next version, in one transaction.
MIGRATIONS = (
    "",  # 0 -> 1: the table above (a new database)
    "ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';"
    "ALTER TABLE jobs ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;",  # 1 -> 2
)


class JobStore:
    """The jobs table: one connection shared by the threads, behind a lock (the queries are
    tiny; WAL keeps a reader from waiting on the disk)."""

    def __init__(self, path: Path) -> None:
        # SQLite makes -wal and -shm with the database's mode: make it private first.
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        for name in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            with contextlib.suppress(OSError):
                os.chmod(name, 0o600)  # a database from a version that left them 0644
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a 202 means the job is on disk
            self._migrate()

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            self._db.executescript(f"BEGIN; {SCHEMA} PRAGMA user_version = {VERSION}; COMMIT;")
            return
        if version > VERSION:
            raise sqlite3.DatabaseError(
                f"jobs.db was made by a newer DeskScribe (schema {version}); upgrade, or move "
                "the server's data folder aside"
            )
        for step in range(version, VERSION):
            self._db.executescript(f"BEGIN; {MIGRATIONS[step]} PRAGMA user_version = "
                                   f"{step + 1}; COMMIT;")  # fmt: skip

    def _q(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _do(self, sql: str, args: tuple = ()) -> int:
        with self._lock:
            return self._db.execute(sql, args).rowcount

    def add(self, row: dict) -> None:
        keys = ", ".join(row)
        self._do(f"INSERT INTO jobs ({keys}) VALUES ({', '.join('?' * len(row))})",
                 tuple(row.values()))  # fmt: skip

    def get(self, job_id: str) -> sqlite3.Row | None:
        found = self._q("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return found[0] if found else None

    def newest(self, limit: int, owner: str | None = None) -> list[sqlite3.Row]:
        """The newest jobs (of ``owner`` only, unless None)."""
        if owner is None:
            return self._q("SELECT * FROM jobs ORDER BY seq DESC LIMIT ?", (limit,))
        return self._q("SELECT * FROM jobs WHERE owner = ? ORDER BY seq DESC LIMIT ?",
                       (owner, limit))  # fmt: skip

    def waiting_bytes(self) -> int:
        """Bytes of the uploads of queued and running jobs."""
        found = self._q("SELECT COALESCE(SUM(bytes), 0) AS n FROM jobs "
                        "WHERE status IN ('queued', 'running')")  # fmt: skip
        return int(found[0]["n"])

    def finished_before(self, when: int) -> list[str]:
        found = self._q("SELECT id FROM jobs WHERE status IN ('done', 'failed', 'cancelled') "
                        "AND finished_at < ?", (when,))  # fmt: skip
        return [r["id"] for r in found]

    def with_status(self, *statuses: str) -> list[sqlite3.Row]:
        marks = ", ".join("?" * len(statuses))
        return self._q(f"SELECT * FROM jobs WHERE status IN ({marks}) ORDER BY seq", statuses)

    def next_queued(self, skip: set[str]) -> str | None:
        marks = ", ".join("?" * len(skip)) or "''"
        found = self._q(f"SELECT id FROM jobs WHERE status = 'queued' AND id NOT IN ({marks}) "
                        "ORDER BY seq LIMIT 1", tuple(skip))  # fmt: skip
        return found[0]["id"] if found else None

    def update(self, job_id: str, when: str | None = None, **values) -> bool:
        """Set ``values``; with ``when``, only while the job's status is ``when``."""
        sets = ", ".join(f"{k} = ?" for k in values)
        sql, args = f"UPDATE jobs SET {sets} WHERE id = ?", (*values.values(), job_id)
        if when is not None:
            sql, args = sql + " AND status = ?", (*args, when)
        return self._do(sql, args) > 0

    def delete(self, job_id: str) -> None:
        self._do("DELETE FROM jobs WHERE id = ?", (job_id,))

    def counts(self) -> dict[str, int]:
        rows = self._q("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status")
        return {r["status"]: r["n"] for r in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()
