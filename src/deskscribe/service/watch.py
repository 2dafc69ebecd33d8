"""Watch folders: new audio and video files dropped into a folder join the file queue by
themselves, each folder with its own options (model, language, speakers, export formats and
where the exports go).

A file joins once it is fully written: it has been seen with the same size and modification
time twice, ``settle_seconds`` apart, and it can be opened for reading (a copy in progress
grows, or on Windows is locked). It joins once: files handed over are remembered by path,
size and modification time in ``watch-state.json`` (written atomically after each hand-over),
so a restart, or a file that failed, does not run again; a file replaced by a new recording
is new. Folders are looked at by polling (every ``interval`` seconds): it works the same on
every system and on network drives, where change notifications are unreliable. Files from a
watched folder are not the user's own picks: they are transcribed as untrusted media (only
real audio/video containers; see ``audio.untrusted``).

`FolderWatcher` is the one implementation: the window runs it on a thread with the folders
from Settings; ``deskscribe watch`` runs it in the foreground.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..fsutil import write_atomic
from ..transcript.subtitles import SubtitleRules
from .queue import MEDIA_SUFFIXES, job_options

log = logging.getLogger(__name__)

INTERVAL = 2.0
SETTLE = 2.0
STATE_FILE = "watch-state.json"


@dataclass(frozen=True)
class WatchFolder:
    """One watched folder and what its files get."""

    path: Path
    recursive: bool = False
    model: str | None = None
    language: str | None = None
    speakers: str = "off"
    languages: tuple[str, ...] = ()  # detect among these only (no language given)
    formats: tuple[str, ...] = ("txt",)
    output_dir: str | None = None  # None: next to each file
    vocabulary: str | None = None  # None: the app's setting
    batched: bool | None = None  # None: the app's setting
    subtitles: SubtitleRules | None = None  # SRT/VTT's rules; None: the app's settings

    def options(self) -> dict[str, Any]:
        """The queue's job options for a file of this folder: what makes it the same
        transcription, plus where its exports go (``export``, not part of that sameness)
        and that it is not the user's own pick (``untrusted``)."""
        options = job_options(self.model, self.language, self.speakers, self.languages)
        if self.vocabulary:
            options["vocabulary"] = self.vocabulary
        if self.batched is not None:
            options["batched"] = self.batched
        options["export"] = {"formats": list(self.formats), "output_dir": self.output_dir}
        if self.subtitles is not None:
            options["export"]["subtitles"] = self.subtitles.to_dict()
        options["untrusted"] = True
        return options

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["path"], data["formats"] = str(self.path), list(self.formats)
        data["languages"] = list(self.languages)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WatchFolder:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        known["path"] = Path(str(known.get("path") or "")).expanduser()
        known["formats"] = tuple(known.get("formats") or ("txt",))
        known["languages"] = tuple(known.get("languages") or ())
        if isinstance(known.get("subtitles"), dict):
            known["subtitles"] = SubtitleRules.from_dict(known["subtitles"])
        elif known.get("subtitles") is not None:
            raise ValueError(f"subtitles is an object of rules, not {known['subtitles']!r}")
        return cls(**known)


@dataclass
class _Seen:
    size: int
    mtime_ns: int
    since: float = field(default_factory=time.monotonic)  # first seen with these


