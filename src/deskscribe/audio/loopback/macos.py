"""macOS system audio: which native route this macOS offers, and what the user does now.

Routes (Apple's): a Core Audio process tap (macOS 14.4+, `AudioHardwareCreateProcessTap`
with a global `CATapDescription`, read through an aggregate device; needs
``NSAudioCaptureUsageDescription`` in Info.plist, which installers/macos/Info.plist has, and
the user's consent under Screen & System Audio Recording) and ScreenCaptureKit audio-only
streams (macOS 13-14.3; Screen Recording permission). Both deliver all-zero buffers, with no
error, when permission is missing: `silence.SilenceWatch` and `silence.permission_help`
("process-tap", "screencapturekit") turn that into steps for the user.

Built: the process tap (`processtap.ProcessTapStream`, pyobjc's CoreAudio), offered first
on 14.4 and later, and the ScreenCaptureKit stream (`screencapturekit.ScreenCaptureKitStream`),
offered on 13 and later (after the tap on 14.4+). BlackHole stays the fallback, and
`native_route_help` names it. Nothing here has run on macOS.
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


def devices(version: tuple[int, ...], available: bool, tap_available: bool = False) -> list:
    """The native system-audio entries to offer on this macOS `version`: the process tap on
    14.4 and later (`tap_available`: pyobjc's CoreAudio has taps), then ScreenCaptureKit's
    on 13 and later (`available`: its pyobjc frameworks import)."""
    route = native_route(version)
    out = []
    if route == PROCESS_TAP and tap_available:
        from .processtap import device as tap_device

        out.append(tap_device())
    if route is not None and available:
        from .screencapturekit import device

        out.append(device())
    return out


def native_route_help(version: tuple[int, ...] | None = None) -> str:
    """What to install or do to record system audio on this Mac today."""
    version = macos_version() if version is None else version
    blackhole = (
        "install BlackHole (free), then in Audio MIDI Setup create a Multi-Output Device (your "
        "speakers + BlackHole) and play through it, or an Aggregate Device (microphone + "
        "BlackHole, drift correction on), and choose BlackHole as system audio."
    )
    if native_route(version) is None:
        return f"To record what this Mac plays, {blackhole}"
    shown = ".".join(map(str, version))
    tap = ""
    if native_route(version) == PROCESS_TAP:
        tap = (
            "choose 'What this Mac plays (Core Audio tap)' as system audio and allow DeskScribe "
            "under System Settings > Privacy & Security > Screen & System Audio Recording "
            "('System Audio Recording Only') when macOS asks; if that entry is missing or "
            "records nothing, "
        )
    return (
        f"On macOS {shown} DeskScribe records what this Mac plays natively: {tap}"
        "choose 'What this Mac plays (ScreenCaptureKit)' as system audio and allow Screen "
        "Recording for DeskScribe in System Settings > Privacy & Security when macOS asks. "
        f"If that entry is missing or records nothing, {blackhole}"
    )
