"""Silence while something plays: the sign that system audio is not really being recorded.

A macOS process tap without permission (or without ``NSAudioCaptureUsageDescription`` in the
app's Info.plist) and a ScreenCaptureKit stream without Screen Recording permission deliver
buffers of exact zeros and report success. On Windows, loopback of the default speakers is
silent while a headset plays the call on the "communications" device. Real silence from a
microphone or a quiet room is never exact zero; a sound server's idle sink is, but then
nothing plays. So: `after_s` seconds of digital zero, counted only while the operating
system says something plays, means the capture is blind; `permission_help` says what to do.
"""

from __future__ import annotations

import numpy as np

DETECT_AFTER_S = 3.0


class SilenceWatch:
    """Feed it what a system-audio stream delivered; `blind` turns True when the stream
    gave only digital zeros for `after_s` seconds while something played. Any sound resets
    it (a tap that starts working, a call that moves to the recorded device)."""

    def __init__(self, rate: float = 16000.0, after_s: float = DETECT_AFTER_S) -> None:
        self.rate = float(rate)
        self.after_s = after_s
        self._zero_while_playing = 0  # frames
        self.heard_sound = False
        self.blind = False

    def feed(self, audio: np.ndarray, playing: bool | None) -> bool:
        """Add a block; `playing`: the OS plays something now (None: unknown, never counts).
        Returns `blind`."""
        audio = np.asarray(audio)
        if not audio.size:
            return self.blind
        if np.any(audio != 0):
            self._zero_while_playing = 0
            self.heard_sound = True
            self.blind = False
        elif playing:
            self._zero_while_playing += len(audio)
            self.blind = self._zero_while_playing >= self.after_s * self.rate
        return self.blind


def permission_help(backend: str, device: str = "") -> str:
    """What the user does when `backend`'s stream is blind (SilenceWatch.blind)."""
    if backend == "process-tap":
        return (
            "DeskScribe records only silence from system audio although sound is playing: "
            "macOS has not allowed it to record other apps' audio. Open System Settings > "
            "Privacy & Security > Screen & System Audio Recording, turn DeskScribe on under "
            "'System Audio Recording Only' (on macOS 14: Screen Recording), then quit and "
            "reopen DeskScribe. Your recording so far is kept."
        )
    if backend == "screencapturekit":
        return (
            "DeskScribe records only silence from system audio although sound is playing: "
            "macOS has not given it Screen Recording permission, which system audio needs on "
            "this macOS version. Open System Settings > Privacy & Security > Screen Recording, "
            "turn DeskScribe on, then quit and reopen DeskScribe. Your recording so far is kept."
        )
    if backend == "wasapi":
        where = f"'{device}'" if device else "the chosen output"
        return (
            f"DeskScribe records only silence from {where} although sound is playing: the "
            "sound goes to another output. A headset often plays calls on Windows' "
            "'communications' device: choose the system-audio entry marked '(calls)', or the "
            "output you hear the sound on. Your recording so far is kept."
        )
    return (
        "DeskScribe records only silence from system audio although sound is playing; "
        "choose another system-audio device. Your recording so far is kept."
    )
