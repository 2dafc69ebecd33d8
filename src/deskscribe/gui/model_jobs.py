"""Install and verify models on a worker thread, with progress text, cancel and clear errors.

Shared by the first-run welcome and the Models page. The work itself is core code:
`models.install.install_model` (download + build), `models.starter.install_starter` (offline),
`models.store.verify_model`.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from PySide6.QtCore import QObject, Signal

from ..errors import Cancelled
from .context import AppContext
from .workers import WorkerHandle, run_in_worker


class JobCancelled(Cancelled):
    pass


def _mb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _eta(seconds: float) -> str:
    if seconds < 60:
        return f"{max(1, int(seconds))} s left"
    return f"{int(seconds // 60)} min {int(seconds % 60):02d} s left"


BUILD_STAGES = {
    "hashing": "checking the downloaded files",
    "encoder": "building the encoder",
    "decoder": "building the decoder",
    "checksums": "recording checksums",
    "done": "done",
}


def error_message(exc: BaseException) -> str:
    """What to tell the user, with what to do next."""
    from ..models.download import DiskFullError, DownloadError, NotEnoughDiskError, OfflineError

    if isinstance(exc, OfflineError):
        return (
            f"{exc}\n\nCheck the internet connection and press Retry, or install the offline "
            "starter model instead."
        )
    if isinstance(exc, (NotEnoughDiskError, DiskFullError)):
        return f"{exc}\n\nFree some disk space (or choose another models folder in Settings)."
    if isinstance(exc, DownloadError):
        return str(exc)
    if isinstance(exc, FileExistsError):
        return f"{exc}"
    return f"{type(exc).__name__}: {exc}" if not str(exc) else str(exc)


class InstallJob(QObject):
    """One install (download + build, or the offline starter). Start it, watch its signals."""

    progress = Signal(str, float)  # what is happening, fraction 0..1 (-1: unknown)
    finished = Signal(object)  # the installed model's folder (Path)
    failed = Signal(str)  # a message that says what to do
    cancelled = Signal()

    def __init__(
        self,
        ctx: AppContext,
        source: str | None,
        variant: str = "int8",
        *,
        kind: str = "speech",
        label: str | None = None,
        parent: QObject | None = None,
    ) -> None:
        """``kind``: "speech" (a Whisper model from the hub), "starter" (offline Whisper),
        "speaker" (a speaker-embedding model from the hub) or "speaker-starter" (offline)."""
        super().__init__(parent)
        self.ctx, self.source, self.variant, self.kind = ctx, source, variant, kind
        self.label = label or (source or "the starter model")
        self.handle: WorkerHandle | None = None
        self._t0 = 0.0
        self._stage = ""

    def again(self) -> InstallJob:
        """A new job doing the same (Retry)."""
        return InstallJob(self.ctx, self.source, self.variant, kind=self.kind, label=self.label)

    @property
    def running(self) -> bool:
        return self.handle is not None and not self.handle.finished

    def start(self) -> None:
        self._t0, self._stage = time.monotonic(), ""
        self.progress.emit(f"Preparing {self.label}…", -1.0)
        self.handle = run_in_worker(
            self._run, on_done=self._done, on_error=self._error, on_progress=self._progressed
        )

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.progress.emit("Cancelling… (a build step in progress finishes first)", -1.0)

    def _run(self, progress, cancel: threading.Event) -> Path:
        from ..models import install

        def built(done: float, total: float, stage: str = "") -> None:
            if cancel.is_set() and stage != "done":
                raise JobCancelled()
            progress(done, total, "build: " + stage)

        def report(done: float, total: float, stage: str = "") -> None:
            if cancel.is_set() and stage.startswith("build") and not stage.endswith("done"):
                raise JobCancelled()
            progress(done, total, stage)

        if self.kind == "starter":
            from ..models.starter import install_starter

            return install_starter(variant=self.variant, progress=built, overwrite=True)
        if self.kind == "speaker-starter":
            return install.install_speaker_starter(overwrite=True)
        from ..models.download import DownloadCancelled

        try:
            if self.kind == "speaker":
                return install.install_speaker_model(
                    self.source, progress=report, cancel=cancel, overwrite=True
                )
            return install.install_model(
                self.source, self.variant, progress=report, cancel=cancel, overwrite=True
            )
        except DownloadCancelled:
            raise JobCancelled() from None

    def _progressed(self, done: float, total: float, stage: str = "") -> None:
        if self.handle is not None and self.handle.cancelled:
            return
        fraction = done / total if total else -1.0
        if stage == "download":
            if stage != self._stage:
                self._stage, self._t0 = stage, time.monotonic()
            elapsed = time.monotonic() - self._t0
            left = ""
            if fraction > 0.02 and elapsed > 2:
                left = " · " + _eta(elapsed / fraction - elapsed)
            text = f"Downloading {self.label}: {_mb(done)} of {_mb(total)}{left}"
        else:
            what = BUILD_STAGES.get(stage.removeprefix("build: "), stage)
            text = f"Preparing {self.label} for this computer: {what}"
        self.progress.emit(text, fraction)

    def _done(self, path: Path) -> None:
        self.ctx.forget_models(path)
        self.ctx.models_changed.emit()
        self.finished.emit(path)

    def _error(self, exc: BaseException) -> None:
        if isinstance(exc, JobCancelled):
            self.cancelled.emit()
        else:
            self.failed.emit(error_message(exc))


def speaker_starter_available() -> tuple[bool, str]:
    """Whether the offline speaker model can be installed (resemblyzer's weights are here)."""
    from ..models.install import SPEAKER_STARTER_HINT
    from ..speakers.convert import find_resemblyzer_checkpoint

    if find_resemblyzer_checkpoint() is None:
        return (
            False,
            f"The offline speaker model needs the resemblyzer package: {SPEAKER_STARTER_HINT}",
        )
    return True, "Resemblyzer's voice encoder, converted on this computer (no internet)"


def starter_available() -> tuple[bool, str]:
    """Whether the offline starter's packages are installed, and its description or the fix."""
    from ..models.starter import StarterNotAvailableError, find_starter

    try:
        starter, _ = find_starter()
    except StarterNotAvailableError as err:
        return False, str(err)
    return True, starter.description
