"""The job API's table: one row per job in SQLite (``jobs.db``), in submission order. WAL with
``synchronous=FULL``, so a job the server answered 202 for is on disk before the answer."""

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
    error TEXT  -- JSON {"message", "type", "code"} when failed
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, seq);
PRAGMA user_version = 1;
"""


class JobStore:
    """The jobs table: one connection shared by the threads, behind a lock (the queries are
    tiny; WAL keeps a reader from waiting on the disk)."""

    def __init__(self, path: Path) -> None:
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a 202 means the job is on disk
            self._db.executescript(SCHEMA)
        with contextlib.suppress(OSError):
            os.chmod(path, 0o600)

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

    def newest(self, limit: int) -> list[sqlite3.Row]:
        return self._q("SELECT * FROM jobs ORDER BY seq DESC LIMIT ?", (limit,))

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
