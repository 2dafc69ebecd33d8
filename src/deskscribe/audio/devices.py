"""Which microphones and system-audio sources this computer has, as `InputDevice`s (no Qt).

Everything is opened through sounddevice (PortAudio); what differs per OS is how system audio
(what the computer plays) shows up as an input:

- Linux: PulseAudio or PipeWire (pipewire-pulse). Every source — microphones and the
  ``.monitor`` of every sink — is recorded through the one ALSA ``pulse`` device (from
  libasound2-plugins), pointing it at a source with ``PULSE_SOURCE`` while the stream is opened
  (see `capture.InputCapture`). The raw ``hw:`` devices are usually held by the sound server, so
  they are only offered when no sound server answers. Sources are listed live with pulsectl, so
  devices plugged in later show up without restarting PortAudio.
- Windows: the PortAudio in sounddevice's wheels has no WASAPI loopback, so system audio is
  recorded natively by `loopback.wasapi` (PyAudioWPatch): the default output (following
  Windows' default), the communications device of calls, and every other output. "Stereo
  Mix" and virtual cables are offered after those. (Never run on Windows yet.)
- macOS: PortAudio sees no loopback; BlackHole, Loopback or Soundflower devices are. Offered
  before them: on 14.4+ a Core Audio process tap (`loopback.processtap`), on 13+ a
  ScreenCaptureKit stream (`loopback.screencapturekit`), both through pyobjc (never run on
  macOS yet).

`system_audio_help()` says, per OS, what to install when nothing is found.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .device_types import CaptureDeviceError, InputDevice, LiveAudio, TrackStream

__all__ = ["CaptureDeviceError", "InputDevice", "LiveAudio", "NoSystemAudioError", "TrackStream"]

KINDS = ("mic", "system")
PULSE_DEVICE = "pulse"  # the ALSA device of libasound2-plugins that talks to the sound server
# The rate we ask the sound server for. A source's own rate is not known: pulsectl's
# `sample_spec` points into memory libpulse has freed by then. 48 kHz is PipeWire's and most
# hardware's rate; the server converts when a source runs at another.
PULSE_RATE = 48000.0
_NO_PULSE_INDEX = 0xFFFFFFFF  # PA_INVALID_INDEX: `monitor_of_sink` of a source that is no monitor
# PULSE_SOURCE is read from the process environment when the ALSA pulse plugin opens a stream;
# the lock keeps two streams opening at once from seeing each other's value.
_ENV_LOCK = threading.Lock()
# Input devices that carry what the computer plays, by (lower-case) name.
_LOOPBACK_NAMES = {
    "darwin": ("blackhole", "loopback", "soundflower"),
    "win32": ("stereo mix", "what u hear", "wave out mix", "cable output", "voicemeeter out"),
}


class NoSystemAudioError(CaptureDeviceError):
    """This computer offers no way to record what it plays (yet)."""

    def __init__(self, reason: str = "") -> None:
        super().__init__(f"{reason} {system_audio_help()}".strip())


def system_audio_help(platform: str | None = None) -> str:
    """What the user can install or do to record system audio on `platform` (default: this one)."""
    platform = platform or sys.platform
    if platform.startswith("linux"):
        return (
            "To record what this computer plays, DeskScribe needs PulseAudio or PipeWire with "
            "pipewire-pulse (standard on desktop Linux) and the ALSA pulse plugin: install "
            "'libasound2-plugins' (Debian/Ubuntu) or 'alsa-plugins-pulseaudio' (Fedora, Arch), "
            "then restart DeskScribe."
        )
    if platform == "win32":
        return (
            "DeskScribe records what Windows plays through WASAPI loopback of an output "
            "device (PyAudioWPatch): check that an output device (speakers or headphones) is "
            "enabled in Settings > System > Sound, and reinstall DeskScribe if it says "
            "PyAudioWPatch is missing. Alternatives: enable 'Stereo Mix' (More sound settings > "
            "Recording, right-click > Show disabled devices) or a virtual audio cable."
        )
    if platform == "darwin":
        from .loopback.macos import native_route_help

        return native_route_help()
    return "Recording system audio is not supported on this platform."


def sounddevice() -> ModuleType:
    """The sounddevice module; `CaptureDeviceError` when the PortAudio library is missing."""
    try:
        import sounddevice as sd
    except OSError as e:  # sounddevice raises OSError when it cannot load PortAudio
        raise CaptureDeviceError(
            f"The PortAudio library could not be loaded ({e}). On Linux install 'libportaudio2' "
            "(Debian/Ubuntu) or 'portaudio' (Fedora, Arch); on Windows and macOS reinstall "
            "DeskScribe."
        ) from None
    return sd


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


# --------------------------------------------------------------------------- Linux


@dataclass
class _PulseView:
    sources: list[InputDevice]  # microphones and monitors, named for the user
    default_mic: str | None  # source names
    default_monitor: str | None


def _pulse_view(sd: ModuleType) -> _PulseView:
    """The sound server's sources; `CaptureDeviceError` saying why they cannot be used."""
    try:
        import pulsectl
    except ImportError:
        raise CaptureDeviceError(
            "The pulsectl package is missing (pip install pulsectl)."
        ) from None
    index = _pulse_device_index(sd)
    try:
        # No timeout: pulsectl's connect(timeout=...) always waits it out (pulsectl 24.x);
        # an absent server fails at once, and callers list devices off the UI thread.
        with pulsectl.Pulse("DeskScribe devices") as pulse:
            server = pulse.server_info()
            default_mic, default_sink = server.default_source_name, server.default_sink_name
            monitors = {s.name: s.monitor_source_name for s in pulse.sink_list()}
            raw = [
                (
                    s.name,
                    s.description or s.name,
                    s.monitor_of_sink != _NO_PULSE_INDEX,
                    int(s.channel_count),
                )
                for s in pulse.source_list()
            ]
    except Exception as e:  # pulsectl raises PulseError and friends; none is ours to handle
        raise CaptureDeviceError(
            f"No PulseAudio or PipeWire sound server answers ({type(e).__name__}: {e})."
        ) from None
    if index is None:
        raise CaptureDeviceError(
            f"The sound server runs, but PortAudio has no ALSA '{PULSE_DEVICE}' device (the ALSA "
            "pulse plugin is missing, or the sound server started after DeskScribe)."
        )
    descriptions = [desc for _, desc, *_ in raw]
    sources = []
    for name, desc, monitor, channels in raw:
        sources.append(
            InputDevice(
                name=desc if descriptions.count(desc) == 1 else f"{desc} ({name})",
                kind="system" if monitor else "mic",
                index=index,
                pulse_source=name,
                channels=max(1, min(channels, 2)),  # the server downmixes the rest
                samplerate=PULSE_RATE,
            )
        )
    return _PulseView(sources, default_mic, monitors.get(default_sink))


