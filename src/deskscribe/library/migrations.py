"""The library's schema, as an ordered list of migrations (``PRAGMA user_version`` = how many ran).

Never edit a migration that has shipped: add a new one at the end. Each runs in one transaction
together with the version bump, so a crash mid-upgrade leaves the old schema intact and the
upgrade simply runs again on the next start.

- 1: ``items``, one row per live session or file job.
- 2: ``item_search``, the search index over title, source name and transcript text: FTS5 when
  this SQLite has it, else a plain table searched with LIKE. Filled from the transcripts that
  already exist, so an upgraded library is searchable at once.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

SEARCH_TABLE = "item_search"


def _v1_items(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE items (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            kind TEXT NOT NULL CHECK (kind IN ('live', 'file')),
            title TEXT NOT NULL,
            source TEXT NOT NULL,
            created TEXT NOT NULL,
            updated TEXT NOT NULL,
            duration REAL,
            status TEXT NOT NULL DEFAULT 'queued',
            progress REAL NOT NULL DEFAULT 0,
            error TEXT,
            transcript_path TEXT,
            options TEXT NOT NULL DEFAULT '{}',
            options_key TEXT NOT NULL DEFAULT '{}',
            file_size INTEGER,
            file_mtime REAL
        )"""
    )
    db.execute("CREATE INDEX items_created ON items (created)")
    db.execute("CREATE INDEX items_source ON items (source, status)")


def has_fts5(db: sqlite3.Connection) -> bool:
    try:
        db.execute("CREATE VIRTUAL TABLE temp._fts5_probe USING fts5(x)")
    except sqlite3.OperationalError:
        return False
    db.execute("DROP TABLE temp._fts5_probe")
    return True


def transcript_text(path: str | None) -> str:
    """The plain text of a transcript file, or "" when it is missing or unreadable."""
    if not path:
        return ""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        return " ".join(str(s.get("text", "")).strip() for s in data.get("segments") or [])
    except (OSError, ValueError, AttributeError, TypeError):
        return ""


def _v2_search(db: sqlite3.Connection) -> None:
    if has_fts5(db):
        db.execute(
            f"CREATE VIRTUAL TABLE {SEARCH_TABLE} USING fts5("
            "title, source_name, body, tokenize = 'unicode61 remove_diacritics 2')"
        )
    else:
        db.execute(
            f"CREATE TABLE {SEARCH_TABLE} (rowid INTEGER PRIMARY KEY, title TEXT, "
            "source_name TEXT, body TEXT)"
        )
    rows = db.execute("SELECT id, title, source, transcript_path FROM items").fetchall()
    for item_id, title, source, transcript in rows:
        db.execute(
            f"INSERT INTO {SEARCH_TABLE} (rowid, title, source_name, body) VALUES (?, ?, ?, ?)",
            (item_id, title, source_name(source), transcript_text(transcript)),
        )


def source_name(source: str) -> str:
    """What the user knows the source by: the file's name, or the recording folder's name."""
    return Path(source).name


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_v1_items, _v2_search]
LATEST = len(MIGRATIONS)
