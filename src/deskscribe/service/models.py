"""One cache of loaded models for every front end: transcription models and speaker encoders.

Loading a model takes seconds and hundreds of megabytes, so each (model folder, device) is
loaded once and shared: by the window's live page and its file queue, by a terminal command,
by the file queue's engine process, by the server. ``ModelCache.model`` must not be called on a
UI thread (the first call per model loads it).

``pick_model`` is the one place that decides which installed model a request means: the one
asked for, else the default (a setting), else — when the default was removed — the newest
installed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..models.store import ModelNotInstalledError, resolve_model, resolve_speaker_model
from ..speakers.encoder import SpeakerEncoder
from ..whisper.model import WhisperModel
from ..whisper.runtime import COREML, CUDA, DML, available_providers

log = logging.getLogger(__name__)

DEVICE_CHOICES = {"auto": "Automatic (GPU if available)", "cpu": "CPU", "gpu": "GPU"}


def runtime_device(choice: str | None) -> str:
    """The ONNX Runtime device for the user's choice: auto / cpu / gpu (the first GPU provider
    this build of ONNX Runtime offers; the model falls back to the CPU if none works), or a
    device name as it is (cuda, directml, coreml)."""
    if choice in (None, "", "auto"):
        return "auto"
    if choice == "gpu":
        present = set(available_providers())
        for provider, device in ((CUDA, "cuda"), (DML, "directml"), (COREML, "coreml")):
            if provider in present:
                return device
        return "auto"
    return choice


def pick_model(
    name: str | None, default: str | None = None, device: str | None = "auto"
) -> tuple[str, Path]:
    """(the name to record, the model folder) for a request: ``name`` when given (it must be
    installed), else ``default`` when installed, else the newest installed model (the default
    was removed, or there is none). Raises ``ModelNotInstalledError``, whose message says how
    to get one."""
    if name:
        return name, resolve_model(name, device=device)
    if default:
        try:
            return default, resolve_model(default, device=device)
        except ModelNotInstalledError:
            log.info("the default model %r is not installed; using the newest", default)
    folder = resolve_model(None, device=device)
    return folder.name, folder


def queued_model_name(choice: str | None, default: str | None) -> str | None:
    """The model a file job will use, fixed when it is queued: ``pick_model``'s name, or
    None when no model is installed (the job then says how to get one)."""
    if choice:
        return choice
    try:
        return pick_model(None, default)[0]
    except ModelNotInstalledError:
        return None


@dataclass
class _Entry:
    value: object
    used: float = field(default_factory=time.monotonic)


class ModelCache:
    """Loaded models by (folder, device) and speaker encoders by device, loaded once and
    shared between threads.

    ``default``: called for the model to use when a request names none (e.g. the app's
    setting); ``keep``: at most this many transcription models stay loaded (the least
    recently used goes first); ``idle_seconds``: ``release_idle`` drops what has not been used
    for that long; ``threads``: CPU threads per model (None: ONNX Runtime's choice).
    """

    def __init__(
        self,
        *,
        default: Callable[[], str | None] | None = None,
        keep: int | None = None,
        idle_seconds: float | None = None,
        threads: int | None = None,
        load_model: Callable[..., WhisperModel] = WhisperModel,
    ) -> None:
        self.default = default or (lambda: None)
        self.keep = keep
        self.idle_seconds = idle_seconds
        self.threads = threads
        self._load_model = load_model
        self._models: dict[tuple[str, str], _Entry] = {}
        self._encoders: dict[str, _Entry] = {}
        self._loading: dict[object, threading.Lock] = {}
        self._lock = threading.Lock()
        self.loads = 0  # models loaded since start (a figure for the server's metrics)

    # ------------------------------------------------------------------ transcription

    def model(self, name: str | None = None, device: str | None = "auto") -> WhisperModel:
        """The loaded model ``name`` (see ``pick_model``) on ``device`` (auto / cpu / gpu /
        cuda / directml / coreml). Raises ``ModelNotInstalledError`` or ``ModelNotBuiltError``
        (their messages say what to do) or ``DeviceError``."""
        runs_on = runtime_device(device)
        _, folder = pick_model(name, self.default(), runs_on)
        key = (str(folder), runs_on)
        return self._get(self._models, key, lambda: self._new_model(folder, runs_on))

    def _new_model(self, folder: Path, device: str) -> WhisperModel:
        model = self._load_model(folder, device=device, threads=self.threads or 0)
        with self._lock:
            self.loads += 1
            if self.keep is not None:
                while len(self._models) >= self.keep:  # they are big: the oldest use goes
                    oldest = min(self._models, key=lambda k: self._models[k].used)
                    del self._models[oldest]
        return model

    # ------------------------------------------------------------------ speakers

    def speaker_encoder(
        self, device: str | None = "cpu", name: str | None = None
    ) -> SpeakerEncoder:
        """The speaker-embedding model ``name`` (None: the installed one, WeSpeaker first),
        loaded once per (name, device). When none can be used it raises
        ``ModelNotInstalledError`` (none installed: asked again next time, as one may be
        installed meanwhile) or ``SpeakerModelError`` (installed, but damaged or of an unknown
        kind), whose messages say what to do."""
        runs_on = runtime_device(device)
        return self._get(self._encoders, (name, runs_on), lambda: self._new_encoder(name, runs_on))

    def _new_encoder(self, name: str | None, device: str) -> SpeakerEncoder:
        folder = resolve_speaker_model(name)
        encoder = SpeakerEncoder(folder, device=device, threads=self.threads or 0)
        with self._lock:
            self.loads += 1
        return encoder

    # ------------------------------------------------------------------ bookkeeping

    def _get(self, table: dict, key, load: Callable[[], object]):
        with self._lock:
            entry = table.get(key)
            if entry is not None:
                entry.used = time.monotonic()
                return entry.value
            loading = self._loading.setdefault((id(table), key), threading.Lock())
        with loading:  # one load per key; other models load in parallel
            with self._lock:
                entry = table.get(key)
                if entry is not None:
                    entry.used = time.monotonic()
                    return entry.value
            value = load()
            with self._lock:
                table[key] = _Entry(value)
        return value

    def loaded(self) -> list[WhisperModel]:
        with self._lock:
            return [e.value for e in self._models.values()]  # type: ignore[misc]

    def forget(self, folder: Path | None = None) -> None:
        """Drop cached models (all, or those loaded from ``folder``, e.g. before deleting it),
        and the speaker encoders (a speaker model may have been installed or removed)."""
        with self._lock:
            for key in [k for k in self._models if folder is None or k[0] == str(folder)]:
                del self._models[key]
            self._encoders.clear()

    def release_idle(self, now: float | None = None) -> int:
        """Drop what has not been used for ``idle_seconds``; returns how many went."""
        if self.idle_seconds is None:
            return 0
        now = time.monotonic() if now is None else now
        with self._lock:
            gone = 0
            for table in (self._models, self._encoders):
                for key in [k for k, e in table.items() if now - e.used >= self.idle_seconds]:
                    del table[key]
                    gone += 1
        return gone
