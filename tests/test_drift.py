"""Two clocks: a system-audio track whose device runs 200 ppm fast stays on the microphone's
clock over 20 simulated minutes (pure computation on real speech, no devices)."""

from __future__ import annotations

import numpy as np
import soxr

from deskscribe.audio.decode import decode_audio
from deskscribe.audio.drift import DriftCorrector
from deskscribe.selftest import CLIP

SR = 16000
BLOCK = 800  # 50 ms: what the recorder drains at a time
MINUTES = 20
PPM = 200.0


def speech_loop(seconds: float) -> np.ndarray:
    """The packaged self-test recording (real speech) with pauses, looped to ``seconds``."""
    clip = decode_audio(CLIP)
    unit = np.concatenate([clip, np.zeros(int(1.3 * SR), np.float32)])
    reps = int(np.ceil(seconds * SR / unit.shape[0]))
    return np.tile(unit, reps)[: int(seconds * SR)]


def lag_samples(reference: np.ndarray, other: np.ndarray, at: int, search: int = 4000) -> int:
    """How many samples ``other`` lags ``reference`` around sample ``at`` (cross-correlation
    of a 2 s window over +-``search`` samples)."""
    win = reference[at : at + 2 * SR]
    seg = other[at - search : at + 2 * SR + search]
    corr = np.correlate(seg, win, mode="valid")
    return int(np.argmax(corr)) - search


def test_a_200_ppm_track_stays_within_20_ms_over_20_minutes():
    speech = speech_loop(MINUTES * 60 + 5)
    # The system device's clock runs 200 ppm fast: it delivers 16003.2 samples per second
    # of the same speech the microphone delivers 16000 of.
    fast = soxr.resample(speech, SR, SR * (1 + PPM * 1e-6), quality="HQ").astype(np.float32)
    corrector = DriftCorrector()
    mic_total = 0
    out: list[np.ndarray] = []
    raw: list[np.ndarray] = []
    taken = 0
    rng = np.random.default_rng(0)
    for i in range(speech.shape[0] // BLOCK):
        mic_total += BLOCK
        # The follower delivers what its clock produced by now, in uneven bursts.
        due = min(fast.shape[0], int((i + 1) * BLOCK * (1 + PPM * 1e-6)))
        if rng.random() < 0.3 and due < fast.shape[0]:
            continue  # this time nothing arrived; the next read brings it
        block = fast[taken:due]
        taken = due
        raw.append(block)
        out.append(corrector.process(block, mic_total))
    corrected = np.concatenate(out)
    uncorrected = np.concatenate(raw)
    assert abs(corrector.ppm - PPM) < 20, corrector.ppm

    lags = []
    for minute in (1, 5, 10, 15, MINUTES - 0.2):
        at = int(minute * 60 * SR)
        lags.append(lag_samples(speech, corrected, at))
    # Within 20 ms everywhere, and at the end (no drift left).
    assert all(abs(lag) <= 0.020 * SR for lag in lags), [lag / SR for lag in lags]
    # Without the correction the same track is 0.24 s late by the end: the test can fail.
    end = int((MINUTES - 0.2) * 60 * SR)
    late = lag_samples(speech, uncorrected, end) / SR
    assert abs(late - (MINUTES - 0.2) * 60 * PPM * 1e-6) < 0.02, late


def test_jittery_counts_of_one_clock_do_not_stretch_the_track():
    """Two devices on one clock that deliver in bursts: a few seconds of counts then give
    slopes hundreds of ppm off (as PulseAudio's and PipeWire's null sinks do here). The
    corrector must wait until its estimate is sure instead of stretching by that."""
    seconds = 60
    speech = speech_loop(seconds)
    rng = np.random.default_rng(7)
    quantum = 341  # 1024 frames at 48 kHz, in 16 kHz samples: what a sound server hands over
    corrector = DriftCorrector()
    out, taken, applied = [], 0, []
    for i in range(seconds * SR // BLOCK):
        now = (i + 1) * BLOCK
        # Each device's audio reaches us up to 80 ms late, in whole quanta, independently.
        mic_total = max(0, (now - int(rng.uniform(0, 0.08) * SR)) // quantum * quantum)
        due = max(taken, (now - int(rng.uniform(0, 0.08) * SR)) // quantum * quantum)
        out.append(corrector.process(speech[taken:due], mic_total))
        taken = due
        applied.append(corrector.ppm)
    corrected = np.concatenate(out)
    assert max(abs(p) for p in applied) < 50, max(applied, key=abs)
    # Nothing was stretched: the speech sits where it was, to the sample, at the end too.
    assert all(abs(lag_samples(speech, corrected, int(s * SR))) <= 16 for s in (10, 30, 55))
