"""macOS system audio: which native route this macOS offers, and what the user does now.

Routes (Apple's): a Core Audio process tap (macOS 14.4+, `AudioHardwareCreateProcessTap`
with a global `CATapDescription`, read through an aggregate device; needs
``NSAudioCaptureUsageDescription`` in Info.plist, which installers/macos/Info.plist has, and
the user's consent under Screen & System Audio Recording) and ScreenCaptureKit audio-only
streams (macOS 13-14.3; Screen Recording permission). Both deliver all-zero buffers, with no
error, when permission is missing: `silence.SilenceWatch` and `silence.permission_help`
("process-tap", "screencapturekit") turn that into steps for the user.

Not built yet: the streams themselves (pyobjc-framework-CoreAudio and -ScreenCaptureKit
behind `LoopbackStream`), which need a Mac to write against; until then macOS records system
audio through BlackHole, and `native_route_help` says so. Nothing here has run on macOS.
"""

from __future__ import annotations

import platform

PROCESS_TAP = "process-tap"
SCREEN_CAPTURE_KIT = "screencapturekit"


def macos_version(text: str | None = None) -> tuple[int, ...]:
    """(14, 4, 1) from "14.4.1" (default: this Mac's); () when unknown or not macOS."""
    text = platform.mac_ver()[0] if text is None else text
    try:
        return tuple(int(p) for p in text.split(".") if p)
    except ValueError:
        return ()


def native_route(version: tuple[int, ...]) -> str | None:
    """The native system-audio route of this macOS version (None: none, use BlackHole)."""
    if not version:
        return None
    if version >= (14, 4):
        return PROCESS_TAP
    if version >= (13,):
        return SCREEN_CAPTURE_KIT
    return None


def native_route_help(version: tuple[int, ...] | None = None) -> str:
    """What to install or do to record system audio on this Mac today."""
    version = macos_version() if version is None else version
    blackhole = (
        "install BlackHole (free), then in Audio MIDI Setup create a Multi-Output Device (your "
        "speakers + BlackHole) and play through it, or an Aggregate Device (microphone + "
        "BlackHole, drift correction on), and choose BlackHole as system audio."
    )
    route = native_route(version)
    if route is None:
        return f"To record what this Mac plays, {blackhole}"
    name = "a Core Audio process tap" if route == PROCESS_TAP else "ScreenCaptureKit"
    shown = ".".join(map(str, version))
    return (
        f"To record what this Mac plays, {blackhole} (macOS {shown} could also do it through "
        f"{name}, which this version of DeskScribe does not use yet.)"
    )
