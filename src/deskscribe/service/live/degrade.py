"""Adaptive degradation: a live session that cannot keep up does less, on purpose, and says so.

The steps, from full work down (a step the session cannot take is left out):
1. "fewer interim passes": a pass every few seconds of speech instead of every step (the
   tentative text waits longer; finished utterances are still decoded as they end, and a long
   one still gets passes, so its text commits and its buffer stays bounded);
2. "speaker labels at Stop": no live voice labels; the speaker pass at Stop labels the text;
3. "faster model": the installed int8 variant of the model decodes;
4. "smaller model": the next smaller installed model decodes (``fallback_models``).
``Degrader.update`` is fed the session's lag once a second. Behind by more than
``behind_s`` for ``hold_s`` seconds (or under memory pressure) it goes one step down; caught up
(under ``caught_up_s``) for ``recover_s`` seconds it goes one step back up. It never touches
audio: every sample is recorded and transcribed at every step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

FULL = "full"
FEWER_INTERIM = "fewer interim passes"
LABELS_AT_STOP = "speaker labels at Stop"
FASTER_MODEL = "faster model"
SMALLER_MODEL = "smaller model"
MODEL_STEPS = (FASTER_MODEL, SMALLER_MODEL)  # steps that decode with another model


@dataclass
class DegradeOptions:
    behind_s: float = 3.0  # this far behind ...
    hold_s: float = 3.0  # ... for this long: one step down
    caught_up_s: float = 0.5  # under this ...
    recover_s: float = 10.0  # ... for this long: one step back up


class Degrader:
    """``labels``: live speaker labels are on (step 2 exists); ``models``: the model steps
    that can be taken (``FASTER_MODEL``, ``SMALLER_MODEL``: a model to load exists)."""

    def __init__(
        self,
        *,
        labels: bool,
        models: tuple[str, ...] = (),
        options: DegradeOptions | None = None,
    ) -> None:
        self.options = options or DegradeOptions()
        self.steps = [FULL, FEWER_INTERIM]
        if labels:
            self.steps.append(LABELS_AT_STOP)
        self.steps += [step for step in MODEL_STEPS if step in models]
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


def fallback_models(
    model, language: str | None = None, load: Callable[[str, str], object] | None = None
) -> dict[str, Callable[[], object]]:
    """Loaders of the models a CPU ``model`` can step down to, by step: ``FASTER_MODEL``, its
    installed int8 variant (``tiny.en-fp32`` → ``tiny.en-int8``); ``SMALLER_MODEL``, the
    largest installed model smaller than that (its int8 variant where installed) that
    speaks as many languages: multilingual for a multilingual model, unless the session is
    set to English, where an English-only model serves too. Empty on a GPU. ``load(folder,
    device)``: the front end's ``ModelCache.model``, so a model stepped down to is shared like
    every other (default: a cache of its own)."""
    from ...models.store import folder_size, list_models

    if model.runtime.on_gpu:
        return {}
    installed = [m for m in list_models() if m.variant in ("int8", "fp32")]
    family = _family(model.name, model.variant)
    mine = [m for m in installed if _family(m.name, m.variant) == family]
    if load is None:
        from ..models import ModelCache

        load = ModelCache().model
    found: dict[str, Callable[[], object]] = {}
    int8 = [m for m in mine if m.variant == "int8"]
    if int8 and model.variant != "int8":
        found[FASTER_MODEL] = _loader(load, int8[0].path)
    ceiling = min([m.size_bytes for m in mine] or [folder_size(model.folder)])
    english_will_do = not model.tokenizer.multilingual or language == "en"
    smaller = [
        m for m in installed
        if _family(m.name, m.variant) != family
        and m.size_bytes < ceiling
        and (m.multilingual or english_will_do)
    ]  # fmt: skip
    if smaller:
        # The largest smaller model (its smallest variant's size says how large), int8 first.
        size = {}
        for m in smaller:
            key = _family(m.name, m.variant)
            size[key] = min(size.get(key, m.size_bytes), m.size_bytes)
        best = max(smaller, key=lambda m: (size[_family(m.name, m.variant)], m.variant == "int8"))
        found[SMALLER_MODEL] = _loader(load, best.path)
    return found


def _family(name: str, variant: str) -> str:
    return name.removesuffix(f"-{variant}")


def _loader(load: Callable[[str, str], object], path) -> Callable[[], object]:
    return lambda: load(str(path), "cpu")
