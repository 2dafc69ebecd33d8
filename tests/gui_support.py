"""Shared pieces of the app tests (test_gui_app, test_gui_live): an isolated user (own data
folder, settings file and model store) and helpers to wait on the real event loop."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from deskscribe.gui.workers import cancel_all


@dataclass
class AppEnv:
    root: Path
    store: Path  # DESKSCRIBE_MODELS_DIR
    data: Path  # DESKSCRIBE_DATA_DIR
    settings: Path  # DESKSCRIBE_SETTINGS

    def env(self) -> dict[str, str]:
        return {
            "DESKSCRIBE_MODELS_DIR": str(self.store),
            "DESKSCRIBE_DATA_DIR": str(self.data),
            "DESKSCRIBE_SETTINGS": str(self.settings),
        }


@pytest.fixture
def app_env(qapp, tmp_path: Path, monkeypatch) -> AppEnv:
    """A new user with no model installed yet."""
    env = AppEnv(
        tmp_path, tmp_path / "models", tmp_path / "data", tmp_path / "cfg" / "settings.json"
    )
    env.store.mkdir()
    for key, value in env.env().items():
        monkeypatch.setenv(key, value)
    yield env
    cancel_all(timeout=30)
    QApplication.processEvents()


def install_test_model(env: AppEnv, built: Path, name: str = "tiny.en-fp32") -> Path:
    """Put a built model in the user's store (a link: the cached build is not copied)."""
    link = env.store / name
    link.symlink_to(built, target_is_directory=True)
    return link


def pump(seconds: float) -> None:
    """Run the event loop for a while (lets worker results arrive)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        QApplication.processEvents()
        time.sleep(0.01)
