"""The part of a live session that watches how it keeps up (a mixin of ``LiveSession``).

Once a second, on the recorder thread, ``_tick`` takes a health reading (``health``), writes it
to ``health.jsonl`` and sends it as a ``HealthReport``; it feeds the lag to the ``Degrader``
and reports each switch (``Adapted``). Between passes, on the transcriber thread,
``_apply_level`` puts the level into effect (labels, model) and ``_measure`` hands the pass's
decode times and commit latencies to the health monitor. At Stop the summary is written.
"""

from __future__ import annotations

import logging
import time

from ...audio_format import SAMPLE_RATE
from ...whisper.model import WhisperModel
from ...whisper.streaming import StreamUpdate
from .degrade import FEWER_INTERIM, LABELS_AT_STOP, MODEL_STEPS
from .events import Adapted, HealthReport, Problem

log = logging.getLogger(__name__)


class KeepingUp:
    """Expects the session's ``health``, ``degrader``, ``adaptations``, ``transcriber``,
    ``labeller``, ``recording``, ``options``, ``model``, ``late_seconds``, ``_fallbacks``,
    ``_loaded`` and ``_emit``."""

    def _tick(self) -> None:
        """The recorder thread, every drain: once a second a health reading, and the
        degradation step it calls for."""
        now = time.monotonic()
        every = self.options.health_every_s
        if now - self._last_health < every:
            return
        self._last_health = now
        behind = self.behind_seconds
        capture = self.recording.capture
        overflows = capture.overflows() if capture is not None else {}
        dropped = getattr(capture, "dropped_share", lambda: 0.0)()
        elapsed = self.recording.samples / SAMPLE_RATE
        self.health.level = self.degrader.level
        health = self.health.sample(
            elapsed=elapsed, behind=behind, overflows=overflows, dropped=dropped
        )
        if self._health_log is not None:
            try:
                self._health_log.write(health)
            except OSError:
                log.exception("could not write health.jsonl")
                self._health_log = None
        self._emit(HealthReport(health))
        if self.options.degrade is None:
            return
        pressure = any(w.startswith("memory pressure") for w in health.warnings)
        switch = self.degrader.update(self.late_seconds, now, memory_pressure=pressure)
        if switch is not None:
            level, reason, down = switch
            self.adaptations.append(
                {"at": round(elapsed, 2), "level": level, "reason": reason, "down": down}
            )
            self.health.level = level
            self._emit(Adapted(level, reason, elapsed, down))

    def _apply_level(self) -> None:
        """The transcriber thread, between passes: labels and model as the level says."""
        t = self.transcriber
        t.sparse = self.degrader.active(FEWER_INTERIM)
        if self.labeller.active:
            deferred = self.degrader.active(LABELS_AT_STOP)
            t.label_words = None if deferred else self.labeller.label
        model = self._model_for_level()
        if t.model is not model:
            t.set_model(model)
            self.health.model = model.name

    def _model_for_level(self) -> WhisperModel:
        """The model the level calls for: the lowest model step in force that could be loaded
        (loaded once, kept for the next time), else the session's own."""
        for step in reversed(MODEL_STEPS):
            if not self.degrader.active(step) or step not in self._fallbacks:
                continue
            if step not in self._loaded:
                try:
                    model = self._fallbacks[step]()
                except Exception:  # not loadable after all: the step above serves
                    log.exception("loading the live model for %r failed", step)
                    del self._fallbacks[step]
                    continue
                self._loaded[step] = live_model(model, self.options.cpu_threads)
            return self._loaded[step]
        return self.model

    def _measure(self, update: StreamUpdate) -> None:
        """Decode times and commit latencies of this pass, for the health figures."""
        self.health.add_decodes(self.transcriber.take_decode_seconds())
        now = self._fed / SAMPLE_RATE  # the newest audio the transcriber has
        latencies = []
        for seg in update.segments:
            for w in seg.words:
                if w.end > self._committed_end:
                    latencies.append(max(0.0, now - w.end + self.queued_seconds))
                    self._committed_end = w.end
        self.health.add_commits(latencies)

    def _write_health_summary(self) -> None:
        log_ = self._health_log
        if log_ is None:
            return
        summary = {**self.health.summary(), "adaptations": list(self.adaptations)}
        try:
            log_.write_summary(summary)
        except OSError as exc:
            self._emit(Problem(f"could not save the health summary: {exc}"))
        finally:
            log_.close()


# One thread only for models as small as tiny (tiny.en int8 117 MiB, fp32 144 MiB): measured
# on 2 cores, base int8 (178 MiB) on one thread takes 2.8 s a pass and falls 7 s behind
# (bench/README.md, live_latency.py); a second copy of large weights also costs memory.
SINGLE_THREAD_MAX_BYTES = 160 << 20


def live_model(model: WhisperModel, threads: int) -> WhisperModel:
    """The model on one-thread CPU sessions when asked and small enough to keep up that way
    (a second copy of its weights), else the model as given."""
    if threads != 1 or model.runtime.on_gpu or model.runtime.threads == 1:
        return model
    size = sum(f.stat().st_size for f in model.folder.glob("*.onnx*") if f.is_file())
    if size > SINGLE_THREAD_MAX_BYTES:
        return model
    return model.single_threaded()
