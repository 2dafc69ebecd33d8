"""Passes over a growing recording (``speakers.growing``: the live label revisions and the
pass at Stop) on real speech, the real Resemblyzer encoder and the real Silero VAD: the
same speakers as a pass from scratch, for the cost of the new audio."""

from __future__ import annotations

import numpy as np

from conftest import EVAL, load
from deskscribe.audio.vad import FRAME, speech_probabilities
from deskscribe.speakers.diarize import diarize
from deskscribe.speakers.encoder import SpeakerEncoder
from deskscribe.speakers.growing import GrowingTrack, GrowingVAD
from speaker_metrics import der

SR = 16000


def _meeting() -> np.ndarray:
    """Three minutes: the real call and the annotated half of a real AMI meeting, three times
    over: four people at two levels, each back after half a minute."""
    call = load(EVAL / "two-speakers.wav")[: 30 * SR]
    ami = load(EVAL / "ami" / "dev01.wav")[: 30 * SR]
    return np.concatenate([call, ami] * 3).astype(np.float32)


def _apart(a, b) -> float:
    """DER of ``b``'s turns against ``a``'s: how far two diarizations of one track differ."""
    return der([(t.start, t.end, t.speaker) for t in a.turns],
               [(t.start, t.end, t.speaker) for t in b.turns]).error  # fmt: skip


def test_the_vad_over_a_growing_track_runs_each_frame_once_and_equals_the_vad_over_each_prefix():
    audio = _meeting()
    vad = GrowingVAD()
    runs = []
    real_run = vad._vad._run.__func__

    def counted(self, block):  # the frames the model is run on, each pass
        runs[-1] += block.shape[0] // FRAME
        return real_run(self, block)

    vad._vad.__class__ = type("Counted", (vad._vad.__class__,), {"_run": counted})
    # Lengths that end mid-frame, as a recording read back at any moment does.
    lengths = [int(s * SR) for s in (0.3, 7.77, 31.01, 62.5, 90.0)]
    for n in lengths:
        runs.append(0)
        np.testing.assert_allclose(
            vad.probabilities(audio[:n]), speech_probabilities(audio[:n]), atol=1e-5
        )
    # Each pass ran the model on the new whole frames and the partial last one only.
    whole = [n // FRAME for n in lengths]
    assert runs == [w - p + 1 for w, p in zip(whole, [0, *whole[:-1]], strict=True)], runs


def test_passes_over_a_growing_track_find_what_passes_from_scratch_find(speaker_model):
    encoder = SpeakerEncoder(speaker_model)
    growing = GrowingTrack(encoder)
    cached = growing.encoder
    audio = _meeting()
    for seconds in range(15, 181, 15):
        track = audio[: seconds * SR]
        before, regained = cached.embedded, cached.regained
        kept = growing.diarize(track)
        fresh = diarize(track, encoder, growing.options)  # as live passes run (no level cue)
        moved = cached.regained > regained
        print(
            f"{seconds} s: {len(fresh.speakers)} / {len(kept.speakers)} speakers, "
            f"{cached.embedded - before} windows embedded, {cached.reused} reused so far, "
            f"apart {_apart(fresh, kept):.3f}, gain moved: {moved}"
        )
        assert len(kept.speakers) == len(fresh.speakers), (seconds, kept.speakers)
        # Embeddings taken at a gain within 1 dB of the track's own move a few windows.
        assert _apart(fresh, kept) <= 0.03, seconds
        # Only windows reaching into the new 15 s are embedded (a region that grew there
        # may move its last window), unless the track's gain moved by more than 1 dB (the
        # AMI clip after the call: 2.3 dB) and everything was embedded again.
        if not moved and seconds > 15:
            reach = (seconds - 15) * SR - round(encoder.window_seconds * SR) - 400
            assert cached.new and all(b > reach for _, b in cached.new), (seconds, cached.new)
    assert cached.regained <= 2
    assert cached.reused > cached.embedded
    assert growing.restarts == 0


def test_another_track_with_the_same_silent_start_is_diarized_from_scratch(speaker_model):
    # Sessions start in silence: a track that differs only after its first seconds is
    # another recording, and nothing of the first may be reused for it.
    encoder = SpeakerEncoder(speaker_model)
    silence = np.zeros(2 * SR, np.float32)
    first = np.concatenate([silence, load(EVAL / "two-speakers.wav")[: 20 * SR]])
    other = np.concatenate([silence, load(EVAL / "ami" / "dev01.wav")[: 25 * SR]])
    growing = GrowingTrack(encoder)
    growing.diarize(first)
    kept = growing.diarize(other)
    assert growing.restarts == 1
    np.testing.assert_allclose(
        growing.vad.probabilities(other), speech_probabilities(other), atol=1e-5
    )
    assert _apart(diarize(other, encoder, growing.options), kept) <= 0.01


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
    assert growing.encoder.regained == 1
    assert growing.encoder.embedded - first == len(growing.encoder.new) >= 20
    assert _apart(diarize(track, encoder, growing.options), kept) <= 0.01
