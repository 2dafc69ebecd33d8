"""Speaker labels on recordings nobody here made, scored as published figures are: real AMI
meeting clips and the real phone call, pyannote.metrics' DER (collar 0.25 s, overlap scored,
AMI on its UEM: only 0-30 s is annotated), the real Resemblyzer encoder on ONNX Runtime.

Bounds come from bench/speakers.py (figures in bench/README.md "speakers.py"); see each test.
Also here: the thresholds a speaker model carries in its manifest (``--calibrate``) are the
ones used, and a long recording of reappearing voices keeps its speakers in bounded memory.
"""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

import conversations as cv
from conftest import EVAL, bench_module
from deskscribe.audio.decode import decode_audio
from deskscribe.speakers.diarize import DiarizeOptions, diarize, diarize_file
from deskscribe.speakers.encoder import SpeakerEncoder
from eval_support import _common as bench

pytest.importorskip("pyannote.metrics")
SR = 16000
CALL = EVAL / "two-speakers.wav"


@pytest.fixture(scope="module")
def encoder(speaker_model: Path) -> SpeakerEncoder:
    return SpeakerEncoder(speaker_model, device="cpu")


@pytest.fixture(scope="module")
def ami() -> dict[str, dict]:
    clips = {c["name"]: c for c in bench.ami_clips(EVAL)}
    if len(clips) < 11:
        pytest.skip(f"../shared/eval/ami holds {len(clips)} of the 11 AMI clips")
    for c in clips.values():
        c["audio"] = decode_audio(c["path"])
    return clips


def _in_uem(turns, uem) -> set[str]:
    return {t[2] for t in turns if min(t[1], uem[1]) - max(t[0], uem[0]) > 0}


# Measured (bench/speakers.py, Resemblyzer, this pipeline; the table in bench/README.md
# "speakers.py"), before -> after this pipeline: dev00 0.538 -> 0.179, trn01 1.000 -> 0.792
# (its far-field speech was not heard at all), dev01 0.183 -> 0.203, the mean of the eleven
# 0.404 -> 0.341, the count within one 4 -> 5 of 11. Each bound is the measured DER plus
# about 8-10 points (another CPU or ONNX Runtime build moves an embedding in the 4th
# decimal, which can move a change point by a window hop, 0.8 s, or flip a short turn: a few
# points of a 30 s clip); dev00 and trn01 fail well before going back to where they were.
# trn01 was 0.90 and the count 4, which a pipeline that hears none of trn01's far-field
# speaker, or gets one more count wrong, still met: 0.86 is the measured 0.792 plus 7 points,
# and the count bound is the measured 5 (the old pipeline's 4 fails it).
AMI_BOUNDS = {"dev00": 0.28, "trn01": 0.86, "dev01": 0.28}
AMI_MEAN_BOUND = 0.38  # all eleven: measured 0.341 (before: 0.404)
AMI_WITHIN_ONE = 5  # clips whose count is within one of the truth: measured 5 (before: 4)


def test_ami_meetings_der_and_count(encoder, ami) -> None:
    ders, within_one = {}, 0
    for name, clip in ami.items():
        result = diarize(clip["audio"], encoder)
        score = bench.pyannote_der(clip["turns"], result.turns, clip["uem"])
        ders[name] = score["der"]
        found = len(_in_uem(result.turns, clip["uem"]))
        within_one += abs(found - len(_in_uem(clip["turns"], clip["uem"]))) <= 1
    print({k: round(v, 3) for k, v in ders.items()}, within_one)
    for name, bound in AMI_BOUNDS.items():
        assert ders[name] <= bound, (name, ders[name])
    assert np.mean(list(ders.values())) <= AMI_MEAN_BOUND, ders
    assert within_one >= AMI_WITHIN_ONE, within_one