@contextlib.contextmanager
def pulse_source_selected(source: str | None) -> Iterator[None]:
    """While open, streams opened on the ALSA pulse device record `source` (None: no change).

    Raises `CaptureDeviceError` when the server has no such source: PulseAudio then fails
    the open, but PipeWire (pipewire-pulse) records its default source instead, so a device
    unplugged since it was listed would quietly become another one.
    """
    if source is None:
        yield
        return
    present = PulseSourceWatch()
    try:
        names = present.sources()
    finally:
        present.close()
    if names is not None and source not in names:
        raise CaptureDeviceError(
            f"Cannot open '{source}': the sound server has no such source (any more). It may "
            "have been unplugged or switched off; choose another device."
        )
    with _ENV_LOCK:
        old = os.environ.get("PULSE_SOURCE")
        os.environ["PULSE_SOURCE"] = source
        try:
            yield
        finally:
            if old is None:
                del os.environ["PULSE_SOURCE"]
            else:
                os.environ["PULSE_SOURCE"] = old


def _pulse_device_index(sd: ModuleType) -> int | None:
    for dev in sd.query_devices():
        api = sd.query_hostapis(dev["hostapi"])["name"]
        if dev["name"] == PULSE_DEVICE and api == "ALSA" and dev["max_input_channels"] > 0:
            return int(dev["index"])
    return None


class PulseSourceWatch:
    """Which sound-server sources exist now, over one kept connection (cheap to ask often).

    Needed because PulseAudio and PipeWire do not fail a recording whose source goes away: they
    move it to the default source, so an unplugged headset would quietly become the laptop's
    microphone, or system audio a microphone. Not thread-safe: one reader thread asks.
    """

    def __init__(self) -> None:
        self._pulse: Any = None

    def sources(self) -> set[str] | None:
        """Names of the sources that exist, or None when the server cannot be asked."""
        try:
            if self._pulse is None:
                import pulsectl

                self._pulse = pulsectl.Pulse("DeskScribe capture")
            return {s.name for s in self._pulse.source_list()}
        except Exception:  # no server (any more), or no pulsectl: nothing to say
            self.close()
            return None

    def close(self) -> None:
        pulse, self._pulse = self._pulse, None
        if pulse is not None:
            pulse.close()


# --------------------------------------------------------------------------- PortAudio


def _host_api(sd: ModuleType) -> int:
    """The host API whose devices we offer: WASAPI on Windows (full names, native rates)."""
    if sys.platform == "win32":
        for i, api in enumerate(sd.query_hostapis()):
            if "WASAPI" in api["name"]:
                return i
    return int(sd.default.hostapi)


