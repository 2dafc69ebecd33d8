"""The silence-while-playing detector and the native loopback stream, on real audio.

`captured-silence.flac` is what a real sound server delivers from an output that plays
nothing (digital zero); `captured-speech.flac` real speech recorded the same way (with its
pauses of exact zeros); `jfk-first-4s.flac` a real room recording (tests/data/README.md).
The stream tests run `LoopbackStream` itself with its OS side replaced by blocks pushed from
those files, as the OS thread would push them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soxr

from conftest import load
from deskscribe.audio.device_types import InputDevice
from deskscribe.audio.loopback import LoopbackStream, SilenceWatch, permission_help

DATA = Path(__file__).parent / "data"
RATE = 16000


@pytest.fixture(scope="module")
def audio() -> dict[str, np.ndarray]:
    names = {"silence": "captured-silence", "speech": "captured-speech", "room": "jfk-first-4s"}
    return {key: load(DATA / f"{name}.flac") for key, name in names.items()}


def feed(watch: SilenceWatch, audio: np.ndarray, playing: bool | None) -> list[bool]:
    """Feed in 20 ms blocks, as the live session reads; the verdict after each."""
    return [watch.feed(audio[i : i + 320], playing) for i in range(0, len(audio), 320)]


def test_captured_silence_while_playing_is_blind_after_three_seconds(audio):
    watch = SilenceWatch(RATE)
    verdicts = feed(watch, audio["silence"], playing=True)
    first = verdicts.index(True)
    assert first * 320 == pytest.approx(3 * RATE, abs=320)  # not before 3 s of zeros
    assert all(verdicts[first:])


def test_silence_while_nothing_plays_or_unknown_is_not_blind(audio):
    for playing in (False, None):
        assert not any(feed(SilenceWatch(RATE), audio["silence"], playing))


def test_real_speech_and_a_real_room_are_never_blind(audio):
    assert np.mean(audio["speech"] == 0) > 0.1  # it has pauses of exact zeros
    for key in ("speech", "room"):
        watch = SilenceWatch(RATE)
        assert not any(feed(watch, audio[key], playing=True)), key
        assert watch.heard_sound


def test_sound_after_blind_silence_clears_it(audio):
    watch = SilenceWatch(RATE)
    feed(watch, audio["silence"], playing=True)
    assert watch.blind
    feed(watch, audio["speech"][: RATE // 2], playing=True)
    assert not watch.blind


def test_permission_messages_say_where_to_grant_it():
    tap = permission_help("process-tap")
    assert "Privacy & Security" in tap and "System Audio Recording" in tap and "reopen" in tap
    assert "Screen Recording" in permission_help("screencapturekit")
    calls = permission_help("wasapi", "Speakers (Realtek(R) Audio)")
    assert "(calls)" in calls and "Speakers (Realtek(R) Audio)" in calls
    assert all("recording so far is kept" in m for m in (tap, calls))


# --------------------------------------------------------------------------- the stream


class Replayed(LoopbackStream):
    """LoopbackStream with its OS side replaced: the test pushes blocks as the OS thread."""

    backend = "process-tap"
    sample_format = "int16"

    def __init__(self, device: InputDevice, playing: bool | None = True) -> None:
        super().__init__(device)
        self.opened = self.closed = False
        self.playing = playing

    def _open(self) -> None:
        self.opened = True

    def _close(self) -> None:
        self.closed = True

    def _playing(self) -> bool | None:
        return self.playing


def device(channels: int, rate: float) -> InputDevice:
    return InputDevice("Test output", "system", 0, None, channels, rate, backend="process-tap")


def push_as_device(stream: LoopbackStream, mono16k: np.ndarray, channels: int, rate: int):
    """The clip as the device would deliver it: its rate, its channels (voice on the first
    two), int16 interleaved, in 10 ms packets."""
    at_rate = soxr.resample(mono16k, RATE, rate).astype(np.float32)
    frames = np.zeros((len(at_rate), channels), np.float32)
    frames[:, : min(2, channels)] = at_rate[:, None]
    raw = np.round(np.clip(frames, -1, 1) * 32767).astype("<i2")
    step = rate // 100
    for i in range(0, len(raw), step):
        stream._push(raw[i : i + step].tobytes())


def test_stream_reads_native_channels_and_rate_as_16k_mono(audio):
    speech = audio["speech"]
    stream = Replayed(device(channels=6, rate=48000))
    stream.start()
    push_as_device(stream, speech, channels=6, rate=48000)
    got = stream.read()
    stream.stop()
    got = np.concatenate([got, stream.read()])
    assert stream.opened and stream.closed
    n = min(len(got), len(speech))
    assert abs(len(got) - len(speech)) < 0.01 * RATE
    corr = np.dot(got[:n], speech[:n]) / (np.linalg.norm(got[:n]) * np.linalg.norm(speech[:n]))
    assert corr > 0.99  # the same sound, at its level, from six channels at 48 kHz
    assert abs(np.std(got[:n]) - np.std(speech[:n])) < 0.02 * np.std(speech)
    assert stream.error is None and stream.overflows == 0


def test_stream_reports_permission_missing_then_recovers(audio):
    stream = Replayed(device(channels=2, rate=48000), playing=True)
    stream.start()
    for _ in range(4):  # four seconds of zeros while the OS plays something
        push_as_device(stream, np.zeros(RATE, np.float32), channels=2, rate=48000)
        stream.read()
    assert stream.error == permission_help("process-tap", "Test output")
    push_as_device(stream, audio["speech"], channels=2, rate=48000)
    assert np.any(stream.read() != 0)
    assert stream.error is None  # sound again: permission was granted meanwhile
    stream.stop()


def test_stream_switching_device_rate_loses_nothing(audio):
    speech = audio["speech"]
    half = len(speech) // 2
    stream = Replayed(device(channels=2, rate=48000))
    stream.start()
    push_as_device(stream, speech[:half], channels=2, rate=48000)
    stream._switched(44100, 8)  # the followed default output became an 8-channel 44.1 kHz one
    push_as_device(stream, speech[half:], channels=8, rate=44100)
    stream.stop()
    got = np.concatenate([stream.read(), stream.read()])
    assert abs(len(got) - len(speech)) < 0.02 * RATE
    n = min(len(got), len(speech))
    corr = np.dot(got[:n], speech[:n]) / (np.linalg.norm(got[:n]) * np.linalg.norm(speech[:n]))
    assert corr > 0.95


def test_full_queue_counts_overflow_and_keeps_time():
    stream = Replayed(device(channels=2, rate=48000))
    stream._ring_seconds = 0.5
    stream.start()
    push_as_device(stream, np.full(RATE, 0.1, np.float32), channels=2, rate=48000)
    assert stream.overflows > 0
    stream.stop()
    got = np.concatenate([stream.read(), stream.read()])
    assert len(got) == pytest.approx(RATE, abs=0.01 * RATE)  # dropped frames became zeros
    assert np.all(got[-RATE // 4 :] == 0) and np.any(got[: RATE // 4] != 0)
