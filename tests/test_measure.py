"""The recommendation measured on this computer (``models/measure.py``): real encoders of each
candidate's width, built int8 with the app's own builder and timed with ONNX Runtime.

The estimate of a model is checked against the real model (tiny.en int8, its own weights)
timed the same way; the choice must follow the figures: the same CPU with one thread (a
slower machine) gets a smaller model than with two, once the limit lies between their
figures; the sentence quotes the measured figure; the CLI prints it.
"""

from __future__ import annotations

import math
import time

import numpy as np
import onnxruntime as ort
import pytest

import deskscribe.models.measure as measure
from conftest import built, run_cli
from deskscribe.whisper.runtime import CPU, session_options
from gui_support import app_env  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def figures() -> dict[int, measure.Measured]:
    """Each thread count measured three times, interleaved (2, 1, 2, 1, ...), and the fastest
    figure of each model kept: other programs on a shared CI machine only ever add time, and
    one busy second during one measurement must not make two threads look as slow as one (a
    CI run saw base at 0.54 s on two threads against 0.26 s when idle)."""
    runs = [(t, measure.measure(t, ["tiny", "base"])) for _ in range(3) for t in (2, 1)]
    return {
        t: measure.Measured(
            {m: min(r.encoder_s[m] for u, r in runs if u == t) for m in ("tiny", "base")}, t
        )
        for t in (2, 1)
    }


def test_estimate_matches_the_real_model(tiny_ct2) -> None:
    """tiny.en int8 built from its real weights, its encoder timed as the estimate times the
    cut ones: the estimate (1 and 3 layers, extrapolated to 4) is within 35 %.

    The real model and the estimate are timed in turns, three rounds, each round's ratio taken
    and the median kept: a CI run timed the real model during a busy second
    (0.25 s a window against 0.13 s idle) and the estimate after it, and failed on the load,
    not on the estimate."""
    folder = built(tiny_ct2, "tiny.en", "int8")
    session = ort.InferenceSession(
        str(folder / "encoder.onnx"), session_options(CPU, 2), providers=[CPU]
    )
    mel = np.random.default_rng(1).standard_normal((1, 80, 3000)).astype(np.float32)
    session.run(None, {"mel": mel})
    real, estimates = [], []
    for _ in range(3):
        times = []
        for _ in range(3):
            start = time.perf_counter()
            session.run(None, {"mel": mel})
            times.append(time.perf_counter() - start)
        real.append(min(times))
        estimates.append(measure.measure(2, ["tiny"]).encoder_s["tiny"])
    # Each round's estimate against that round's real model, the median of the three: a CI
    # run's fastest real window (0.080 s) came from a quieter first round than every estimate
    # (0.121-0.131 s, with the real model at 0.12-0.14 s beside them).
    ratio = sorted(e / r for e, r in zip(estimates, real, strict=True))[1]
    assert abs(math.log(ratio)) < math.log(1.35), (estimates, real)


def test_a_slower_machine_gets_a_smaller_model(figures, monkeypatch) -> None:
    fast, slow = figures[2], figures[1]
    assert slow.encoder_s["base"] > 1.2 * fast.encoder_s["base"], (fast, slow)
    assert fast.encoder_s["tiny"] < fast.encoder_s["base"]
    # The live limit between the two figures of base: two threads keep up with base, one not.
    monkeypatch.setattr(
        measure, "LIVE_ENCODER_S", math.sqrt(fast.encoder_s["base"] * slow.encoder_s["base"])
    )
    on_two, on_one = measure.choose(fast), measure.choose(slow)
    assert on_two.model == "base" and on_one.model == "tiny"
    assert f"{fast.encoder_s['base']:.2f} s" in on_two.reason
    assert f"{slow.encoder_s['tiny']:.2f} s" in on_one.reason


