"""User settings: a small JSON file in the user config folder (platformdirs).

``current()`` is the typed :class:`Settings`, read once and read again only when the file
changed (another process wrote it, e.g. ``deskscribe config``). ``save`` writes it atomically
(``fsutil.write_atomic``: readable by this user only, the folder fsync'd), so a crash never
leaves a half-written file; an unreadable file is set aside (``settings.json.broken``) rather
than silently overwritten; keys this version does not know are kept.

``get``, ``flag``, ``set_value`` and ``load`` are the key-by-key view: values read as they are
stored, and text given to ``set_value`` ("true", "en,de") is parsed into the typed field.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platformdirs import user_config_dir

from .fsutil import private_dir, write_atomic

ENV_FILE = "DESKSCRIBE_SETTINGS"
KNOWN = {
    "models_dir": "folder where models are stored (default: the user data folder)",
    "default_model": "model used by the app when none is chosen (default: the newest installed)",
    "device": "where the app runs models: auto, cpu or gpu (default: auto)",
    "language": "language code spoken in recordings, e.g. en (default: detect)",
    "languages": "languages the app detects among, each part written in its own, e.g. en,de "
    "(default: any; a language set above wins)",
    "output_dir": "folder for exported transcripts (default: next to each file)",
    "output_formats": "formats exported automatically, e.g. txt,srt (default: txt)",
    "export_automatically": "export each file's transcript when it is done: true or false",
    "speakers": "label speakers in files: off, auto, a number of speakers, or channels "
    "(one speaker per channel) (default: off)",
    "speaker_pipeline": "which speaker labels files and the pass at Stop get: auto (with "
    "overlap when `deskscribe models download community-1` installed its models) or voices "
    "(always the voice encoder's) (default: auto)",
    "batched_files": "transcribe files on the faster batched path: true or false (default: true)",
    "vocabulary": "names and jargon the app spells as written, e.g. ComfyUI, Kubernetes, Dr. Okafor",
    "live_source": "the app's live source: mic, system or both",
    "live_mic_device": "the microphone the app's live window used last",
    "live_system_device": "the system-audio source the app's live window used last",
    "use_server": "transcribe files on a DeskScribe server (server_url) instead of this "
    "computer: true or false (default: false)",
    "server_url": "the DeskScribe server's address, e.g. http://HOST:8000",
    "server_key": "the API key of that server (a secret: kept in this file, readable by you only)",
    "transcribe_library": "`deskscribe transcribe` keeps its transcripts in the app's library "
    "too: true or false (default: false)",
    "watch_folders": "folders whose new files are transcribed by themselves, as JSON: "
    '[{"path": "/home/me/Recordings", "formats": ["txt", "srt"], "recursive": false}]',
    "subtitle_max_line_chars": "SRT/VTT exports: characters per subtitle line, at most "
    "(default: 42)",
    "subtitle_max_lines": "SRT/VTT exports: lines per subtitle, at most (default: 2)",
    "subtitle_max_cue_seconds": "SRT/VTT exports: seconds a subtitle stays on screen, at most "
    "(default: 7)",
    "subtitle_min_cue_gap": "SRT/VTT exports: seconds between two subtitles, at least "
    "(default: 0.08)",
    "subtitle_speaker_names": "SRT/VTT exports: the speaker's name before a subtitle where the "
    "speaker changes: true or false (default: true)",
    "notes_url": "the OpenAI-compatible server that writes notes, e.g. "
    "http://127.0.0.1:11434/v1 for Ollama (default: the built-in model, on this computer)",
    "notes_model": "the model to ask on that server, e.g. llama3.2:3b",
    "notes_key": "that server's API key, if it needs one (a secret: kept in this file, "
    "readable by you only)",
    "notes_gguf": "the built-in notes model when no server is set: a file name in the model "
    "store's llm folder (default: the largest installed)",
}
# Settings that are numbers: the subtitle rule each one sets (its limits in
# ``transcript.subtitles.LIMITS``).
SUBTITLE_NUMBERS = {
    "subtitle_max_line_chars": "max_line_chars",
    "subtitle_max_lines": "max_lines",
    "subtitle_max_cue_seconds": "max_cue_seconds",
    "subtitle_min_cue_gap": "min_cue_gap",
}
# Settings that hold a list of objects (JSON in ``deskscribe config``).
_OBJECT_LISTS = frozenset({"watch_folders"})
# Settings that are secrets: a front end that lists settings should show them masked. Kept
# in the settings file as they are: the file is this user's only (0600 in a 0700 folder, see
# ``save``), as ssh and git keep their credentials; the OS keychain is not reachable from
# every platform this runs on without another dependency.
SECRETS = frozenset({"server_key", "notes_key"})


def settings_path() -> Path:
    override = os.environ.get(ENV_FILE)
    return (
        Path(override)
        if override
        else Path(user_config_dir("DeskScribe", appauthor=False)) / "settings.json"
    )


# Stored as comma-separated text ("txt,srt"), as the app has always written them; other lists
# are JSON lists. Older versions read either.
_TEXT_LISTS = frozenset({"output_formats"})
_YES, _NO = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass
class Settings:
    """Every known setting, typed; ``None`` (or an empty list) is "not set": the default the
    code using it applies. ``extra`` holds keys this version does not know (a newer version
    wrote them): kept as they are on every save."""

    models_dir: str | None = None
    default_model: str | None = None
    device: str | None = None
    language: str | None = None
    languages: list[str] = field(default_factory=list)
    output_dir: str | None = None
    output_formats: list[str] = field(default_factory=list)
    export_automatically: bool = False
    speakers: str | None = None
    speaker_pipeline: str | None = None  # "auto" (None) or "voices"
    batched_files: bool = True
    vocabulary: str | None = None
    live_source: str | None = None
    live_mic_device: str | None = None
    live_system_device: str | None = None
    use_server: bool = False  # the file queue sends its files to server_url
    server_url: str | None = None
    server_key: str | None = None  # a secret (SECRETS)
    transcribe_library: bool = False
    watch_folders: list[dict] = field(default_factory=list)  # service.watch.WatchFolder's
    # SRT/VTT's rules (``subtitle_rules``); None: ``SubtitleRules``' default.
    subtitle_max_line_chars: int | None = None
    subtitle_max_lines: int | None = None
    subtitle_max_cue_seconds: float | None = None
    subtitle_min_cue_gap: float | None = None
    subtitle_speaker_names: bool = True
    notes_url: str | None = None
    notes_model: str | None = None
    notes_key: str | None = None  # a secret (SECRETS)
    notes_gguf: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Settings:
        """From the file's object; a value that does not read as its type counts as not set."""
        known: dict[str, Any] = {}
        for key in KNOWN:
            if key in data:
                with contextlib.suppress(ValueError):
                    known[key] = parse(key, data[key])
        return cls(**known, extra={k: v for k, v in data.items() if k not in KNOWN})

    def to_json(self) -> dict[str, Any]:
        """What the file holds: each setting that is not at its default, as stored, then the
        unknown keys."""
        defaults = Settings()
        out = {
            key: _stored(key, getattr(self, key))
            for key in KNOWN
            if getattr(self, key) != getattr(defaults, key)
        }
        out.update((k, v) for k, v in self.extra.items() if k not in KNOWN)
        return out


