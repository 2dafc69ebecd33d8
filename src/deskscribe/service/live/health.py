"""How a live session is doing, in measured numbers: the health panel, ``--stats``, health.jsonl.

``HealthMonitor`` collects what the session's parts measure: the seconds of every real model
run (``OnlineTranscriber.take_decode_seconds``), when committed words appeared relative to
when they were spoken, the input the capture lost (its ring buffers' dropped frames and the
driver's overflow reports), how far recognition trails the recording, and this process's CPU
time and memory. ``sample()`` turns them into one ``Health`` reading (once a second); each
reading is compared with the live budgets (``BUDGETS``) and says which it breaks.

CPU is this process's CPU time over wall time, as a share of the whole machine (100 % = every
core busy); memory is its resident set, and the memory still available to programs.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from ...fsutil import write_atomic

# The live budgets (issue 15): decode latency, CPU share of the machine, lost input, memory.
BUDGETS = {
    "decode_p50_ms": 50.0,
    "decode_p95_ms": 100.0,
    "decode_p99_ms": 150.0,
    "cpu_avg_percent": 30.0,
    "cpu_peak_percent": 70.0,
    "dropped_percent": 1.0,
    "memory_share": 0.8,  # of the memory that was available when the session started
    "behind_s": 4.0,
}
WINDOW_DECODES = 200  # decode-time percentiles over the newest runs
WINDOW_SECONDS = 60  # CPU average and peak over the newest readings


@dataclass
class Health:
    """One reading. Times in seconds unless the name says ms; shares in percent."""

    elapsed: float = 0.0  # seconds recorded
    behind: float = 0.0
    decodes: int = 0  # model runs so far
    decode_p50_ms: float = 0.0
    decode_p95_ms: float = 0.0
    decode_p99_ms: float = 0.0
    commit_latency_s: float = 0.0  # median over the newest committed words
    cpu_percent: float = 0.0  # of the whole machine, over the last second
    cpu_avg_percent: float = 0.0  # ... over the last minute
    cpu_peak_percent: float = 0.0
    memory_mb: float = 0.0  # resident set of this process
    available_mb: float = 0.0  # memory other programs could still get
    dropped_percent: float = 0.0  # input frames lost, of all captured
    overflows: dict[str, int] = field(default_factory=dict)
    model: str = ""
    device: str = ""
    level: str = "full"  # the degradation level (degrade.py)
    warnings: list[str] = field(default_factory=list)

    @property
    def keeping_up(self) -> bool:
        return self.behind < 1.0

    def compact(self) -> str:
        """What the window shows all the time: "keeping up" or "N s behind"."""
        return "keeping up" if self.keeping_up else f"{self.behind:.0f} s behind"

    def line(self) -> str:
        """One terminal line (``deskscribe live --stats``)."""
        lost = sum(self.overflows.values())
        text = (
            f"{self.compact()} | decode p50/p95/p99 {self.decode_p50_ms:.0f}/"
            f"{self.decode_p95_ms:.0f}/{self.decode_p99_ms:.0f} ms ({self.decodes}) | commit "
            f"{self.commit_latency_s:.1f} s | behind {self.behind:.1f} s | dropped "
            f"{self.dropped_percent:.2f} % ({lost}) | CPU {self.cpu_percent:.0f} % (avg "
            f"{self.cpu_avg_percent:.0f}, peak {self.cpu_peak_percent:.0f}) | mem "
            f"{self.memory_mb:.0f} MiB | {self.model} on {self.device} | {self.level}"
        )
        return text + "".join(f" | ! {w}" for w in self.warnings)

    def detail(self) -> list[tuple[str, str]]:
        """(name, value) rows for the health panel."""
        return [
            ("Recognition", self.compact() + f" ({self.behind:.1f} s of speech waiting)"),
            (
                "Decode time P50 / P95 / P99",
                f"{self.decode_p50_ms:.0f} / {self.decode_p95_ms:.0f} / "
                f"{self.decode_p99_ms:.0f} ms ({self.decodes} passes)",
            ),
            ("Commit latency", f"{self.commit_latency_s:.1f} s after the words were spoken"),
            (
                "Lost input",
                f"{self.dropped_percent:.2f} % of frames"
                + "".join(f", {t}: {n} overflows" for t, n in self.overflows.items()),
            ),
            (
                "CPU (whole machine)",
                f"{self.cpu_percent:.0f} % now, {self.cpu_avg_percent:.0f} % average, "
                f"{self.cpu_peak_percent:.0f} % peak",
            ),
            ("Memory", f"{self.memory_mb:.0f} MiB ({self.available_mb:.0f} MiB still free)"),
            ("Model", f"{self.model} on {self.device}"),
            ("Mode", self.level),
        ]


class HealthMonitor:
    """Collects a session's measurements; ``sample`` makes a reading (any thread)."""

    def __init__(self, model: str, device: str) -> None:
        self.model, self.device = model, device
        self._decodes: deque[float] = deque(maxlen=WINDOW_DECODES)
        self._all_decodes: list[float] = []  # for the summary (floats: 8 bytes a pass)
        self.decode_count = 0
        self._commits: deque[float] = deque(maxlen=100)
        self._all_commits: list[float] = []
        self._cpu: deque[float] = deque(maxlen=WINDOW_SECONDS)
        self._cpu_all: list[float] = []
        self._last = (time.monotonic(), time.process_time())
        self.readings = 0
        self.start_available_mb = available_mb()
        self.peak_memory_mb = 0.0
        self.peak_behind = 0.0
        self.level = "full"

    def add_decodes(self, seconds: list[float]) -> None:
        self._decodes.extend(seconds)
        self._all_decodes.extend(seconds)
        self.decode_count += len(seconds)

    def add_commits(self, latencies: list[float]) -> None:
        self._commits.extend(latencies)
        self._all_commits.extend(latencies)

    def sample(
        self, *, elapsed: float, behind: float, overflows: dict[str, int], dropped: float
    ) -> Health:
        """A reading now. ``dropped``: the share of input frames lost (0..1)."""
        now, cpu = time.monotonic(), time.process_time()
        wall = now - self._last[0]
        share = 100.0 * (cpu - self._last[1]) / wall / (os.cpu_count() or 1) if wall > 0 else 0.0
        self._last = (now, cpu)
        self._cpu.append(share)
        self._cpu_all.append(share)
        memory = rss_mb()
        self.peak_memory_mb = max(self.peak_memory_mb, memory)
        self.peak_behind = max(self.peak_behind, behind)
        self.readings += 1
        p50, p95, p99 = _percentiles(self._decodes)
        health = Health(
            elapsed=round(elapsed, 2),
            behind=round(behind, 2),
            decodes=self.decode_count,
            decode_p50_ms=p50,
            decode_p95_ms=p95,
            decode_p99_ms=p99,
            commit_latency_s=float(np.median(self._commits)) if self._commits else 0.0,
            cpu_percent=share,
            cpu_avg_percent=float(np.mean(self._cpu)),
            cpu_peak_percent=float(max(self._cpu)),
            memory_mb=memory,
            available_mb=available_mb(),
            dropped_percent=100.0 * dropped,
            overflows=dict(overflows),
            model=self.model,
            device=self.device,
            level=self.level,
        )
        health.warnings = broken_budgets(health, self.start_available_mb)
        return health

    def summary(self) -> dict:
        """The whole session's figures (written at Stop)."""
        p50, p95, p99 = _percentiles(self._all_decodes)
        commits = self._all_commits
        return {
            "model": self.model,
            "device": self.device,
            "decodes": self.decode_count,
            "decode_p50_ms": p50,
            "decode_p95_ms": p95,
            "decode_p99_ms": p99,
            "commit_latency_median_s": float(np.median(commits)) if commits else None,
            "commit_latency_p90_s": float(np.percentile(commits, 90)) if commits else None,
            "cpu_avg_percent": float(np.mean(self._cpu_all)) if self._cpu_all else None,
            "cpu_peak_percent": float(max(self._cpu_all)) if self._cpu_all else None,
            "memory_peak_mb": self.peak_memory_mb,
            "behind_max_s": self.peak_behind,
        }


