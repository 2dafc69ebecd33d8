"""File jobs spread over a Ray cluster (the ``cluster`` extra), for ``deskscribe transcribe
--ray``: each file is one Ray task that runs ``run_file_job``, the same function as the app's
file queue, so a file fails alone with the same message as on this computer and the others go
on.

The files are read here and sent with their task (the cluster's machines need not see this
computer's disks); each task writes its copy under the file's own name, so messages name the
file as the user does. Progress comes back through a small actor that the tasks report to and
this process polls. Tasks are handed out a few more than the cluster runs at once, so a big
batch does not sit in the object store all at the same time.

Ray is imported only here and in ``server.cluster``; nothing imports them unless ``--ray`` is
given.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import DeskScribeError, ExtraMissing

try:
    import ray
except ImportError as e:  # the front end says what to install
    raise ExtraMissing("cluster", "--ray") from e

from .jobs import FileJob, FileJobResult

log = logging.getLogger(__name__)

REPORT_EVERY = 0.5  # seconds between a task's progress reports: enough for a bar, cheap for Ray


class ClusterError(DeskScribeError):
    """The cluster cannot be used; the message says what to do."""


def forwarded_env() -> dict[str, str]:
    """What the cluster's workers must see as this process does: the model store, the data
    folder, the settings file (on a cluster of several machines those paths must exist on
    each)."""
    return {k: v for k, v in os.environ.items() if k.startswith("DESKSCRIBE_")}


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` ("auto": the one running on this machine)."""
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                 runtime_env={"env_vars": forwarded_env()})  # fmt: skip
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = (str(e) or type(e).__name__).splitlines()[0]
        raise ClusterError(
            f"cannot join the Ray cluster at {address!r} ({first}). Start one with "
            "`ray start --head` (its address is printed), then pass --ray ADDRESS, or --ray "
            "auto on a machine of the cluster"
        ) from None


@ray.remote(num_cpus=0)
class _Progress:
    """The latest progress of each file, reported by the tasks, taken by the driver."""

    def __init__(self) -> None:
        self.latest: dict[int, tuple[float, float, str]] = {}

    def report(self, index: int, done: float, total: float, stage: str) -> None:
        self.latest[index] = (done, total, stage)

    def take(self) -> dict[int, tuple[float, float, str]]:
        out, self.latest = self.latest, {}
        return out


_CACHE = None  # per worker process: Ray reuses workers, so a model loads once per worker


def _models(threads: int | None):
    from .models import ModelCache

    global _CACHE
    if _CACHE is None or _CACHE.threads != threads:
        _CACHE = ModelCache(keep=2, threads=threads)
    return _CACHE


@ray.remote(max_retries=0)  # a file that crashed a worker would crash the next one too
def _run_job(job: FileJob, shown: str, data: bytes, sink, index: int, threads: int | None):
    from .files import run_file_job

    folder = Path(tempfile.mkdtemp(prefix="deskscribe-"))
    local = folder / (job.source.name or "file")
    last = {"at": 0.0}

    def progress(done: float, total: float, stage: str = "") -> None:
        now = time.monotonic()
        if stage == "speakers" or now - last["at"] >= REPORT_EVERY:
            last["at"] = now
            sink.report.remote(index, done, total, stage)

    try:
        local.write_bytes(data)
        cache = _models(threads)
        result = run_file_job(dataclasses.replace(job, source=local), cache.model,
                              cache.speaker_encoder, progress=progress)  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if result.error:
        result.error = result.error.replace(str(local), shown)
    if result.transcript is not None:
        result.transcript.source = shown
    return result


def _unreadable(path: Path, error: OSError) -> str:
    """The message for a file this computer cannot read, in ``audio.decode``'s words."""
    from ..audio.decode import MediaError, probe

    try:
        probe(path)
    except MediaError as e:
        return str(e)
    return f"Cannot read '{path.name}': {error.strerror or error}. Check the file."


def run_on_cluster(
    address: str,
    jobs: list[FileJob],
    *,
    progress: Callable[[int, float, float, str], None] | None = None,
    on_result: Callable[[int, FileJobResult], None] | None = None,
    threads: int | None = None,
) -> list[FileJobResult]:
    """Run ``jobs`` on the cluster at ``address``; ``progress(index, done, total, stage)`` as
    ``run_file_job``'s, ``on_result(index, result)`` as each file ends (in the order they
    end). Returns the results in the order of ``jobs``. Raises ``ClusterError`` when the
    cluster cannot be joined; a file's failure is in its result, never raised."""
    from ray.exceptions import RayError

    connect(address)
    results: list[FileJobResult | None] = [None] * len(jobs)
    pending: dict[ray.ObjectRef, int] = {}
    sink = _Progress.remote()

    def finish(index: int, result: FileJobResult) -> None:
        results[index] = result
        if on_result is not None:
            on_result(index, result)

    def report() -> None:
        if progress is None:
            return
        for index, (done, total, stage) in ray.get(sink.take.remote()).items():
            if results[index] is None:
                progress(index, done, total, stage)

    try:
        resources = ray.cluster_resources()
        gpus = float(resources.get("GPU", 0))
        on_gpu = gpus >= 1 and all(job.device != "cpu" for job in jobs)
        per_task = {"num_gpus": 1, "num_cpus": 1} if on_gpu else {"num_cpus": threads or 1}
        slots = int(gpus) if on_gpu else max(1, int(resources.get("CPU", 1) // (threads or 1)))
        todo = list(range(len(jobs)))
        while todo or pending:
            while todo and len(pending) < slots + 2:
                index = todo.pop(0)
                job = jobs[index]
                try:
                    data = Path(job.source).read_bytes()
                except OSError as e:
                    finish(index, FileJobResult("failed", error=_unreadable(job.source, e)))
                    continue
                ref = _run_job.options(**per_task).remote(
                    job, str(job.source), data, sink, index, 0 if on_gpu else threads or 1
                )
                pending[ref] = index
            if not pending:
                continue
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.25)
            report()
            for ref in ready:
                index = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except RayError as e:
                    first = (str(e) or type(e).__name__).strip().splitlines()[-1][:300]
                    result = FileJobResult(
                        "failed", error=f"The cluster failed on this file ({first})"
                    )
                finish(index, result)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref)
        raise
    finally:
        ray.shutdown()
    return [r if r is not None else FileJobResult("cancelled") for r in results]