def test_level_cue_hears_far_field_speech(encoder, ami) -> None:
    """Far-field voices that Silero scores near zero but that stand 20 dB over the room
    (``DiarizeOptions.level_cue_db``). Measured (bench/speakers.py): mean missed speech of the
    eleven clips 0.268 -> 0.245, mean DER 0.341 -> 0.325, no clip worse by more than 1.5
    points. Without the cue the missed speech is the old figure, so this fails; 0.01 leaves
    room for another CPU (an embedding moved in the 4th decimal can move a change point)."""
    with_cue, without = [], []
    for clip in ami.values():
        for opt, out in (
            (DiarizeOptions(), with_cue),
            (DiarizeOptions(level_cue_db=None), without),
        ):
            result = diarize(clip["audio"], encoder, opt)
            out.append(bench.pyannote_der(clip["turns"], result.turns, clip["uem"]))
    missed = [np.mean([r["missed"] for r in rows]) for rows in (with_cue, without)]
    der = [np.mean([r["der"] for r in rows]) for rows in (with_cue, without)]
    worst = max(a["der"] - b["der"] for a, b in zip(with_cue, without, strict=True))
    print(
        f"missed {missed[1]:.3f} -> {missed[0]:.3f}, DER {der[1]:.3f} -> {der[0]:.3f}, worst +{worst:.3f}"
    )
    assert missed[0] <= missed[1] - 0.01, missed
    assert der[0] <= der[1], der
    assert worst <= 0.03, worst