def test_files_get_a_larger_model_when_only_files_keep_up(figures, monkeypatch) -> None:
    fast = figures[2]
    monkeypatch.setattr(measure, "LIVE_ENCODER_S", fast.encoder_s["tiny"] * 1.01)
    monkeypatch.setattr(measure, "FILES_ENCODER_S", fast.encoder_s["base"] * 1.01)
    choice = measure.choose(fast)
    assert (choice.model, choice.files_model) == ("tiny", "base")
    assert "For files alone, base" in choice.reason


def test_cli_prints_the_measured_figures(tmp_path) -> None:
    out = run_cli(["models", "recommend", "--measure", "--threads", "1"], tmp_path)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "per 30 s window" in line]
    assert [line.split()[0] for line in lines] == list(measure.CANDIDATES)
    chosen = out.stdout.split("(int8, cpu): ")[1]
    model = out.stdout.splitlines()[len(lines)].split()[0]
    figure = next(line.split()[1] for line in lines if line.split()[0] == model)
    assert f"encodes a 30 s window in {figure} s" in chosen


def test_models_page_measures_this_computer(qtbot, app_env, monkeypatch) -> None:  # noqa: F811
    from deskscribe.gui.context import AppContext
    from deskscribe.gui.models_panel import ModelsPanel

    two = {k: measure.CANDIDATES[k] for k in ("tiny", "base")}
    monkeypatch.setattr(measure, "CANDIDATES", two)  # the two smallest: the page, not the CPU
    panel = ModelsPanel(AppContext())
    qtbot.addWidget(panel)
    panel.resize(905, 600)
    panel.show()
    qtbot.waitUntil(lambda: panel.catalog.rowCount() > 0, timeout=20_000)
    panel.measure_btn.click()
    assert not panel.measure_btn.isEnabled()
    qtbot.waitUntil(lambda: panel.measured is not None, timeout=120_000)
    choice = panel.measured
    text = panel.recommendation.text()
    assert f"Recommended here: {choice.model} (int8)" in text
    figure = f"{choice.measured.encoder_s[choice.model]:.2f} s"
    assert "Measured on this computer" in text and figure in text
    marked = [
        panel.catalog.item(r, 0).text()
        for r in range(panel.catalog.rowCount())
        if "recommended" in panel.catalog.item(r, 0).text()
    ]
    assert marked == [f"{choice.model}  — recommended"], marked
    assert panel.measure_btn.isEnabled()


def test_first_run_measures_after_showing_the_guess(qtbot, app_env, monkeypatch) -> None:  # noqa: F811
    """Download works at once on the guess by cores; the measured recommendation replaces it
    when it comes, unless the user picked another model meanwhile."""
    import threading

    from deskscribe.gui.context import AppContext
    from deskscribe.gui.first_run import FirstRunDialog

    two = {k: measure.CANDIDATES[k] for k in ("tiny", "base")}
    monkeypatch.setattr(measure, "CANDIDATES", two)
    real, gate = measure.measure_and_choose, threading.Event()

    def gated(*args, **kwargs):  # the real measurement, once the test lets it start
        gate.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(measure, "measure_and_choose", gated)
    for user_picks in (False, True):
        gate.clear()
        dialog = FirstRunDialog(AppContext())
        qtbot.addWidget(dialog)
        dialog.show()
        qtbot.waitUntil(lambda d=dialog: d.download_btn.isEnabled(), timeout=20_000)
        assert dialog.measure_note.isVisible() and dialog.measuring.running
        guess = dialog.recommended
        if user_picks:
            dialog.select_model("tiny.en")
        gate.set()
        qtbot.waitUntil(lambda d=dialog: not d.measuring.running, timeout=120_000)
        qtbot.waitUntil(lambda d=dialog: not d.measure_note.isVisible(), timeout=10_000)
        if user_picks:
            assert dialog.model_combo.currentData() == "tiny.en"
            assert dialog.recommended == guess
        else:
            assert "Measured on this computer" in dialog.reason.text()
            assert dialog.recommended in two
            assert dialog.model_combo.currentData() == dialog.recommended
        dialog.reject()