def _portaudio_inputs(sd: ModuleType) -> tuple[list[InputDevice], int | None]:
    """Input devices of our host API, and the index of its default input (None if none)."""
    api = _host_api(sd)
    wasapi = "WASAPI" in sd.query_hostapis(api)["name"]
    loopback = _LOOPBACK_NAMES.get(sys.platform, ())
    devices = []
    for dev in sd.query_devices():
        if dev["hostapi"] != api or dev["max_input_channels"] < 1:
            continue
        is_loopback = any(word in dev["name"].lower() for word in loopback)
        channels = int(dev["max_input_channels"])
        devices.append(
            InputDevice(
                name=dev["name"],
                kind="system" if is_loopback else "mic",
                index=int(dev["index"]),
                pulse_source=None,
                # WASAPI shared mode wants the native channel count; elsewhere two is plenty
                # (a 16-channel BlackHole carries the playback in its first two).
                channels=channels if wasapi else min(channels, 2),
                samplerate=float(dev["default_samplerate"]),
            )
        )
    default = sd.query_hostapis(api)["default_input_device"]
    return devices, (int(default) if default >= 0 else None)


# --------------------------------------------------------------------------- public


def _discover(kind: str) -> tuple[list[InputDevice], str | None, str]:
    """(devices of `kind`, the default's pulse source or str(index), why none if empty)."""
    sd = sounddevice()
    why = ""
    if sys.platform.startswith("linux"):
        try:
            view = _pulse_view(sd)
        except CaptureDeviceError as e:
            why = str(e)
        else:
            found = [d for d in view.sources if d.kind == kind]
            default = view.default_mic if kind == "mic" else view.default_monitor
            missing = "The sound server lists no " + (
                "microphone." if kind == "mic" else "output device (sink) to record from."
            )
            return found, default, "" if found else missing
        if kind == "system":
            return [], None, why
    devices, default_index = _portaudio_inputs(sd)
    found = [d for d in devices if d.kind == kind]
    default = str(default_index) if default_index is not None else None
    if kind == "system" and sys.platform == "win32":
        native, why = _wasapi_loopbacks()
        found = native + found
        default = None  # the first: the default output, followed
    if kind == "system" and sys.platform == "darwin":
        from .loopback import macos, processtap, screencapturekit

        native = macos.devices(
            macos.macos_version(), screencapturekit.available(), processtap.available()
        )
        if native:
            found, default = native + found, None  # the tap, ScreenCaptureKit, then BlackHole
    return found, default, why


def _wasapi_loopbacks() -> tuple[list[InputDevice], str]:
    """Windows: WASAPI loopback of the outputs (loopback.wasapi), or why there is none."""
    from .loopback import wasapi

    try:
        return wasapi.devices_from(wasapi.listing()), ""
    except CaptureDeviceError as e:
        return [], str(e)
    except OSError as e:  # PortAudio could not start
        return [], f"Windows' audio devices could not be listed ({e})."


def list_devices(kind: str) -> list[InputDevice]:
    """Microphones (`"mic"`) or system-audio sources (`"system"`) the user can choose from."""
    _check_kind(kind)
    return _discover(kind)[0]


def _nothing_found(kind: str, why: str) -> CaptureDeviceError:
    if kind == "system":
        return NoSystemAudioError(why)
    why = f"{why} " if why else ""
    return CaptureDeviceError(
        f"No microphone found. {why}Plug in a microphone or headset, and check that the "
        "operating system lets DeskScribe use it."
    )


def default_device(kind: str) -> InputDevice:
    """The input the operating system would pick (Linux system audio: the default sink's monitor)."""
    _check_kind(kind)
    devices, default, why = _discover(kind)
    if not devices:
        raise _nothing_found(kind, why)
    for d in devices:
        if default is not None and default in (d.pulse_source, str(d.index)):
            return d
    return devices[0]  # e.g. Linux whose default source is a monitor: the first real microphone


def find_device(kind: str, name_or_index: str | int) -> InputDevice:
    """The device of `kind` the user means.

    An integer (or a string of digits) is a position in `list_devices(kind)`. Otherwise an exact
    name or PulseAudio source name wins, then a unique case-insensitive substring of either.
    """
    _check_kind(kind)
    devices, _, why = _discover(kind)
    if not devices:
        raise _nothing_found(kind, why)
    label = "microphone" if kind == "mic" else "system-audio source"
    choices = "; ".join(f"{i}: {d.name}" for i, d in enumerate(devices))
    query = str(name_or_index).strip()
    if isinstance(name_or_index, int) or query.isdigit():
        i = int(query)
        if 0 <= i < len(devices):
            return devices[i]
        raise CaptureDeviceError(f"There is no {label} number {i}. Choose one of: {choices}.")
    q = query.lower()

    def keys(d: InputDevice) -> tuple[str, str]:
        return d.name.lower(), (d.pulse_source or "").lower()

    exact = [d for d in devices if q in keys(d)]
    if exact:
        return exact[0]
    partial = [d for d in devices if any(q in k for k in keys(d))]
    if len(partial) == 1:
        return partial[0]
    if partial:
        names = "; ".join(d.name for d in partial)
        raise CaptureDeviceError(
            f"'{query}' matches several {label}s ({names}). Type more of the name, or a number "
            f"from: {choices}."
        )
    raise CaptureDeviceError(f"No {label} matches '{query}'. Choose one of: {choices}.")
