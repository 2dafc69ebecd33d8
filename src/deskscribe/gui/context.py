"""`AppContext`: what every panel gets — the library, models, settings and app-wide signals.

Panels never reach for globals: they ask the context. Models come from one
`service.models.ModelCache`, loaded once per (model folder, device) and shared by the live
window and everything else in the app's process (the file queue's jobs run in the engine
process, with a cache of its own); loading takes seconds, so `AppContext.model` must only be
called from a worker thread (see `gui.workers`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from .. import settings
from ..paths import ENV_DATA_DIR
from ..paths import data_dir as default_data_dir
from ..service.models import DEVICE_CHOICES, ModelCache, runtime_device

if TYPE_CHECKING:
    from ..library import Library
    from ..whisper.model import WhisperModel

__all__ = ["DEVICE_CHOICES", "AppContext", "runtime_device"]


class AppContext(QObject):
    """Shared state of one running app. Signals may be emitted from any thread: receivers
    (widgets) get them on the UI thread, queued."""

    open_transcript = Signal(int)  # a library item id to show in the transcript view
    models_changed = Signal()  # a model was installed, removed, or the default changed
    library_changed = Signal()  # items added, renamed, deleted or finished
    profiles_changed = Signal()  # a voice profile was saved or deleted
    status_message = Signal(str)  # a short message for the status bar
    settings_changed = Signal(str)  # the key of a setting that changed (any thread may set)

    def __init__(self, data_dir: Path | None = None, parent: QObject | None = None) -> None:
        super().__init__(parent)
        if data_dir is not None:
            # Core modules (live session folders) find the data folder through the environment.
            os.environ[ENV_DATA_DIR] = str(data_dir)
        self.data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        from ..library import Library

        self.library: Library = Library(self.data_dir / "library.sqlite3")
        self.models = ModelCache(default=lambda: settings.get("default_model"))

    # ------------------------------------------------------------------ settings

    def get(self, key: str, default: Any = None) -> Any:
        return settings.get(key, default)

    def get_bool(self, key: str, default: bool = False) -> bool:
        """A yes/no setting (the CLI's `deskscribe config` stores text such as "true")."""
        value = self.get(key, default)
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)

    def get_list(self, key: str, default: list[str] | None = None) -> list[str]:
        """A list setting, stored as a list or (from the CLI) as comma-separated text."""
        value = self.get(key)
        if value is None:
            return list(default or [])
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return [str(v) for v in value]

    def set(self, key: str, value: Any) -> None:
        settings.set_value(key, value)
        self.settings_changed.emit(key)
        if key in ("default_model", "device", "models_dir"):
            self.forget_models()
            self.models_changed.emit()

    # ------------------------------------------------------------------ models

    def model(self, name: str | None = None, device: str | None = None) -> WhisperModel:
        """The loaded model ``name`` (default: the default_model setting, else the newest
        installed) on ``device`` (auto / cpu / gpu; default: the device setting).

        Worker threads only: the first call per model loads it (seconds). Raises
        `ModelNotInstalledError` (its message says how to get one) or `ModelNotBuiltError`.
        """
        return self.models.model(name, device or self.get("device", "auto"))

    def preload(self):
        """Load the default model on a worker now, while nothing is being transcribed.

        Parts of loading hold Python's GIL for a tenth of a second or more (the tokenizer, first
        imports): done at start-up, that never stutters a live transcript. Returns the
        `WorkerHandle`; a missing model is not an error here.
        """
        from .workers import run_in_worker

        return run_in_worker(self.model, on_error=lambda _e: None, name="preload")

    def forget_models(self, folder: Path | None = None) -> None:
        """Drop cached models (all, or those loaded from ``folder``, e.g. before deleting it)."""
        self.models.forget(folder)

    def speaker_encoder(self) -> Any | None:
        """The installed speaker-embedding model (WeSpeaker first), loaded once, or None when
        none is installed. One that is installed but cannot be used (its ONNX file cut short,
        overwritten) raises ``SpeakerModelError``, whose message says what to do, so the
        caller can tell the user instead of quietly leaving the labels off. Worker threads
        only."""
        from ..models.store import ModelNotInstalledError

        try:
            return self.models.speaker_encoder("cpu")
        except ModelNotInstalledError:
            return None