def parse(key: str, value: Any) -> Any:
    """``value`` (as stored, as the app sets it, or text from ``deskscribe config``) as the
    type of the setting ``key``: "true"/"false" for a yes/no, "en,de" for a list. ``None`` is
    the default. ValueError (saying what to write) when it does not read as that type."""
    default = getattr(Settings(), key)
    if value is None:
        return default
    if key in _OBJECT_LISTS:
        return _objects(key, value)
    if key in SUBTITLE_NUMBERS:
        from .transcript.subtitles import rule_value

        try:
            return rule_value(SUBTITLE_NUMBERS[key], value)
        except ValueError as e:
            raise ValueError(f"{key} {e}") from None
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _YES or text in _NO:
            return text in _YES
        raise ValueError(f"{key} is true or false, not {value!r}")
    if isinstance(default, list):
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, list | tuple):
            raise ValueError(f"{key} is a list separated by commas, such as en,de; not {value!r}")
        return [str(v).strip() for v in items if str(v).strip()]
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{key} is text, not {value!r}")


def _objects(key: str, value: Any) -> list[dict]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            raise ValueError(f"{key} is a JSON list of objects, such as "
                             '[{"path": "/home/me/Recordings"}]') from None  # fmt: skip
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ValueError(f"{key} is a list of objects, not {value!r}")
    return [dict(v) for v in value]


