"""User settings: a small JSON file in the user config folder (platformdirs).

Written atomically, so a crash never leaves a half-written file; an unreadable file is set
aside (``settings.json.broken``) rather than silently overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from platformdirs import user_config_dir

from .fsutil import private_dir

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
    "batched_files": "transcribe files on the faster batched path: true or false (default: true)",
    "vocabulary": "names and jargon the app spells as written, e.g. ComfyUI, Kubernetes, Dr. Okafor",
    "live_source": "the app's live source: mic, system or both",
    "live_mic_device": "the microphone the app's live window used last",
    "live_system_device": "the system-audio source the app's live window used last",
}


def settings_path() -> Path:
    override = os.environ.get(ENV_FILE)
    return (
        Path(override)
        if override
        else Path(user_config_dir("DeskScribe", appauthor=False)) / "settings.json"
    )


def load() -> dict[str, Any]:
    path = settings_path()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except ValueError:  # not UTF-8 or not JSON: kept aside as .broken, defaults from now on
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".broken"))
        return {}
    except OSError:  # unreadable for now (permissions, a disk away): the file stays as it is
        return {}
    return data if isinstance(data, dict) else {}


def get(key: str, default: Any = None) -> Any:
    return load().get(key, default)


def flag(key: str, default: bool) -> bool:
    """A true/false setting; anything unreadable counts as ``default``."""
    value = get(key, None)
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    return default


def set_value(key: str, value: Any) -> None:
    """Set (or, with ``None``, remove) one setting."""
    if key not in KNOWN:
        raise KeyError(f"unknown setting {key!r}; known: {', '.join(KNOWN)}")
    data = load()
    if value is None:
        data.pop(key, None)
    else:
        data[key] = value
    path = settings_path()
    private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".settings-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
