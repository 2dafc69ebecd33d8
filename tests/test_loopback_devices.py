"""Native system audio's pure parts: which loopback devices are offered (on PyAudioWPatch
listings, tests/data/README.md), sample formats and downmix, and the macOS route and help.

The OS calls behind them (PyAudioWPatch, pycaw, pyobjc) never ran here: there is no Windows
or macOS machine; .github/workflows/test.yml runs this file on both.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import load
from deskscribe.audio.devices import system_audio_help
from deskscribe.audio.loopback import formats, macos, wasapi

DATA = Path(__file__).parent / "data"
HEADSET = "Headset Earphone (Jabra Evolve2 65)"
SPEAKERS = "Speakers (Realtek(R) Audio)"
HDMI = "LG ULTRAGEAR (NVIDIA High Definition Audio)"


def listing(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_default_output_first_then_the_call_device_then_every_output():
    choices = wasapi.choose(listing("windows-laptop-headset.json"))
    assert [c.role for c in choices[:2]] == ["default", "communications"]
    default, calls = choices[0], choices[1]
    assert default.output == SPEAKERS and "follows Windows" in default.name
    assert calls.output == HEADSET and calls.name == f"{HEADSET} (calls)"
    # Every output once more as itself; never an input, an MME or a DirectSound device.
    assert sorted(c.output for c in choices[2:]) == sorted([SPEAKERS, HDMI])
    assert all(c.index in (18, 19, 20) for c in choices)
    # Native formats: shared-mode loopback opens only with the output's own channels/rate.
    by_output = {c.output: c for c in choices}
    assert (by_output[HDMI].channels, by_output[HDMI].samplerate) == (8, 48000.0)
    assert (by_output[HEADSET].channels, by_output[HEADSET].samplerate) == (2, 16000.0)


def test_call_device_that_is_the_default_is_offered_once():
    choices = wasapi.choose(listing("windows-hdmi-default.json"))
    assert choices[0].role == "default" and choices[0].output == HDMI
    assert not any(c.role == "communications" for c in choices)
    assert [c.name for c in choices].count(HDMI) == 1
    assert len(choices) == 4  # the followed default + three outputs


def test_devices_open_with_the_wasapi_backend():
    devices = wasapi.devices_from(listing("windows-laptop-headset.json"))
    assert all(d.kind == "system" and d.opens_with is wasapi.WasapiLoopback for d in devices)
    assert devices[0].backend == "wasapi-default"
    assert {d.backend for d in devices[1:]} == {"wasapi"}
    # The device record stays comparable and hashable as before (the opener does not count).
    assert devices[1] == devices[1].__class__(**{**devices[1].__dict__, "opens_with": None})
    assert len(set(devices)) == len(devices)


def test_no_wasapi_host_api_offers_nothing():
    data = listing("windows-laptop-headset.json")
    data["host_apis"] = [a for a in data["host_apis"] if "WASAPI" not in a["name"]]
    assert wasapi.choose(data) == []


def test_a_stream_names_the_output_it_records():
    devices = wasapi.devices_from(listing("windows-laptop-headset.json"))
    names = [wasapi.WasapiLoopback(d)._output for d in devices]
    assert names[0] == SPEAKERS and names[1] == HEADSET
    assert set(names[2:]) == {SPEAKERS, HDMI}


# --------------------------------------------------------------------------- formats


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return load(DATA / "captured-speech.flac")


def test_integer_and_float_samples_read_back(speech):
    frames = np.stack([speech, -speech], axis=1)  # stereo, interleaved below
    as_int16 = np.round(frames * 32767).astype("<i2")
    got = formats.to_float(as_int16.tobytes(), "int16", 2)
    assert got.shape == frames.shape and np.max(np.abs(got - frames)) < 1e-4
    as_int24 = np.round(frames * 8388607).astype("<i4")
    packed = as_int24.view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    got = formats.to_float(packed, "int24", 2)
    assert np.max(np.abs(got - frames)) < 1e-6
    got = formats.to_float(frames.astype("<f4").tobytes() + b"\x01\x02", "float32", 2)
    assert np.array_equal(got, frames)  # a trailing partial sample is dropped
    with pytest.raises(ValueError, match="unknown sample format"):
        formats.to_float(b"", "int8", 2)


def test_downmix_keeps_a_voice_on_few_of_many_channels_at_its_level(speech):
    surround = np.zeros((len(speech), 8), np.float32)  # HDMI 7.1: speech on the front pair
    surround[:, 0] = surround[:, 1] = speech
    assert np.allclose(formats.downmix(surround), speech)
    one_side = np.zeros((len(speech), 2), np.float32)  # a headset playing the call left only
    one_side[:, 0] = speech
    assert np.allclose(formats.downmix(one_side), speech)
    both = np.stack([speech, 0.5 * speech], axis=1)
    assert np.allclose(formats.downmix(both), 0.75 * speech)
    assert not formats.downmix(np.zeros((10, 6), np.float32)).any()


def test_gap_filler_adds_the_silent_time_once():
    gaps = formats.GapFiller(48000, started_at=100.0, hold_s=0.25)
    gaps.arrived(100.5)
    assert gaps.missing(100.6) == 0  # data is flowing
    assert gaps.missing(101.5) == 48000  # a second without packets: a second of zeros
    assert gaps.missing(101.6) == 0  # not again (held back until the hold passes)
    assert gaps.missing(102.0) == 24000
    gaps.arrived(102.01)
    assert gaps.missing(102.1) == 0 and gaps.filled == 72000


# --------------------------------------------------------------------------- macOS


@pytest.mark.parametrize(
    ("version", "route"),
    [("15.1", "process-tap"), ("14.4", "process-tap"), ("14.3.1", "screencapturekit"),
     ("13.0", "screencapturekit"), ("12.7.6", None), ("", None)],
)  # fmt: skip
def test_macos_route_by_version(version, route):
    assert macos.native_route(macos.macos_version(version)) == route


def test_macos_help_names_screencapturekit_and_blackhole():
    text = macos.native_route_help((14, 5))
    assert "BlackHole" in text and "ScreenCaptureKit" in text and "14.5" in text
    assert "Screen Recording" in macos.native_route_help((13, 6))
    old = macos.native_route_help((12, 7))
    assert "BlackHole" in old and "ScreenCaptureKit" not in old
    assert "BlackHole" in system_audio_help("darwin")
    assert "WASAPI loopback" in system_audio_help("win32")


def test_macos_offers_screencapturekit_from_13_when_pyobjc_is_there():
    (entry,) = macos.devices((14, 3, 1), available=True, tap_available=True)
    assert entry.kind == "system" and entry.backend == "screencapturekit"
    assert (entry.channels, entry.samplerate) == (2, 48000.0)
    assert entry.opens_with.__name__ == "ScreenCaptureKitStream"
    assert macos.devices((13, 0), available=True)
    assert macos.devices((12, 7), available=True) == []  # no ScreenCaptureKit audio before 13
    assert macos.devices((15, 1), available=False) == []  # pyobjc missing: BlackHole only


def test_macos_offers_the_process_tap_first_from_14_4():
    tap, sck = macos.devices((14, 4), available=True, tap_available=True)
    assert (tap.backend, sck.backend) == ("process-tap", "screencapturekit")
    assert tap.kind == "system" and tap.opens_with.__name__ == "ProcessTapStream"
    assert "Core Audio tap" in tap.name
    # A pyobjc without taps (older than 11): ScreenCaptureKit only; neither: BlackHole only.
    assert [d.backend for d in macos.devices((15, 1), True, False)] == ["screencapturekit"]
    assert [d.backend for d in macos.devices((15, 1), False, True)] == ["process-tap"]
    assert macos.devices((14, 3), available=False, tap_available=True) == []
    help_text = macos.native_route_help((14, 5))
    assert "Core Audio tap" in help_text and "System Audio Recording" in help_text
    assert "Core Audio tap" not in macos.native_route_help((14, 3))


def test_process_tap_without_pyobjc_says_what_to_install():
    from deskscribe.audio.device_types import CaptureDeviceError
    from deskscribe.audio.loopback import processtap

    if processtap.available():
        pytest.skip("pyobjc's CoreAudio is installed: this is about a Mac without it")
    stream = processtap.ProcessTapStream(processtap.device())
    with pytest.raises(CaptureDeviceError, match=r"pyobjc.*ScreenCaptureKit or BlackHole"):
        stream.start()
    stream.stop()  # nothing was opened: nothing to close, no error


class Buffer:
    """What pyobjc's CoreAudio hands the IO block for each AudioBuffer: the channel count,
    the bytes that are audio, and the memory (a memoryview, often larger than the audio)."""

    def __init__(self, samples: np.ndarray, channels: int, spare: int = 0) -> None:
        raw = samples.astype("<f4").tobytes()
        self.mNumberChannels, self.mDataByteSize = channels, len(raw)
        self.mData = memoryview(bytearray(raw + b"\x7f" * spare))


def test_process_tap_reads_interleaved_and_planar_buffer_lists(speech):
    from deskscribe.audio.loopback import processtap as tap

    left, right = speech[:4800], -0.5 * speech[:4800]
    want = np.stack([left, right], axis=1)
    one = [Buffer(want.reshape(-1), 2, spare=64)]  # bytes past mDataByteSize are not audio
    assert np.array_equal(tap.buffer_list_frames(one, planar_flag=False), want)
    two = [Buffer(left, 1, spare=12), Buffer(right, 1)]
    assert np.array_equal(tap.buffer_list_frames(two, planar_flag=True), want)
    assert tap.buffer_list_frames([], planar_flag=False).shape[0] == 0
    fmt = tap.StreamFormat(48000.0, 0x9, 2, 32)  # float, packed, interleaved
    assert tap.frames_problem(fmt, one) is None
    assert tap.frames_problem(fmt._replace(channels=1, flags=0x29), two) is None
    assert "float" in tap.frames_problem(fmt._replace(flags=0xC, bits=16), one)
    assert "bytes" in tap.frames_problem(fmt, [Buffer(speech[:9], 2)])  # half a frame


def test_process_tap_format_is_read_in_core_audios_layout():
    import struct

    from deskscribe.audio.loopback import processtap as tap

    assert ctypes_size(tap.StreamDescription) == 40 and ctypes_size(tap.PropertyAddress) == 12
    # AudioStreamBasicDescription as Core Audio writes it: Float64 then eight UInt32.
    raw = struct.pack("<d8I", 44100.0, tap.fourcc("lpcm"), 0x29, 4, 1, 4, 2, 32, 0)
    desc = tap.StreamDescription.from_buffer_copy(raw)
    assert tap.stream_format(desc) == tap.StreamFormat(44100.0, 0x29, 2, 32)
    assert tap.fourcc("tfmt") == 0x74666D74 and tap.SCOPE_GLOBAL == 0x676C6F62
    agg = tap.aggregate_description("BuiltInSpeakerDevice", "TAP-UID")
    assert agg["taps"] == [{"uid": "TAP-UID", "drift": True}] and agg["private"] is True
    assert agg["master"] == "BuiltInSpeakerDevice" and agg["tapautostart"] is True


def ctypes_size(kind) -> int:
    import ctypes

    return ctypes.sizeof(kind)


def test_process_tap_stream_turns_buffer_lists_into_16k_mono(speech):
    """The IO block's path through LoopbackStream: 48 kHz stereo buffer lists in, the voice
    out at 16 kHz mono, as a live session reads it (the OS calls that open the tap aside)."""
    import soxr

    from deskscribe.audio.loopback import processtap as tap

    stream = tap.ProcessTapStream(tap.device())
    stream._format = tap.StreamFormat(48000.0, 0x9, 2, 32)
    voice = soxr.resample(speech[: 16000 * 3], 16000, 48000).astype(np.float32)
    frames = np.stack([voice, voice], axis=1).reshape(-1)
    mic = Buffer(np.full(512, 0.5, np.float32), 1)  # a headset's own input comes first
    when = object()  # the output time: in/out for pyobjc, so the block must hand it back
    for i in range(0, len(frames), 512 * 2):  # 512-frame buffers, as Core Audio sends
        assert stream._io(None, [mic, Buffer(frames[i : i + 1024], 2)], None, [], when) is when
    stream._stopping = True
    assert stream._io(None, [Buffer(frames[:1024], 2)], None, [], when) is when  # ignored
    stream.stop()
    out = stream.read()
    assert stream.error is None and stream.overflows == 0
    n = min(len(out), 16000 * 3)
    assert n > 16000 * 3 - 200
    assert np.corrcoef(out[:n], speech[:n])[0, 1] > 0.99
    bad = tap.ProcessTapStream(tap.device())
    bad._format = tap.StreamFormat(48000.0, 0xC, 2, 16)  # 16-bit integers: refused, said
    assert bad._io(None, [Buffer(frames[:1024], 2)], None, [], when) is when
    assert "16-bit" in bad.error and bad.overflows == 1
    broken = tap.ProcessTapStream(tap.device())
    broken._format = stream._format
    assert broken._io(None, [object()], None, [], when) is when  # never raises into macOS
    assert "could not be read" in broken.error


def test_process_tap_takes_only_the_taps_buffers():
    from deskscribe.audio.loopback import processtap as tap

    listed = ["mic", "tap"]
    assert tap.tap_buffers(listed, tap.StreamFormat(48000.0, 0x9, 2, 32)) == ["tap"]
    planar = ["mic", "left", "right"]
    assert tap.tap_buffers(planar, tap.StreamFormat(48000.0, 0x29, 2, 32)) == ["left", "right"]
    assert tap.tap_buffers([], tap.StreamFormat(48000.0, 0x9, 2, 32)) == []


def test_screencapturekit_without_pyobjc_says_what_to_install():
    from deskscribe.audio.device_types import CaptureDeviceError
    from deskscribe.audio.loopback import screencapturekit

    if screencapturekit.available():
        pytest.skip("pyobjc is installed: this is about a Mac without it")
    stream = screencapturekit.ScreenCaptureKitStream(screencapturekit.device())
    with pytest.raises(CaptureDeviceError, match=r"pyobjc.*BlackHole"):
        stream.start()


def test_planar_and_interleaved_buffers_give_the_same_frames(speech):
    """Core Audio's non-interleaved layout (ScreenCaptureKit's): every left sample, then
    every right one. Read as interleaved by mistake, a voice would turn into noise."""
    left, right = speech[:4800], -0.5 * speech[:4800]
    planar = np.concatenate([left, right]).astype("<f4").tobytes()
    interleaved = np.stack([left, right], axis=1).astype("<f4").tobytes()
    want = np.stack([left, right], axis=1)
    assert np.array_equal(formats.float_frames(planar, 2, planar=True), want)
    assert np.array_equal(formats.float_frames(interleaved, 2, planar=False), want)
    wrong = formats.float_frames(planar, 2, planar=False)
    assert not np.allclose(wrong, want)
    mono = formats.float_frames(left.astype("<f4").tobytes() + b"\0\0", 1, planar=True)
    assert np.array_equal(mono[:, 0], left)  # a partial sample at the end is dropped


def test_screencapturekit_reads_the_format_pyobjc_returns_and_refuses_what_it_cannot_read():
    from deskscribe.audio.loopback import screencapturekit as sck

    # pyobjc's CoreMedia alone returns the AudioStreamBasicDescription as a plain tuple.
    as_tuple = (48000.0, 0x6C70636D, 0x29, 4, 1, 4, 2, 32, 0)  # float, packed, planar
    fmt = sck.stream_format(as_tuple)
    assert fmt == sck.StreamFormat(48000.0, 0x29, 2, 32)
    assert sck.layout_problem(fmt, 1024 * 2 * 4, 1024, 48000.0) is None
    assert "Hz" in sck.layout_problem(fmt._replace(rate=44100.0), 1024 * 8, 1024, 48000.0)
    assert "float" in sck.layout_problem(fmt._replace(flags=0xC, bits=16), 4096, 1024, 48000.0)
    assert "bytes" in sck.layout_problem(fmt, 1024 * 8 + 16, 1024, 48000.0)
