"""The recorder side of a live session: capture -> the session folder, and -> the transcriber.

Runs on its own thread so that a slow decode never delays saving audio: every 50 ms it drains
the capture ring buffers, writes every sample to the session folder (crash-safe, see
``audio.recorder``), feeds the live speaker labeller, hands the mixed audio to the transcriber's
inbox, and reports levels (ten a second), lost input (at most every 5 s) and device failures.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...audio.capture import Capture, mix
from ...audio.devices import LiveAudio
from ...audio.recorder import RecorderError, SessionRecorder
from ...audio_format import SAMPLE_RATE
from ...speakers.online import LiveSpeakerLabeller
from .events import Event, Levels, Problem

LEVELS_EVERY_S = 0.1
OVERFLOW_REPORT_EVERY_S = 5.0
DRAIN_EVERY_S = 0.05

Inbox = queue.Queue  # of np.ndarray (mixed audio), "pause", or None (the end)


class Recording:
    """``capture``: where the audio comes from, any ``audio.devices.LiveAudio`` (default: a
    ``Capture`` of the devices of ``options``; the tests push recordings through one)."""

    def __init__(
        self,
        options,
        tracks: list[str],
        meta: dict,
        labeller: LiveSpeakerLabeller,
        emit: Callable[[Event], None],
        capture=None,
    ) -> None:
        self.options = options
        self._given_capture = capture
        self.tracks = tracks
        self.meta = meta
        self.labeller = labeller
        self.emit = emit
        self.inbox: Inbox[np.ndarray | str | None] = queue.Queue()
        self.paused = threading.Event()
        self.samples = 0  # samples written to disk (the session's length)
        self.capture: LiveAudio | None = None
        self.recorder: SessionRecorder | None = None
        self.folder: Path | None = None
        self.failure: str | None = None  # why recording ended early (set before the inbox end)

    def open(self) -> Path:
        """Create the session folder and start capturing; raises when a device, a permission
        or the disk is missing (the folder, if made, is then closed by ``close``)."""
        self.recorder = SessionRecorder(None, self.tracks, meta=self.meta)
        self.folder = self.recorder.folder
        self.capture = self._given_capture or Capture(
            self.options.source, mic=self.options.mic, system=self.options.system
        )
        self.capture.start()
        return self.folder

    def run(
        self,
        stop: threading.Event,
        behind: Callable[[], float],
        tick: Callable[[], None] | None = None,
    ) -> None:
        """Record until ``stop`` is set (or the disk fails: ``failure`` then says why). The
        transcriber's inbox always gets its end (None). ``tick``: called after every drain
        (the session's health readings)."""
        assert self.capture is not None
        known_errors: dict[str, str] = {}
        last_levels = last_overflow_report = 0.0
        reported_overflows = {t: 0 for t in self.tracks}
        try:
            while not stop.wait(DRAIN_EVERY_S):
                self._drain()
                for track, message in self.capture.errors().items():
                    if known_errors.get(track) != message:
                        known_errors[track] = message
                        self.emit(Problem(_device_problem(track, message), track=track))
                now = time.monotonic()
                overflows = self.capture.overflows()
                if (
                    now - last_overflow_report >= OVERFLOW_REPORT_EVERY_S
                    and overflows != reported_overflows
                ):
                    # Lost input is never silent: say so (at most every 5 s).
                    last_overflow_report, reported_overflows = now, dict(overflows)
                    self.emit(Problem(_overflow_problem(overflows)))
                if now - last_levels >= LEVELS_EVERY_S:
                    last_levels = now
                    self.emit(
                        Levels(
                            self.capture.levels(),
                            overflows,
                            self.samples / SAMPLE_RATE,
                            behind(),
                        )
                    )
                if tick is not None:
                    tick()
            self.capture.stop()
            self._drain()
        except RecorderError as exc:
            self.failure = str(exc)
            self.emit(Problem(str(exc), fatal=True))
            self.capture.stop()
        finally:
            self.inbox.put(None)

    def pause(self) -> None:
        self.paused.set()
        self.inbox.put("pause")  # the transcriber commits what was said so far

    def resume(self) -> None:
        self.paused.clear()

    def _drain(self) -> None:
        assert self.capture is not None and self.recorder is not None
        tracks = self.capture.read()
        n = min((a.shape[0] for a in tracks.values()), default=0)
        if n == 0 or self.paused.is_set():
            return  # paused: captured audio is dropped, not recorded or transcribed
        taken = {t: tracks[t][:n] for t in self.tracks}
        for track, audio in taken.items():
            self.recorder.write(track, audio)
        if self.labeller.active:
            self.labeller.add_audio(taken)
        self.samples += n
        self.inbox.put(mix(taken))

    def save_transcript(self, data: dict) -> None:
        if self.recorder is not None:
            self.recorder.save_transcript(data)

    def close(self) -> None:
        """Close the session files (raises RecorderError/OSError when that fails)."""
        if self.recorder is not None:
            self.recorder.close()


def _overflow_problem(overflows: dict[str, int]) -> str:
    lost = ", ".join(f"{t}: {n}" for t, n in overflows.items() if n)
    return (
        f"Some input audio was lost because the computer could not keep up ({lost} overflows). "
        "Close other busy programs or choose a smaller model."
    )


def _device_problem(track: str, message: str) -> str:
    what = "microphone" if track == "mic" else "system audio"
    return (
        f"The {what} stopped delivering audio ({message}). Everything recorded so far is kept; "
        "pick another device to go on."
    )
