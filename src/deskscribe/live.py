"""A live transcription session: capture -> disk and -> streaming transcriber, on worker threads.

This is the core the GUI's live window and ``deskscribe live`` both drive. Nothing here blocks
the caller: ``start``, ``pause``, ``resume``, ``stop`` and ``switch_device`` return at once, and
everything that happens comes back as events (on ``events``, a queue, and to ``on_event`` if
given, called from a worker thread).

Two threads, so a slow decode never delays saving audio:
- the *recorder* thread drains the capture ring buffers every 50 ms, writes every sample to the
  session folder (crash-safe, see ``audio.recorder``), measures levels, and hands the mixed audio
  on;
- the *transcriber* thread feeds it to ``OnlineTranscriber`` and turns its updates into events,
  autosaving the transcript whenever a line is finished (at most once a second) and every
  few seconds.

In meeting mode (``source="both"``) the microphone and system audio stay separate tracks on disk
and recognition runs on their mix. Committed words get speaker labels from
``speakers.online``: "You" for the microphone, and with a speaker encoder the voices of
system audio (or of the one source) clustered as they come ("S1", "S2", …); without one,
"Others".
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .audio.capture import Capture, mix
from .audio.devices import InputDevice
from .audio.recorder import RecorderError, SessionRecorder
from .speakers.encoder import SpeakerEncoder
from .speakers.online import LiveSpeakerLabeller
from .transcript import Segment, Transcript, Word
from .whisper.languages import main_language
from .whisper.model import WhisperModel
from .whisper.streaming import OnlineTranscriber, StreamingOptions, StreamUpdate

log = logging.getLogger(__name__)
REFINE_MAX_SECONDS = 20 * 60  # longer sessions keep their live speaker labels at Stop

SAMPLE_RATE = 16000


@dataclass
class LiveOptions:
    source: str = "mic"  # "mic", "system" or "both" (meeting)
    mic: InputDevice | None = None  # None: the default device of that kind
    system: InputDevice | None = None
    streaming: StreamingOptions = field(default_factory=StreamingOptions)
    autosave_seconds: float = 3.0
    title: str | None = None

    @property
    def tracks(self) -> list[str]:
        if self.source not in ("mic", "system", "both"):
            raise ValueError(f"unknown source {self.source!r}: use mic, system or both")
        return ["mic", "system"] if self.source == "both" else [self.source]


# ---------------------------------------------------------------------------- events


@dataclass
class Started:
    folder: Path
    tracks: list[str]
    model: str
    device: str  # where inference runs, e.g. "CPU" or "CUDA"


@dataclass
class Levels:
    levels: dict[str, float]  # dBFS per track
    overflows: dict[str, int]
    elapsed: float  # seconds recorded (pauses excluded)
    behind: float  # seconds of speech waiting to be decoded


@dataclass
class TextUpdate:
    segments: list[Segment]  # committed segments, new or grown; replace by id
    tentative: list[Word]  # the newest guess after the committed text (may change)
    open_id: int | None  # the segment that may still grow


@dataclass
class Problem:
    message: str
    track: str | None = None
    fatal: bool = False  # the session stopped because of it


@dataclass
class Stopped:
    transcript: Transcript
    folder: Path | None
    reason: str | None = None  # why it stopped, when it was not the user


Event = Started | Levels | TextUpdate | Problem | Stopped


class LiveSession:
    def __init__(
        self,
        model: WhisperModel,
        options: LiveOptions | None = None,
        on_event: Callable[[Event], None] | None = None,
        speaker_encoder: SpeakerEncoder | None = None,
    ) -> None:
        self.model = model
        self.options = options or LiveOptions()
        self.tracks = self.options.tracks
        self.on_event = on_event
        self.events: queue.Queue[Event] = queue.Queue()
        self.state = "idle"
        self.folder: Path | None = None
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._lock = threading.Lock()
        self._audio: queue.Queue[np.ndarray | str | None] = queue.Queue()
        self._segments: dict[int, Segment] = {}
        self._edited: set[int] = set()
        self._speaker_names: dict[str, str] = {}
        self._open_id: int | None = None
        self._tentative: list[Word] = []
        self._capture: Capture | None = None
        self._recorder: SessionRecorder | None = None
        self._recorded = 0  # samples written to disk (the session's length)
        self._fed = 0  # samples the transcriber has taken
        self._reason: str | None = None
        self._threads: list[threading.Thread] = []
        self._done = threading.Event()
        self._transcript: Transcript | None = None
        self.labeller = LiveSpeakerLabeller(self.tracks, speaker_encoder)
        self.transcriber = OnlineTranscriber(
            model,
            self.options.streaming,
            label_words=self.labeller.label if self.labeller.active else None,
        )

    # ------------------------------------------------------------------ control

    def start(self) -> None:
        if self.state != "idle":
            raise RuntimeError("a session can be started once")
        self.state = "starting"
        recorder = threading.Thread(target=self._record_loop, name="live-recorder", daemon=True)
        self._threads = [recorder]
        recorder.start()

    def pause(self) -> None:
        if self.state == "recording":
            self._paused.set()
            self.state = "paused"
            self._audio.put("pause")

    def resume(self) -> None:
        if self.state == "paused":
            self._paused.clear()
            self.state = "recording"

    def stop(self) -> None:
        if self.state in ("starting", "recording", "paused"):
            self.state = "stopping"
        self._stop.set()

    def wait(self, timeout: float | None = None) -> Transcript | None:
        """Block until the session has stopped (not for the UI thread); the final transcript."""
        self._done.wait(timeout)
        return self._transcript

    def switch_device(self, track: str, device: InputDevice) -> None:
        """Replace one track's input while recording; the session and its timeline go on."""
        if self._capture is None:
            raise RuntimeError("the session is not recording")
        self._capture.switch_device(track, device)

    @property
    def behind_seconds(self) -> float:
        """How far recognition trails the recording: audio not yet taken by the transcriber
        plus speech it holds but has not decoded."""
        queued = max(0, self._recorded - self._fed) / SAMPLE_RATE
        return queued + self.transcriber.behind_seconds

    def edit_segment(self, segment_id: int, text: str) -> None:
        """The user corrected a committed segment; the session keeps the correction."""
        with self._lock:
            seg = self._segments.get(segment_id)
            if seg is None or segment_id == self._open_id:
                raise ValueError("only finished segments can be edited while recording")
            seg.text = text
            self._edited.add(segment_id)

    def transcript(self) -> Transcript:
        """The committed transcript so far (a copy; safe from any thread)."""
        with self._lock:
            segments = [
                Segment(**{**s.__dict__, "words": list(s.words)})
                for _, s in sorted(self._segments.items())
            ]
        transcript = Transcript(
            segments=segments,
            speakers=dict(self._speaker_names),
            language=self.transcriber.language
            or main_language((s.language, s.end - s.start) for s in segments),
            duration=self._recorded / SAMPLE_RATE,
            source=str(self.folder) if self.folder else None,
            model=self.model.name,
        )
        transcript.name_voices()  # "S1" is "Speaker 1" in the library and the exports
        return transcript

    # ------------------------------------------------------------------ threads

    def _emit(self, event: Event) -> None:
        self.events.put(event)
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:  # a broken listener must not kill the recording
                log.exception("live session listener failed on %s", type(event).__name__)

    def _record_loop(self) -> None:
        opt = self.options
        try:
            self._recorder = SessionRecorder(
                None,
                self.tracks,
                meta={"title": opt.title, "model": self.model.name, "source": opt.source},
            )
            self.folder = self._recorder.folder
            self._capture = Capture(opt.source, mic=opt.mic, system=opt.system)
            self._capture.start()
        except Exception as exc:  # no device, no permission, no disk: say so and end
            self._fail_to_start(exc)
            return
        transcriber = threading.Thread(
            target=self._transcribe_loop, name="live-transcriber", daemon=True
        )
        self._threads.append(transcriber)
        transcriber.start()
        self.state = "recording"
        self._emit(Started(self.folder, self.tracks, self.model.name, self.model.runtime.label))
        known_errors: dict[str, str] = {}
        last_levels = last_overflow_report = 0.0
        reported_overflows = {t: 0 for t in self.tracks}
        try:
            while not self._stop.wait(0.05):
                self._drain()
                for track, message in self._capture.errors().items():
                    if known_errors.get(track) != message:
                        known_errors[track] = message
                        self._emit(Problem(_device_problem(track, message), track=track))
                now = time.monotonic()
                overflows = self._capture.overflows()
                if now - last_overflow_report >= 5.0 and overflows != reported_overflows:
                    # Lost input is never silent: say so (at most every 5 s).
                    last_overflow_report, reported_overflows = now, dict(overflows)
                    self._emit(Problem(_overflow_problem(overflows)))
                if now - last_levels >= 0.1:
                    last_levels = now
                    self._emit(
                        Levels(
                            self._capture.levels(),
                            self._capture.overflows(),
                            self._recorded / SAMPLE_RATE,
                            self.behind_seconds,
                        )
                    )
            self._capture.stop()
            self._drain()
        except RecorderError as exc:
            self._reason = str(exc)
            self._emit(Problem(str(exc), fatal=True))
            self._capture.stop()
        finally:
            self._audio.put(None)

    def _drain(self) -> None:
        assert self._capture is not None and self._recorder is not None
        tracks = self._capture.read()
        n = min((a.shape[0] for a in tracks.values()), default=0)
        if n == 0:
            return
        if self._paused.is_set():
            return  # paused: captured audio is dropped, not recorded or transcribed
        for track in self.tracks:
            self._recorder.write(track, tracks[track][:n])
        if self.labeller.active:
            self.labeller.add_audio({t: tracks[t][:n] for t in self.tracks})
        self._recorded += n
        self._audio.put(mix({t: tracks[t][:n] for t in self.tracks}))

    def _transcribe_loop(self) -> None:
        try:
            self._transcribe_until_stop()
        finally:
            self._finish()

    def _transcribe_until_stop(self) -> None:
        last_save = time.monotonic()
        ended = False
        failures = 0
        while not ended:
            items = [self._audio.get()]
            while True:  # take everything waiting: one decode covers it all
                try:
                    items.append(self._audio.get_nowait())
                except queue.Empty:
                    break
            fed = 0
            for item in items:
                if item is None:
                    ended = True
                elif isinstance(item, str):  # pause: commit what was said so far
                    self._publish(self.transcriber.finish())
                else:
                    self.transcriber.add_audio(item)
                    fed += item.shape[0]
            self._fed += fed
            # More than two steps of audio arrived during the last decode: the machine is not
            # keeping up, so skip the tentative pass and let utterance ends commit the text.
            keeping_up = fed <= 2 * self.options.streaming.step_seconds * SAMPLE_RATE
            try:
                if ended:
                    update = self.transcriber.finish()
                else:
                    update = self.transcriber.process(interim=keeping_up)
            except Exception as exc:  # the recording goes on; the text of this pass is lost
                log.exception("a live transcription pass failed")
                failures += 1
                if failures in (1, 10, 100):
                    self._emit(
                        Problem(
                            f"transcription failed ({exc}); the recording goes on and can be "
                            "transcribed again from the session"
                        )
                    )
                continue
            self._publish(update)
            since = time.monotonic() - last_save
            closed = any(seg.id != update.open_id for seg in update.segments)
            if ended or since >= self.options.autosave_seconds or (closed and since >= 1.0):
                self._autosave()
                last_save = time.monotonic()

    def _publish(self, update: StreamUpdate) -> None:
        with self._lock:
            for seg in update.segments:
                if seg.id not in self._edited:
                    self._segments[seg.id] = seg
            changed = update.tentative != self._tentative or update.open_id != self._open_id
            self._open_id = update.open_id
            self._tentative = update.tentative
        if update.segments or changed:
            self._emit(TextUpdate(update.segments, update.tentative, update.open_id))

    def _autosave(self) -> None:
        if self._recorder is None:
            return
        data = self.transcript().to_dict()
        data["tentative"] = "".join(w.text for w in self._tentative).strip()
        try:
            self._recorder.save_transcript(data)
        except (RecorderError, OSError) as exc:
            self._emit(Problem(f"could not autosave the transcript: {exc}"))

    def _finish(self) -> None:
        """Close the recording and send ``Stopped``, whatever fails on the way (a window
        waiting for it must always be able to close)."""
        try:
            try:
                if self._recorder is not None:
                    self._recorder.close()
            except (RecorderError, OSError) as exc:
                self._emit(Problem(f"could not finish the session files: {exc}"))
            try:
                if self._refine_speakers():
                    self._autosave()
            except Exception:  # the live labels and the autosaved text stay
                log.exception("finishing the speaker labels failed")
        finally:
            self._transcript = self.transcript()
            self.state = "stopped"
            self._emit(Stopped(self._transcript, self.folder, self._reason))
            self._done.set()

    def _refine_speakers(self) -> bool:
        """At Stop, one offline pass over the whole recording refines the live speaker labels
        (which had to be given from a few seconds of speech each), and names the voices saved
        as profiles. Single-source sessions up to REFINE_MAX_SECONDS only; never when the user
        has corrected text meanwhile."""
        encoder = self.labeller.encoder
        if (
            encoder is None
            or len(self.tracks) != 1
            or self.folder is None
            or self._edited
            or not self._segments
            or self._recorded > REFINE_MAX_SECONDS * SAMPLE_RATE
        ):
            return False
        from .audio.sessions import read_track
        from .speakers.diarize import assign_speakers, diarize

        try:
            turns = diarize(read_track(self.folder, self.tracks[0]), encoder)
            refined = assign_speakers(self.transcript(), turns)
        except Exception:  # the live labels stay; nothing is lost
            log.exception("refining the speaker labels at stop failed")
            return False
        from .speakers.profiles import ProfileError, apply_profiles, match_threshold_for

        try:  # voices saved as profiles get their names
            apply_profiles(
                refined, turns.centroids, match_threshold_for(encoder.kind), model=encoder.name
            )
        except ProfileError:
            log.exception("voice profiles not used")
        with self._lock:
            self._segments = {seg.id: seg for seg in refined.segments}
            self._speaker_names = dict(refined.speakers)
        return True

    def _fail_to_start(self, exc: Exception) -> None:
        self._reason = str(exc)
        self._emit(Problem(str(exc), fatal=True))
        if self._recorder is not None:
            with contextlib.suppress(RecorderError, OSError):
                self._recorder.close()
        self._transcript = self.transcript()
        self.state = "stopped"
        self._emit(Stopped(self._transcript, self.folder, self._reason))
        self._done.set()


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