def _stored(key: str, value: Any) -> Any:
    if isinstance(value, list):
        return ",".join(value) if key in _TEXT_LISTS else list(value)
    return value


def subtitle_rules(settings: Settings | None = None):
    """The subtitle rules (``transcript.subtitles.SubtitleRules``) of ``settings`` (default:
    the current ones): what SRT and VTT exports follow when the user did not choose others."""
    from .transcript.subtitles import SubtitleRules

    s = _settings() if settings is None else settings
    given = {rule: getattr(s, key) for key, rule in SUBTITLE_NUMBERS.items()}
    return SubtitleRules(
        **{rule: value for rule, value in given.items() if value is not None},
        speaker_names=s.subtitle_speaker_names,
    )


# --------------------------------------------------------------------------- the file, once

_lock = threading.RLock()
_cached: tuple[tuple, Settings] | None = None  # (the file's stamp when read, what it held)


def _stamp(path: Path) -> tuple | None:
    """What tells that the file changed (a save renames a new file into place: a new inode);
    None when it cannot be told, and the file is read again."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return (str(path), None)
    except OSError:
        return None
    return (str(path), st.st_ino, st.st_mtime_ns, st.st_size)


def _read(path: Path) -> tuple[Settings, bool]:
    """The settings in ``path``, and whether that is worth keeping until the file changes."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Settings(), True
    except ValueError:  # not UTF-8 or not JSON: kept aside as .broken, defaults from now on
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".broken"))
        return Settings(), True
    except OSError:  # unreadable for now (permissions, a disk away): the file stays as it is
        return Settings(), False
    return Settings.from_json(data if isinstance(data, dict) else {}), True


def _settings() -> Settings:
    """The cached settings (not a copy): read again only when the file changed."""
    global _cached
    with _lock:
        path = settings_path()
        stamp = _stamp(path)
        if stamp is not None and _cached is not None and _cached[0] == stamp:
            return _cached[1]
        settings, keep = _read(path)
        _cached = (stamp, settings) if keep and stamp is not None else None
        return settings


def current() -> Settings:
    """The settings now (a copy: change it and ``save`` it to keep a change)."""
    return copy.deepcopy(_settings())


def save(settings: Settings) -> None:
    """Write ``settings`` (readable by this user only), atomically; unknown keys kept."""
    global _cached
    with _lock:
        path = settings_path()
        private_dir(path.parent)
        # Private on purpose: the file holds secrets (server_key). write_atomic's default keeps
        # mkstemp's 0600 through the rename, so the file is never readable by others, not even
        # for a moment; the folder is 0700.
        write_atomic(path, json.dumps(settings.to_json(), indent=2), private=True)
        stamp = _stamp(path)
        _cached = (stamp, copy.deepcopy(settings)) if stamp is not None else None


# --------------------------------------------------------------------------- key by key


def load() -> dict[str, Any]:
    """The settings as the file holds them (``Settings.to_json``)."""
    return _settings().to_json()


def get(key: str, default: Any = None) -> Any:
    """One setting as stored (``output_formats`` as "txt,srt", ``languages`` as a list), or
    ``default`` when it is not set."""
    settings = _settings()
    if key not in KNOWN:
        return settings.extra.get(key, default)
    value = getattr(settings, key)
    if value is None or value == []:
        return default
    return _stored(key, value)


def text(key: str) -> str:
    """One setting as ``deskscribe config`` shows and takes it: "en,de", "true", "" if unset."""
    value = get(key)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if key in _OBJECT_LISTS:
        return json.dumps(value)
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


def flag(key: str, default: bool) -> bool:
    """A true/false setting; anything unreadable counts as ``default``."""
    value = get(key, None)
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in _YES:
        return True
    if word in _NO:
        return False
    return default


def set_value(key: str, value: Any) -> None:
    """Set (or, with ``None``, remove) one setting; text is parsed into its type (ValueError,
    saying what to write, when it does not read as one)."""
    if key not in KNOWN:
        raise KeyError(f"unknown setting {key!r}; known: {', '.join(KNOWN)}")
    with _lock:
        settings = current()
        setattr(settings, key, parse(key, value))
        save(settings)
