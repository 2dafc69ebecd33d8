"""The library: every live session and file job, in SQLite (``<data dir>/library.sqlite3``).

One row per item (`Item`); transcripts live next to the database as JSON files
(``transcripts/<id>.json``, written atomically), so an edit is on disk the moment
`save_transcript` returns and a damaged database never takes the text with it. A live session's
transcript is read from its recording folder until it is first edited.

Safe to use from several threads: each thread gets its own connection (WAL journal, so readers
never wait for the queue's writer). No Qt here: the GUI, the CLI and tests share this module.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import DeskScribeError
from ..fsutil import private_dir
from ..paths import data_dir
from ..transcript import Transcript
from ..transcript.export import export
from .migrations import LATEST, MIGRATIONS, SEARCH_TABLE, source_name, transcript_text

log = logging.getLogger(__name__)

DB_NAME = "library.sqlite3"
RANK_WORDS = 32  # words of a question that `Library.rank` looks for, at most
STATUSES = ("queued", "running", "done", "failed", "cancelled")
UNFINISHED = ("queued", "running")
_UPDATABLE = {
    "status", "progress", "error", "transcript_path", "duration", "title", "options", "source",
}  # fmt: skip


class LibraryError(DeskScribeError):
    """The library cannot be opened or changed; the message says what to do."""


class ItemNotFoundError(LibraryError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such library item"


@dataclass
class Item:
    id: int
    kind: str  # "live" (a recorded session; source = its folder) or "file" (source = the file)
    title: str
    source: str
    created: datetime
    updated: datetime
    duration: float | None
    status: str  # one of STATUSES
    progress: float  # 0..1
    error: str | None
    transcript_path: str | None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def source_name(self) -> str:
        return source_name(self.source)

    @property
    def has_transcript(self) -> bool:
        return bool(self.transcript_path) and Path(self.transcript_path).is_file()


# Options that say how a job is run or what is done with its transcript, not what the
# transcript is: two jobs that differ only in these are the same transcription.
NOT_COMPARED = ("export", "untrusted")


def options_key(options: dict[str, Any]) -> str:
    """Options in one canonical form, so equal options compare equal as text."""
    kept = {k: v for k, v in options.items() if k not in NOT_COMPARED}
    return json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def _file_identity(path: Path) -> tuple[int | None, float | None]:
    try:
        st = path.stat()
    except OSError:
        return None, None
    return st.st_size, st.st_mtime


class Library:
    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else data_dir() / DB_NAME
        self.transcripts_dir = self.path.parent / "transcripts"
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        try:
            private_dir(self.path.parent)
        except OSError as e:
            raise LibraryError(
                f"Cannot create the library folder '{self.path.parent}' ({e.strerror or e}). "
                "Check that the disk is connected and that you may write there."
            ) from None
        self._migrate(self._db())

    # --- connections and schema ------------------------------------------------------------

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(
                    self.path, timeout=10.0, isolation_level=None, check_same_thread=False
                )
                if os.name == "posix":  # the full text of every transcript is in its index
                    with contextlib.suppress(OSError):
                        os.chmod(self.path, 0o600)
                db.execute("PRAGMA journal_mode = WAL")
                db.execute("PRAGMA synchronous = NORMAL")
                db.execute("PRAGMA foreign_keys = ON")
            except sqlite3.DatabaseError as e:
                raise LibraryError(
                    f"The library '{self.path}' cannot be opened ({e}). If the file is damaged, "
                    "move it aside; DeskScribe starts a new one and your recordings stay where "
                    "they are."
                ) from None
            self._local.db = db
            with self._lock:
                self._all.append(db)
        return db

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > LATEST:
            raise LibraryError(
                f"The library '{self.path}' was made by a newer version of DeskScribe "
                f"(schema {version}, this version knows up to {LATEST}). Update DeskScribe."
            )
        while version < LATEST:
            db.execute("BEGIN IMMEDIATE")  # one upgrader at a time, even across processes
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version < LATEST:
                    MIGRATIONS[version](db)
                    version += 1
                    db.execute(f"PRAGMA user_version = {version}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            log.info("library %s upgraded to schema %d", self.path, version)

    @property
    def schema_version(self) -> int:
        return self._db().execute("PRAGMA user_version").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            for db in self._all:
                with contextlib.suppress(sqlite3.Error):
                    db.close()
            self._all.clear()
        self._local = threading.local()

    # --- adding ----------------------------------------------------------------------------

    def add_live_session(
        self, folder: str | os.PathLike[str], title: str, created: datetime | None = None,
        duration: float | None = None,
    ) -> int:  # fmt: skip
        """Add a recorded session (done); adding the same folder again returns its id."""
        folder = Path(folder).resolve()
        row = (
            self._db()
            .execute("SELECT id FROM items WHERE kind = 'live' AND source = ?", (str(folder),))
            .fetchone()
        )
        if row is not None:
            return int(row[0])
        transcript = folder / "transcript.json"
        stamp = (created or datetime.now().astimezone()).isoformat(timespec="seconds")
        return self._insert(
            kind="live", title=title, source=str(folder), created=stamp, duration=duration,
            status="done", progress=1.0,
            transcript_path=str(transcript) if transcript.is_file() else None,
        )  # fmt: skip

    def add_file(self, path: str | os.PathLike[str], options: dict[str, Any]) -> int:
        """Queue a media file for transcription with ``options``; returns the new item's id."""
        path = Path(path).resolve()
        size, mtime = _file_identity(path)
        return self._insert(
            kind="file", title=path.stem, source=str(path), created=_now(), duration=None,
            status="queued", progress=0.0, transcript_path=None, options=options,
            file_size=size, file_mtime=mtime,
        )  # fmt: skip

    def _insert(self, options: dict[str, Any] | None = None, **cols: Any) -> int:
        options = options or {}
        cols.update(updated=_now(), options=json.dumps(options), options_key=options_key(options))
        names = ", ".join(cols)
        marks = ", ".join("?" for _ in cols)
        db = self._db()
        with self._transaction(db):
            item_id = db.execute(
                f"INSERT INTO items ({names}) VALUES ({marks})", tuple(cols.values())
            ).lastrowid
            self._index(db, item_id)
        return int(item_id)

    # --- reading ---------------------------------------------------------------------------

    def get(self, item_id: int) -> Item:
        row = self._db().execute(f"SELECT {_COLUMNS} FROM items WHERE id = ?", (item_id,))
        found = row.fetchone()
        if found is None:
            raise ItemNotFoundError(f"library item {item_id} does not exist (it was deleted)")
        return _item(found)

    def search(self, text: str = "", kind: str | None = None) -> list[Item]:
        """Items whose title, source name or transcript contain every word of ``text``
        (prefixes match: "meet" finds "meeting"); newest first. Empty text lists everything."""
        where, args = [], []
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        words = text.replace("\x00", " ").split()  # SQLite cuts text at a NUL
        if words and self._fts():
            query = " ".join('"' + w.replace('"', '""') + '"*' for w in words)
            where.append(f"id IN (SELECT rowid FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH ?)")
            args.append(query)
        else:
            for w in words:
                pattern = (
                    "%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
                )
                where.append(
                    f"id IN (SELECT rowid FROM {SEARCH_TABLE} WHERE title LIKE ? ESCAPE '\\' "
                    "OR source_name LIKE ? ESCAPE '\\' OR body LIKE ? ESCAPE '\\')"
                )
                args += [pattern] * 3
        sql = f"SELECT {_COLUMNS} FROM items"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._db().execute(sql + " ORDER BY created DESC, id DESC", args).fetchall()
        return [_item(r) for r in rows]

    def rank(self, text: str, limit: int = 5) -> list[int]:
        """Ids of the items that contain any word of ``text`` (prefixes match), best match
        first: FTS5's bm25 with the title weighted twice, else the count of words found. For
        questions (Ask): a question's words are OR-ed, as no transcript holds all of them.
        At most the first ``RANK_WORDS`` words count."""
        words = [w for w in text.replace("\x00", " ").split() if any(c.isalnum() for c in w)]
        words = words[:RANK_WORDS]
        limit = max(1, int(limit))
        if not words:
            return []
        if self._fts():
            query = " OR ".join('"' + w.replace('"', '""') + '"*' for w in words)
            rows = self._db().execute(
                f"SELECT rowid FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH ? "
                f"ORDER BY bm25({SEARCH_TABLE}, 2.0, 1.0, 1.0), rowid DESC LIMIT ?",
                (query, limit),
            )
            return [int(r[0]) for r in rows.fetchall()]
        found, args = [], []
        for w in words:
            pattern = "%" + w.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            found.append(
                "(title LIKE ? ESCAPE '\\' OR source_name LIKE ? ESCAPE '\\' "
                "OR body LIKE ? ESCAPE '\\')"
            )
            args += [pattern] * 3
        score = " + ".join(found)
        rows = self._db().execute(
            f"SELECT rowid, {score} AS score FROM {SEARCH_TABLE} WHERE score > 0 "
            "ORDER BY score DESC, rowid DESC LIMIT ?",
            (*args, limit),
        )
        return [int(r[0]) for r in rows.fetchall()]

    def live_folders(self) -> set[Path]:
        """The session folders of every live item (resolved)."""
        rows = self._db().execute("SELECT source FROM items WHERE kind = 'live'").fetchall()
        return {Path(r[0]).resolve() for r in rows if r[0]}

    def unfinished_jobs(self) -> list[Item]:
        """File jobs still queued, or running when the app stopped (oldest first)."""
        rows = self._db().execute(
            f"SELECT {_COLUMNS} FROM items WHERE kind = 'file' AND status IN (?, ?) ORDER BY id",
            UNFINISHED,
        )
        return [_item(r) for r in rows.fetchall()]

    def find_done(self, path: str | os.PathLike[str], options: dict[str, Any]) -> Item | None:
        """The finished job of this same file (same size and time) with the same options."""
        path = Path(path).resolve()
        size, mtime = _file_identity(path)
        rows = self._db().execute(
            f"SELECT {_COLUMNS} FROM items WHERE kind = 'file' AND source = ? AND status = 'done' "
            "AND options_key = ? AND file_size IS ? AND file_mtime IS ? ORDER BY id DESC",
            (str(path), options_key(options), size, mtime),
        )
        for row in rows.fetchall():
            item = _item(row)
            if item.has_transcript:
                return item
        return None

    # --- changing --------------------------------------------------------------------------

    def update(self, item_id: int, **fields: Any) -> None:
        """Change some of: status, progress, error, transcript_path, duration, title, options."""
        unknown = set(fields) - _UPDATABLE
        if unknown:
            raise ValueError(f"cannot update {sorted(unknown)}; fields: {sorted(_UPDATABLE)}")
        if "status" in fields and fields["status"] not in STATUSES:
            raise ValueError(f"unknown status {fields['status']!r}; one of {STATUSES}")
        if "options" in fields:
            fields["options_key"] = options_key(fields["options"])
            fields["options"] = json.dumps(fields["options"])
        if "source" in fields:
            size, mtime = _file_identity(Path(fields["source"]))
            fields.update(file_size=size, file_mtime=mtime)
        fields["updated"] = _now()
        sets = ", ".join(f"{k} = ?" for k in fields)
        db = self._db()
        with self._transaction(db):
            changed = db.execute(
                f"UPDATE items SET {sets} WHERE id = ?", (*fields.values(), item_id)
            ).rowcount
            if not changed:
                raise ItemNotFoundError(f"library item {item_id} does not exist (it was deleted)")
            if {"title", "transcript_path", "source"} & set(fields):
                self._index(db, item_id)

    def load_transcript(self, item_id: int) -> Transcript:
        item = self.get(item_id)
        if not item.transcript_path:
            raise LibraryError(f"'{item.title}' has no transcript yet ({item.status}).")
        try:
            return Transcript.from_json(Path(item.transcript_path).read_bytes())
        except FileNotFoundError:
            raise LibraryError(
                f"The transcript of '{item.title}' is missing ({item.transcript_path}); it may "
                "have been moved or deleted. Transcribe the file again."
            ) from None
        except (OSError, ValueError) as e:
            raise LibraryError(f"The transcript of '{item.title}' cannot be read: {e}") from None

    def save_transcript(self, item_id: int, transcript: Transcript) -> Path:
        """Write the transcript atomically (the old file or the new, never a mix) and index it."""
        self.get(item_id)  # fail before writing a file for an item that is gone
        private_dir(self.transcripts_dir)
        target = self._own_transcript(self.get(item_id))
        if target is None:
            # A name no other library can have chosen: after a damaged library was moved
            # aside, ids start again at 1, and "1.json" of the old one must stay as it was.
            target = self.transcripts_dir / f"{item_id}-{uuid.uuid4().hex[:12]}.json"
            export(transcript, target, "json", overwrite=False, private=True)
        else:
            export(transcript, target, "json", overwrite=True, private=True)
        self.update(item_id, transcript_path=str(target))
        return target

    def _own_transcript(self, item: Item) -> Path | None:
        """The library's copy of ``item``'s transcript when this library wrote it (its row
        names a file in the transcripts folder); None otherwise."""
        if not item.transcript_path:
            return None
        path = Path(item.transcript_path)
        return path if path.parent.resolve() == self.transcripts_dir.resolve() else None

    def delete(self, item_id: int, delete_files: bool = False) -> None:
        """Remove the item and the library's copy of its transcript. With ``delete_files``, a live
        session's recording folder goes too; a user's own media files are never deleted."""
        item = self.get(item_id)
        db = self._db()
        with self._transaction(db):
            db.execute("DELETE FROM items WHERE id = ?", (item_id,))
            db.execute(f"DELETE FROM {SEARCH_TABLE} WHERE rowid = ?", (item_id,))
        own = self._own_transcript(item)  # never a file another library wrote
        if own is not None:
            with contextlib.suppress(FileNotFoundError):
                own.unlink()
        if delete_files and item.kind == "live" and Path(item.source).is_dir():
            shutil.rmtree(item.source, ignore_errors=True)

    # --- internals -------------------------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self, db: sqlite3.Connection):
        for attempt in range(20):
            try:
                db.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as e:  # "database is locked" past the timeout
                if attempt == 19 or "locked" not in str(e):
                    raise LibraryError(f"The library is busy or unwritable: {e}") from None
                time.sleep(0.05)
        try:
            yield
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _fts(self) -> bool:
        if not hasattr(self, "_is_fts"):
            sql = (
                self._db()
                .execute("SELECT sql FROM sqlite_master WHERE name = ?", (SEARCH_TABLE,))
                .fetchone()
            )
            self._is_fts = bool(sql) and "fts5" in sql[0].lower()
        return self._is_fts

    def _index(self, db: sqlite3.Connection, item_id: int) -> None:
        title, source, transcript = db.execute(
            "SELECT title, source, transcript_path FROM items WHERE id = ?", (item_id,)
        ).fetchone()
        db.execute(f"DELETE FROM {SEARCH_TABLE} WHERE rowid = ?", (item_id,))
        db.execute(
            f"INSERT INTO {SEARCH_TABLE} (rowid, title, source_name, body) VALUES (?, ?, ?, ?)",
            (item_id, title, source_name(source), transcript_text(transcript)),
        )


_COLUMNS = (
    "id, kind, title, source, created, updated, duration, status, progress, error, "
    "transcript_path, options"
)


def _item(row: tuple) -> Item:
    (item_id, kind, title, source, created, updated, duration, status, progress, error,
     transcript, options) = row  # fmt: skip
    try:
        opts = json.loads(options or "{}")
    except ValueError:
        opts = {}
    return Item(
        id=int(item_id), kind=kind, title=title, source=source,
        created=datetime.fromisoformat(created), updated=datetime.fromisoformat(updated),
        duration=duration, status=status, progress=float(progress or 0.0), error=error,
        transcript_path=transcript, options=opts if isinstance(opts, dict) else {},
    )  # fmt: skip
