"""Windows system audio: WASAPI loopback through PyAudioWPatch (never run on Windows yet).

Device choice is pure (`choose`, on a `listing()` of PyAudioWPatch's device dicts, which
tests replay from recorded listings); `WasapiLoopback` opens the stream. Facts it relies on:
PyAudioWPatch lists, beside every WASAPI output, an input named "<output> [Loopback]" with
``isLoopbackDevice`` and the output's native channel count and rate (shared mode must be
opened with exactly those; mono fails); loopback delivers no packets while nothing plays
(`GapFiller` fills that time); PortAudio enumerates devices once per PyAudio instance, so a
new default output needs a new instance. The communications device (where Windows sends calls
on a headset) and "is anything playing" come from Core Audio through pycaw when installed.

    python -m deskscribe.audio.loopback.wasapi > listing.json   (on Windows: a listing for tests)
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from ..device_types import CaptureDeviceError, InputDevice
from . import LoopbackStream, native_device

LOOPBACK_SUFFIX = " [Loopback]"
FOLLOW_CHECK_S = 1.0
BACKEND = "wasapi"


@dataclass(frozen=True)
class Choice:
    name: str  # for the user
    output: str  # the output device's own name ("Speakers (Realtek(R) Audio)")
    index: int  # PyAudioWPatch device index of its loopback input
    channels: int
    samplerate: float
    role: str  # "default" (follows Windows' default) | "communications" | "output"


def output_name(loopback_name: str) -> str:
    return loopback_name.removesuffix(LOOPBACK_SUFFIX)


def choose(listing: dict[str, Any]) -> list[Choice]:
    """The loopback inputs to offer, best first.

    `listing`: {"host_apis": [...], "devices": [...]} (PyAudioWPatch's dicts),
    "default_output" (device index of WASAPI's default output, or -1) and
    "communications_output" (the name of the default communications output, or None).
    First an entry that follows the default output, then the communications device when it
    is another one (a headset's, for calls), then every other output.
    """
    wasapi = next((a for a in listing["host_apis"] if "WASAPI" in a["name"]), None)
    if wasapi is None:
        return []
    devices = listing["devices"]
    loopbacks = [
        d
        for d in devices
        if d["hostApi"] == wasapi["index"] and d.get("isLoopbackDevice") and d["maxInputChannels"]
    ]
    by_output = {output_name(d["name"]): d for d in loopbacks}
    default_index = listing.get("default_output", wasapi.get("defaultOutputDevice", -1))
    default = next((d["name"] for d in devices if d["index"] == default_index), None)
    calls = listing.get("communications_output")

    def entry(dev: dict[str, Any], name: str, role: str) -> Choice:
        return Choice(
            name=name,
            output=output_name(dev["name"]),
            index=int(dev["index"]),
            channels=int(dev["maxInputChannels"]),
            samplerate=float(dev["defaultSampleRate"]),
            role=role,
        )

    out = []
    if default in by_output:
        out.append(
            entry(by_output[default], f"Default output: {default} (follows Windows)", "default")
        )
    if calls in by_output and calls != default:
        out.append(entry(by_output[calls], f"{calls} (calls)", "communications"))
    # Then every output as itself (the default too: fixed, for who wants exactly that one).
    out += [
        entry(dev, name, "output")
        for name, dev in by_output.items()
        if name != calls or name == default
    ]
    return out


def devices_from(listing: dict[str, Any]) -> list[InputDevice]:
    """`choose` as InputDevices that `Capture` opens with `WasapiLoopback`."""
    return [
        native_device(
            c.name,
            c.samplerate,
            f"{BACKEND}-default" if c.role == "default" else BACKEND,
            WasapiLoopback,
            c.channels,
            c.index,
        )
        for c in choose(listing)
    ]


# --------------------------------------------------------------------------- the OS


def pyaudio() -> Any:
    try:
        import pyaudiowpatch
    except ImportError:
        raise CaptureDeviceError(
            "Recording what Windows plays needs the PyAudioWPatch package, which this "
            'installation lacks (pip install "deskscribe[cpu]" on Windows installs it).'
        ) from None
    return pyaudiowpatch


def listing(pa: Any = None) -> dict[str, Any]:
    """This machine's devices as `choose` reads them (also what the test data hold)."""
    mod = pyaudio()
    own = pa is None
    pa = pa or mod.PyAudio()
    try:
        apis = [pa.get_host_api_info_by_index(i) for i in range(pa.get_host_api_count())]
        devices = [pa.get_device_info_by_index(i) for i in range(pa.get_device_count())]
        try:
            default = pa.get_host_api_info_by_type(mod.paWASAPI)["defaultOutputDevice"]
        except OSError:
            default = -1
    finally:
        if own:
            pa.terminate()
    return {
        "host_apis": apis,
        "devices": devices,
        "default_output": default,
        "communications_output": _endpoint_name("communications"),
    }


def _endpoint_name(role: str) -> str | None:
    """The friendly name of Windows' default output for `role` ("console", "communications")."""
    try:
        from pycaw.constants import EDataFlow, ERole
        from pycaw.pycaw import AudioUtilities

        enumerator = AudioUtilities.GetDeviceEnumerator()
        which = ERole.eCommunications if role == "communications" else ERole.eConsole
        endpoint = enumerator.GetDefaultAudioEndpoint(EDataFlow.eRender.value, which.value)
        return str(AudioUtilities.CreateDevice(endpoint).FriendlyName)
    except Exception:  # no pycaw, no COM, no output at all: unknown
        return None


def _anything_playing() -> bool | None:
    """Whether any active output's peak meter shows sound (None: cannot tell)."""
    try:
        from comtypes import CLSCTX_ALL
        from pycaw.constants import DEVICE_STATE, EDataFlow
        from pycaw.pycaw import AudioUtilities, IAudioMeterInformation

        enumerator = AudioUtilities.GetDeviceEnumerator()
        outputs = enumerator.EnumAudioEndpoints(EDataFlow.eRender.value, DEVICE_STATE.ACTIVE.value)
        for i in range(outputs.GetCount()):
            unknown = outputs.Item(i).Activate(IAudioMeterInformation._iid_, CLSCTX_ALL, None)
            meter = unknown.QueryInterface(IAudioMeterInformation)
            if meter.GetPeakValue() > 0.0:
                return True
        return False
    except Exception:  # no pycaw or COM: unknown, and the silence watch stays quiet
        return None


class WasapiLoopback(LoopbackStream):
    """WASAPI loopback of one output (or of whichever is Windows' default, followed)."""

    backend = BACKEND
    sample_format = "float32"

    def __init__(self, device: InputDevice, ring_seconds: float = 20.0) -> None:
        super().__init__(device, ring_seconds)
        self._follows = device.backend == f"{BACKEND}-default"
        self._pa: Any = None
        self._stream: Any = None
        # The output's own name: "Default output: X (follows Windows)" / "X (calls)" / "X".
        name = device.name.removesuffix(" (follows Windows)").removesuffix(" (calls)")
        self._output = name.removeprefix("Default output: ")
        self._checked = 0.0

    def _open(self) -> None:
        mod = pyaudio()
        self._pa = mod.PyAudio()
        # Found again by name in this PyAudio instance (indices change when devices come
        # and go); the default is the one of now, which may differ from when listed.
        if self._follows:
            info = self._pa.get_default_wasapi_loopback()
        else:
            wanted = self._output + LOOPBACK_SUFFIX
            found = [
                d for d in self._pa.get_loopback_device_info_generator() if d["name"] == wanted
            ]
            if not found:
                self._pa.terminate()
                self._pa = None
                raise CaptureDeviceError(
                    f"'{self._output}' is not there any more (unplugged or disabled). Choose "
                    "another system-audio device."
                )
            info = found[0]
        index, channels = int(info["index"]), int(info["maxInputChannels"])
        rate, self._output = float(info["defaultSampleRate"]), output_name(info["name"])
        if (rate, channels) != (self._rate, self._channels):
            self._switched(rate, channels)

        def callback(data, frames, time_info, status):
            self._push(data, overflowed=bool(status & mod.paInputOverflow))
            return (None, mod.paContinue)

        try:
            self._stream = self._pa.open(
                format=mod.paFloat32,
                channels=channels,
                rate=int(rate),
                input=True,
                input_device_index=index,
                frames_per_buffer=int(rate // 50),
                stream_callback=callback,
            )
        except OSError as e:
            self._pa.terminate()
            self._pa = None
            raise CaptureDeviceError(
                f"Cannot record what '{self._output}' plays ({e}). It may have been unplugged; "
                "choose another system-audio device."
            ) from None

    def _close(self) -> None:
        stream, self._stream = self._stream, None
        pa, self._pa = self._pa, None
        if stream is not None:
            stream.stop_stream()
            stream.close()
        if pa is not None:
            pa.terminate()

    def _playing(self) -> bool | None:
        return _anything_playing()

    def _follow(self, now: float) -> None:
        if not self._follows or now - self._checked < FOLLOW_CHECK_S:
            return
        self._checked = now
        default = _endpoint_name("console")
        if default is None or default == self._output:
            return
        self._close()  # a new PyAudio instance sees the new default
        try:
            self._open()
        except CaptureDeviceError as e:
            self.error = str(e)


if __name__ == "__main__":
    json.dump(listing(), sys.stdout, indent=1, default=str)
    sys.stdout.write("\n")
