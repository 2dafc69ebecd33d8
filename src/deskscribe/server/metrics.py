"""Prometheus figures of one server (its own registry: two servers in one process, as in the
tests, do not mix their counts). ``GET /metrics`` renders them."""

from __future__ import annotations

import os
import sys

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300, 900)
RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 4)


def rss_bytes() -> float:
    """This process's resident memory now (not its peak)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            return float(int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
    except (OSError, ValueError, AttributeError):
        pass
    try:
        import psutil  # optional: macOS and Windows

        return float(psutil.Process().memory_info().rss)
    except ImportError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return float(peak if sys.platform == "darwin" else peak * 1024)


class Metrics:
    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        p = "deskscribe_"
        self.requests = Counter(p + "requests", "HTTP requests by route and status",
                                ["route", "method", "status"], registry=r)  # fmt: skip
        self.latency = Histogram(p + "request_seconds", "request latency by route", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.audio_seconds = Counter(p + "audio_seconds", "seconds of audio transcribed",
                                     ["kind"], registry=r)  # fmt: skip
        self.rtf = Histogram(p + "real_time_factor", "processing time / audio duration",
                             buckets=RTF_BUCKETS, registry=r)  # fmt: skip
        self.failures = Counter(p + "failures", "transcriptions that failed, by reason",
                                ["reason"], registry=r)  # fmt: skip
        self.queue_depth = Gauge(p + "queue_depth", "transcriptions waiting for a worker",
                                 registry=r)  # fmt: skip
        self.running = Gauge(p + "running", "transcriptions running now", registry=r)
        self.sessions = Gauge(p + "realtime_sessions", "realtime sessions open", registry=r)
        self.jobs = Gauge(p + "jobs", "jobs by status", ["status"], registry=r)
        self.model_loads = Gauge(p + "model_loads", "models loaded since start", registry=r)
        self.models_loaded = Gauge(p + "models_loaded", "models in memory now", registry=r)
        self.shared_merged = Gauge(p + "shared_batch_merged_calls",
                                   "decode calls that ran in another request's batch", registry=r)  # fmt: skip
        self.shared_batches = Gauge(p + "shared_batches", "batches decoded (shared or not)",
                                    registry=r)  # fmt: skip
        self.memory = Gauge(p + "memory_rss_bytes", "resident memory of the server", registry=r)
        self.memory.set_function(rss_bytes)

    def watch_models(self, cache) -> None:
        self.model_loads.set_function(lambda: cache.loads)
        self.models_loaded.set_function(lambda: len(cache.loaded()))

    def watch_batches(self, shared) -> None:
        self.shared_merged.set_function(lambda: shared.merged_calls)
        self.shared_batches.set_function(lambda: shared.batches)

    def render(self) -> bytes:
        return generate_latest(self.registry)