class FolderWatcher:
    """Polls ``folders`` and hands each new, complete media file to ``hand_over(path,
    folder)`` (usually ``FileQueue.add``), once. ``state``: where handed-over files are
    remembered (``<data dir>/watch-state.json``)."""

    def __init__(
        self,
        folders: Iterable[WatchFolder],
        hand_over: Callable[[Path, WatchFolder], None],
        state: Path,
        *,
        interval: float = INTERVAL,
        settle: float = SETTLE,
    ) -> None:
        self.folders = list(folders)
        self.hand_over = hand_over
        self.state_path = Path(state)
        self.interval, self.settle = interval, settle
        self._pending: dict[Path, _Seen] = {}
        self._done: dict[str, list[int]] = self._load()
        self.problems: dict[Path, str] = {}  # folders that cannot be read, and why

    # ------------------------------------------------------------------ state

    def _load(self) -> dict[str, list[int]]:
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            return {str(k): [int(v[0]), int(v[1])] for k, v in data.get("done", {}).items()}
        except (OSError, ValueError, TypeError, IndexError, AttributeError):
            return {}

    def _save(self) -> None:
        write_atomic(self.state_path, json.dumps({"version": 1, "done": self._done}))

    def handed_over(self, path: Path) -> bool:
        key = str(path)
        st = _stat(path)
        return st is not None and self._done.get(key) == [st[0], st[1]]

    # ------------------------------------------------------------------ polling

    def poll(self) -> list[Path]:
        """One look at every folder; the files handed over this time."""
        now = time.monotonic()
        seen_now: set[Path] = set()
        handed: list[Path] = []
        for folder in self.folders:
            for path in self._media(folder):
                seen_now.add(path)
                if self._ready(path, now):
                    self._take(path, folder)
                    handed.append(path)
        for gone in set(self._pending) - seen_now:  # deleted or moved away before it settled
            del self._pending[gone]
        return handed

    def _media(self, folder: WatchFolder) -> list[Path]:
        try:
            walker = folder.path.rglob("*") if folder.recursive else folder.path.iterdir()
            found = [p for p in walker if p.suffix.lower() in MEDIA_SUFFIXES
                     and not p.name.startswith(".") and p.is_file()]  # fmt: skip
        except OSError as e:
            if folder.path not in self.problems:
                log.warning("cannot read the watched folder %s: %s", folder.path, e)
            self.problems[folder.path] = e.strerror or str(e)
            return []
        self.problems.pop(folder.path, None)
        return sorted(found)

    def _ready(self, path: Path, now: float) -> bool:
        """New, and the same size and time for ``settle`` seconds, and readable."""
        st = _stat(path)
        if st is None or self._done.get(str(path)) == [st[0], st[1]]:
            return False
        seen = self._pending.get(path)
        if seen is None or (seen.size, seen.mtime_ns) != st:
            self._pending[path] = _Seen(st[0], st[1], now)  # new, or still changing
            return False
        return now - seen.since >= self.settle and st[0] > 0 and _readable(path)

    def _take(self, path: Path, folder: WatchFolder) -> None:
        st = _stat(path)
        self._pending.pop(path, None)
        if st is None:
            return
        self._done[str(path)] = [st[0], st[1]]
        self._save()  # before the hand-over: a crash in between must not run it twice
        try:
            self.hand_over(path, folder)
        except Exception:  # one file must not stop the watch
            log.exception("could not queue %s", path)

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set."""
        while not stop.is_set():
            self.poll()
            stop.wait(self.interval)


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _readable(path: Path) -> bool:
    """Whether the file opens for reading now (on Windows a file being copied is locked)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
    except OSError:
        return False
    os.close(fd)
    return True


def folders_from_settings(value: Any) -> list[WatchFolder]:
    """The watch folders kept in the settings (a list of dicts); bad entries are skipped."""
    out = []
    for entry in value or []:
        if isinstance(entry, dict) and entry.get("path"):
            try:
                out.append(WatchFolder.from_dict(entry))
            except (TypeError, ValueError):
                log.warning("ignoring a watch folder setting: %r", entry)
    return out


class WatchRunner:
    """A `FolderWatcher` on its own thread (the window's), started again whenever the folders
    change; ``hand_over`` as the watcher's."""

    def __init__(
        self,
        hand_over: Callable[[Path, WatchFolder], None],
        state: Path,
        *,
        interval: float = INTERVAL,
        settle: float = SETTLE,
    ) -> None:
        self.hand_over, self.state = hand_over, Path(state)
        self.interval, self.settle = interval, settle
        self.watcher: FolderWatcher | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_folders(self, folders: Iterable[WatchFolder]) -> None:
        self.stop()
        folders = list(folders)
        if not folders:
            return
        self._stop = threading.Event()
        self.watcher = FolderWatcher(folders, self.hand_over, self.state,
                                     interval=self.interval, settle=self.settle)  # fmt: skip
        self._thread = threading.Thread(target=self.watcher.run, args=(self._stop,),
                                        name="watch-folders", daemon=True)  # fmt: skip
        self._thread.start()

    def stop(self, wait: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(wait)
        self._thread = self.watcher = None
