"""What threads other than the caller's do: for tests of sessions that must not spin."""

from __future__ import annotations

import time


def cpu_of_other_threads_while_idle(run, times: int = 12, window: float = 0.02) -> float:
    """CPU seconds that threads other than this one burn in the ``window`` after each of
    ``times`` calls of ``run``, while this thread waits (nothing to await: the idle time is
    what is measured)."""
    burnt = 0.0
    for _ in range(times):
        run()
        process, thread = time.process_time(), time.thread_time()
        time.sleep(window)
        burnt += (time.process_time() - process) - (time.thread_time() - thread)
    return burnt
