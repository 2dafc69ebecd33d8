"""The terminal's progress bar of one file (tqdm), shared by ``deskscribe transcribe`` on this
computer and on a Ray cluster (``--ray``): seconds of audio done, then "speakers" while the
speaker step runs."""

from __future__ import annotations

from collections.abc import Callable

BAR_FORMAT = "{l_bar}{bar}| {n:.0f}/{total:.0f} s [{elapsed}<{remaining}]"


def file_bar(name: str, quiet: bool, position: int | None = None):
    """A bar for the file ``name`` (hidden with ``quiet``); its total is set by progress."""
    from tqdm import tqdm

    return tqdm(total=1.0, desc=name, unit="s", disable=quiet, leave=True, position=position,
                bar_format=BAR_FORMAT)  # fmt: skip


def bar_progress(bar) -> Callable[..., None]:
    """A ``Progress(done, total, stage)`` callback that moves ``bar``."""

    def progress(done: float, total: float, stage: str = "") -> None:
        if stage == "speakers":
            bar.set_postfix_str("speakers")
            return
        if total > 0 and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)

    return progress
