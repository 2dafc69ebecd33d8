"""Our segmentation pipeline (``speakers/segmentation.py``) equals pyannote.audio's own on the
same weights, on 18 s of a real AMI clip; and changing one step of ours breaks the equality.

pyannote runs in its own environment (see ``pyannote_weights.py``); weights, ONNX exports and
pyannote's outputs are built by ``bench/segmentation_equal.py`` and cached in the test cache.
"""

from __future__ import annotations

import pytest

from pyannote_weights import equality_weights, se

STAGES = ("seg", "count", "emb", "clusters", "diar", "excl")


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, float]]:
    folder, clip = equality_weights()
    runs = se.run_ours(folder, [clip], None, {"ours": {}} | se.SABOTAGE)
    return {name: rows[clip.stem] for name, rows in runs.items()}


def test_equal_to_pyannote(results):
    row = results["ours"]
    assert row["pyannote_speakers"] >= 2, "the weights must give more than one speaker"
    low = {k: row[k] for k in STAGES if row[k] < se.TOLERANCE}
    assert not low, f"below {se.TOLERANCE:.0%} of frames: {low}"
    assert row["emb_diff"] < 1e-4


@pytest.mark.parametrize("name", sorted(se.SABOTAGE))
def test_changed_step_breaks_equality(results, name):
    row = results[name]
    assert min(row[k] for k in STAGES) < se.TOLERANCE - 0.02, row