def test_level_cue_makes_no_speaker_of_noise(encoder) -> None:
    """Loud bursts of noise, clicks and mains hum over a quiet room: louder than the room by
    far more than the cue's 20 dB, but not speech to the VAD either, so no turn at all."""
    rng = np.random.default_rng(0)
    audio = rng.normal(0, 1e-3, SR * 30).astype(np.float32)
    for t in range(2, 28, 3):
        audio[t * SR : t * SR + SR * 2 // 5] += rng.normal(0, 0.03, SR * 2 // 5).astype(np.float32)
    for t in np.arange(1, 29, 0.15):
        i = int(t * SR)
        audio[i : i + 80] += rng.normal(0, 0.2, 80).astype(np.float32)
    hum = 0.05 * np.sin(2 * np.pi * 120 * np.arange(SR * 5) / SR)
    audio[SR * 10 : SR * 15] += hum.astype(np.float32)
    assert diarize(audio, encoder).turns == []


def test_extra_clustering_windows_find_quiet_participants(encoder, ami) -> None:
    """The option (off by default): windows at a 0.4 s hop clustered on their own, and a
    voice only they find added. Measured: count within one on 7 of 11 (5 without), mean DER
    0.332 (0.341 without); 6 leaves a clip for another CPU, and without the option it fails."""
    opt = DiarizeOptions(cluster_hop_ratio=0.25)
    ders, within_one = [], 0
    for clip in ami.values():
        result = diarize(clip["audio"], encoder, opt)
        ders.append(bench.pyannote_der(clip["turns"], result.turns, clip["uem"])["der"])
        found = len(_in_uem(result.turns, clip["uem"]))
        within_one += abs(found - len(_in_uem(clip["turns"], clip["uem"]))) <= 1
    print(f"within one {within_one} of 11, mean DER {np.mean(ders):.3f}")
    assert within_one >= 6, within_one
    assert np.mean(ders) <= AMI_MEAN_BOUND, ders


def test_real_call_turns_and_words(tiny_model, encoder) -> None:
    """The phone call, scored on the exported turns and on the words users see (each word's
    span as a turn; pauses inside a turn are then unlabelled, so the words score worse).
    Measured (tiny.en, Resemblyzer): turns 0.095, words 0.111; the two voices merging into
    one scores 0.48, one voice split in three 0.17. The bounds leave 4 points for another
    CPU moving a change point (the call moved between 0.07 and 0.14 with small setting
    changes while tuning) and fail on either of those."""
    transcript, result = diarize_file(tiny_model, CALL, encoder)
    ref = cv.read_rttm(EVAL / "two-speakers.rttm")
    assert result.speakers == ["S1", "S2"]
    turns = bench.pyannote_der(ref, [(t.start, t.end, t.speaker) for t in transcript.turns])
    words = bench.pyannote_der(ref, bench.word_turns(transcript))
    print(turns, words)
    assert turns["der"] <= CALL_TURNS_BOUND, turns
    assert words["der"] <= CALL_WORDS_BOUND, words


CALL_TURNS_BOUND = 0.14  # measured 0.095; the target, 0.08, is not reached
CALL_WORDS_BOUND = 0.16  # measured 0.111; target 0.12


def test_stored_thresholds_are_the_ones_used(speaker_model: Path, tmp_path: Path) -> None:
    """``bench/speakers.py --calibrate`` stores a model's thresholds in its manifest; the
    encoder reads them and diarization cuts there. A threshold of 1.9 (cosine distance)
    merges everything: the two-voice call then has one speaker; without it, two."""
    speakers_bench = bench_module("speakers_tools")
    folder = tmp_path / "speaker-calibrated"
    shutil.copytree(speaker_model, folder)
    audio = decode_audio(CALL)
    assert len(diarize(audio, SpeakerEncoder(folder)).speakers) == 2
    speakers_bench.store_thresholds(folder, {"cluster": 1.9, "online": 0.2})
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["thresholds"]["cluster"] == 1.9 and manifest["task"] == "speaker-embedding"
    calibrated = SpeakerEncoder(folder)
    assert calibrated.thresholds["cluster"] == 1.9
    assert len(diarize(audio, calibrated).speakers) == 1
    # an explicit threshold still wins over the stored one
    assert len(diarize(audio, calibrated, DiarizeOptions(threshold=0.31)).speakers) == 2


def long_recording(ami) -> tuple[np.ndarray, list, float]:
    """12 minutes: the call and three AMI meetings' annotated halves, each back six times in
    a shuffled order (voices reappearing minutes later); its reference turns and length."""
    pieces = [("call", decode_audio(CALL)[: 30 * SR], cv.read_rttm(EVAL / "two-speakers.rttm"))]
    for name in ("dev01", "trn03", "trn09"):
        clip = ami[name]
        pieces.append((name, clip["audio"][: 30 * SR], clip["turns"]))
    order = np.random.default_rng(3).permutation(np.repeat(np.arange(len(pieces)), 6))
    parts, ref, offset = [], [], 0.0
    for i in order:
        _, audio, turns = pieces[i]
        parts.append(audio)
        ref += [(a + offset, min(b, 30.0) + offset, w) for a, b, w in turns if a < 30.0]
        offset += audio.shape[0] / SR
    return np.concatenate(parts), ref, offset


def test_long_recording_keeps_reappearing_voices(encoder, ami) -> None:
    """Diarization alone on the 12 minutes. The count stays near the truth, nothing
    collapses into one speaker, DER stays near the per-piece mean, and memory stays bounded
    (no step holds all-windows x all-windows)."""
    audio, ref, offset = long_recording(ami)
    truth = len({w for *_, w in ref})
    tracemalloc.start()
    start = time.perf_counter()
    result = diarize(audio, encoder)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    score = bench.pyannote_der(ref, result.turns, (0.0, offset))
    print(f"{offset / 60:.1f} min: {len(result.speakers)}/{truth} speakers, {score}, "
          f"{seconds:.1f} s, peak {peak / 2**20:.0f} MiB")  # fmt: skip
    assert len(result.speakers) >= 3  # no collapse
    assert abs(len(result.speakers) - truth) <= LONG_COUNT_SLACK, result.speakers
    assert score["der"] <= LONG_DER_BOUND, score
    assert peak < LONG_PEAK_BYTES


def test_past_the_clustering_cap_the_voices_are_kept(encoder, ami) -> None:
    """A file with more windows than the clustering holds (its memory is O(n²)), made here
    by lowering the cap to 150 of the 12 minutes' windows: an evenly spread subset is
    clustered. Clustering averages of neighbouring windows instead, as before, collapsed an
    hour of eleven real voices into 4 speakers; here it gave 3 of 9, DER 0.41. Measured with
    the subset: 10 of 9, DER 0.31 (0.27 without the cap)."""
    audio, ref, offset = long_recording(ami)
    truth = len({w for *_, w in ref})
    result = diarize(audio, encoder, DiarizeOptions(max_cluster_items=150))
    score = bench.pyannote_der(ref, result.turns, (0.0, offset))
    print(f"capped at 150: {len(result.speakers)}/{truth} speakers, {score}")
    assert abs(len(result.speakers) - truth) <= LONG_COUNT_SLACK, result.speakers
    assert score["der"] <= LONG_DER_BOUND, score


# Measured: 9 speakers of 9, DER 0.269 (the pieces on their own: about 0.20), 14 s on 2 busy
# CPUs, 77 MiB of numpy allocations at the peak. The bound leaves 10 points for another CPU;
# a collapse into one or two labels fails the count (>= 3) before it. Memory: the clustering holds
# at most 2000 x 2000 distances (32 MiB) however long the file, and the frame steps are
# linear; 150 MiB fails if a step grows with windows x windows or frames x windows.
LONG_COUNT_SLACK = 2
LONG_DER_BOUND = 0.38
LONG_PEAK_BYTES = 150 * 2**20
