"""Adaptive degradation: a live session that cannot keep up does less, on purpose, and says so.

The steps, from full work down (a step the session cannot take is left out):
1. "no interim passes": only finished utterances are decoded (the tentative text waits);
2. "speaker labels at Stop": no live voice labels; the speaker pass at Stop labels the text;
3. "faster model": a faster installed variant (int8, or a smaller model) decodes.
``Degrader.update`` is fed the session's lag once a second. Behind by more than
``behind_s`` for ``hold_s`` seconds (or under memory pressure) it goes one step down; caught up
(under ``caught_up_s``) for ``recover_s`` seconds it goes one step back up. It never touches
audio: every sample is recorded and transcribed at every step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

FULL = "full"
NO_INTERIM = "no interim passes"
LABELS_AT_STOP = "speaker labels at Stop"
FASTER_MODEL = "faster model"


@dataclass
class DegradeOptions:
    behind_s: float = 3.0  # this far behind ...
    hold_s: float = 3.0  # ... for this long: one step down
    caught_up_s: float = 0.5  # under this ...
    recover_s: float = 10.0  # ... for this long: one step back up


class Degrader:
    """``labels``: live speaker labels are on (step 2 exists); ``faster``: a faster model can
    be loaded (step 3 exists)."""

    def __init__(
        self, *, labels: bool, faster: bool, options: DegradeOptions | None = None
    ) -> None:
        self.options = options or DegradeOptions()
        self.steps = [FULL, NO_INTERIM]
        if labels:
            self.steps.append(LABELS_AT_STOP)
        if faster:
            self.steps.append(FASTER_MODEL)
        self.index = 0
        self._behind_since: float | None = None
        self._caught_up_since: float | None = None

    @property
    def level(self) -> str:
        return self.steps[self.index]

    def active(self, step: str) -> bool:
        """Whether ``step`` is in force (it or a step below it is the current level)."""
        return step in self.steps and self.index >= self.steps.index(step)

    def update(
        self, behind: float, now: float, memory_pressure: bool = False
    ) -> tuple[str, str, bool] | None:
        """Feed the lag at time ``now`` (s); a switch made: (new level, reason, down)."""
        opt = self.options
        if behind > opt.behind_s or memory_pressure:
            self._caught_up_since = None
            if self._behind_since is None:
                self._behind_since = now
            if self.index + 1 < len(self.steps) and (
                now - self._behind_since >= opt.hold_s or memory_pressure
            ):
                self.index += 1
                self._behind_since = now  # the next step waits its own hold time
                why = "memory is short" if memory_pressure else f"{behind:.0f} s behind"
                return self.level, why, True
            return None
        self._behind_since = None
        if behind < opt.caught_up_s and self.index > 0:
            if self._caught_up_since is None:
                self._caught_up_since = now
            if now - self._caught_up_since >= opt.recover_s:
                self.index -= 1
                self._caught_up_since = now
                return self.level, f"caught up for {opt.recover_s:.0f} s", False
        else:
            self._caught_up_since = None
        return None


def faster_variant(model) -> Callable[[], object] | None:
    """A loader of the installed int8 variant of a CPU ``model`` that is not int8 itself
    (``tiny.en-fp32`` → ``tiny.en-int8``), for the last step; None when there is none."""
    from ...models.store import list_models
    from ...whisper.model import WhisperModel

    if model.runtime.on_gpu or model.variant == "int8":
        return None
    base = model.name.removesuffix(f"-{model.variant}")
    found = [m.path for m in list_models() if m.name == f"{base}-int8"]
    if not found:
        return None
    return lambda: WhisperModel(found[0], device="cpu", threads=1)