def broken_budgets(h: Health, start_available_mb: float) -> list[str]:
    """The budgets this reading breaks, as short warnings for the user."""
    out = []
    if h.behind >= BUDGETS["behind_s"]:
        out.append(f"{h.behind:.0f} s behind the speech")
    # The decode budgets are the target model's on a GPU; on a CPU the step grows with the
    # decode time instead, so only a tenfold miss is worth a warning there.
    slack = 1.0 if h.device.upper() not in ("", "CPU") else 10.0
    if h.decodes >= 20 and h.decode_p95_ms > BUDGETS["decode_p95_ms"] * slack:
        out.append(f"slow decoding (P95 {h.decode_p95_ms:.0f} ms)")
    if h.elapsed >= 30 and h.cpu_avg_percent > BUDGETS["cpu_avg_percent"]:
        out.append(f"high CPU use ({h.cpu_avg_percent:.0f} % of the machine)")
    if h.dropped_percent > BUDGETS["dropped_percent"]:
        out.append(f"input lost ({h.dropped_percent:.1f} % of frames)")
    if start_available_mb > 0 and h.memory_mb > BUDGETS["memory_share"] * start_available_mb:
        out.append(f"memory pressure ({h.memory_mb:.0f} MiB in use)")
    return out


class HealthLog:
    """``health.jsonl`` in the session folder: one reading a line; ``close`` adds nothing,
    the summary goes to ``health-summary.json`` (see ``write_summary``)."""

    def __init__(self, folder: Path | None) -> None:
        self.path = folder / "health.jsonl" if folder is not None else None
        self._file = None

    def write(self, health: Health) -> None:
        if self.path is None:
            return
        if self._file is None:  # kept open; readable by this user only, as the recording
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            self._file = open(fd, "a", encoding="utf-8")  # noqa: SIM115
        self._file.write(json.dumps({"t": round(time.time(), 2), **asdict(health)}) + "\n")
        self._file.flush()

    def write_summary(self, summary: dict) -> None:
        if self.path is None:
            return
        write_atomic(self.path.with_name("health-summary.json"), json.dumps(summary, indent=1))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _percentiles(values) -> tuple[float, float, float]:
    if not len(values):
        return 0.0, 0.0, 0.0
    p = np.percentile(np.asarray(values, dtype=np.float64) * 1000.0, [50, 95, 99])
    return float(p[0]), float(p[1]), float(p[2])


def rss_mb() -> float:
    """Resident set size of this process, in MiB (Linux /proc; else psutil when present)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    try:
        import psutil
    except ImportError:
        return 0.0
    return psutil.Process().memory_info().rss / 2**20


def available_mb() -> float:
    """Memory programs can still get, in MiB (Linux MemAvailable; else psutil; else 0)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    try:
        import psutil
    except ImportError:
        return 0.0
    return psutil.virtual_memory().available / 2**20
