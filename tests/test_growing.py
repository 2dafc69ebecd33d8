"""Passes over a growing recording (``speakers.growing``: the live label revisions and the
pass at Stop) on real speech, the real Resemblyzer encoder and the real Silero VAD: the
same speakers as a pass from scratch, for the cost of the new audio."""

from __future__ import annotations

import numpy as np

from conftest import EVAL, load
from deskscribe.audio.vad import speech_probabilities
from deskscribe.speakers.diarize import diarize
from deskscribe.speakers.encoder import SpeakerEncoder
from deskscribe.speakers.growing import GrowingTrack, GrowingVAD
from deskscribe.speakers.metrics import der

SR = 16000


def _meeting() -> np.ndarray:
    """Three minutes: the real call and the annotated half of a real AMI meeting, three times
    over: four people at two levels, each back after half a minute."""
    call = load(EVAL / "two-speakers.wav")[: 30 * SR]
    ami = load(EVAL / "ami" / "dev01.wav")[: 30 * SR]
    return np.concatenate([call, ami] * 3).astype(np.float32)


def test_the_vad_over_a_growing_track_is_the_vad_over_each_prefix():
    audio = _meeting()
    vad = GrowingVAD()
    # Lengths that end mid-frame, as a recording read back at any moment does.
    for seconds in (0.3, 7.77, 31.01, 62.5, 90.0):
        track = audio[: int(seconds * SR)]
        np.testing.assert_allclose(vad.probabilities(track), speech_probabilities(track), atol=1e-5)
    # Another track (a new session) starts again rather than continuing the first.
    other = audio[SR * 40 : SR * 50]
    np.testing.assert_allclose(vad.probabilities(other), speech_probabilities(other), atol=1e-5)


def test_passes_over_a_growing_track_find_what_passes_from_scratch_find(speaker_model):
    encoder = SpeakerEncoder(speaker_model)
    growing = GrowingTrack(encoder)
    cached = growing.encoder
    audio = _meeting()
    for seconds in range(15, 181, 15):
        track = audio[: seconds * SR]
        before, regained = cached.embedded, cached.regained
        kept = growing.diarize(track)
        fresh = diarize(track, encoder)
        new = cached.embedded - before
        apart = der([(t.start, t.end, t.speaker) for t in fresh.turns],
                    [(t.start, t.end, t.speaker) for t in kept.turns])  # fmt: skip
        print(
            f"{seconds} s: {len(fresh.speakers)} / {len(kept.speakers)} speakers, "
            f"{new} windows embedded, {cached.reused} reused so far, apart {apart.error:.3f}, "
            f"gain moved: {cached.regained > regained}"
        )
        assert len(kept.speakers) == len(fresh.speakers), (seconds, kept.speakers)
        # Embeddings taken at a gain within 1 dB of the track's own move a few windows.
        assert apart.error <= 0.03, (seconds, apart.error)
        # Only windows that reach into the new 15 s are embedded (a region that grew there
        # may move its last window); all the others come from the passes before, unless the
        # track's gain moved by more than 1 dB (the AMI clip after the call: 2.3 dB).
        if cached.regained == regained:
            reach = (seconds - 15) * SR - round(encoder.window_seconds * SR)
            assert new <= sum(b > reach for _, b in cached._kept), (seconds, new)
    assert cached.regained <= 2
    assert cached.reused > cached.embedded


def test_a_track_that_gets_louder_is_embedded_again_at_its_new_gain(speaker_model):
    encoder = SpeakerEncoder(speaker_model)
    call = load(EVAL / "two-speakers.wav")[: 20 * SR]
    quiet, loud = call * np.float32(0.05), call
    growing = GrowingTrack(encoder)
    growing.diarize(quiet)
    first = growing.encoder.embedded
    track = np.concatenate([quiet, loud])
    kept = growing.diarize(track)
    # Resemblyzer scales the whole recording to one level: 26 dB quieter parts at the start
    # of a session moved the gain, so every window was embedded again, not mixed.
    assert growing.encoder.embedded - first >= len(growing.encoder._kept)
    fresh = diarize(track, encoder)
    apart = der([(t.start, t.end, t.speaker) for t in fresh.turns],
                [(t.start, t.end, t.speaker) for t in kept.turns])  # fmt: skip
    assert apart.error <= 0.01, apart.error
