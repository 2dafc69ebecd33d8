"""A live transcription session: capture -> disk and -> streaming transcriber, on worker threads.

This is the core the window's live page and ``deskscribe live`` both drive. Nothing here
blocks the caller: ``start``, ``pause``, ``resume``, ``stop`` and ``switch_device`` return at
once, and everything that happens comes back as events, to the one sink the caller chose (see
``events``).

Its parts, each in its own module:
- ``recording.Recording``, the recorder thread: every sample to the session folder, levels,
  device problems, the mixed audio to the transcriber;
- the transcriber thread (here): feeds ``OnlineTranscriber``, turns its updates into events,
  autosaves the transcript whenever a line is finished (at most once a second) and every few
  seconds;
- ``store.TranscriptStore``: the committed text, the tentative tail, the user's corrections;
- ``relabel.LabelReviser``, a thread that revises the voice labels every so often with the
  offline speaker pass over the recording so far (``Relabelled`` events);
- ``refine.refine_speakers``: the offline speaker pass at Stop;
- ``health.HealthMonitor``: measured figures, once a second as a ``HealthReport`` event and a
  line of ``health.jsonl`` in the session folder, a summary (``health-summary.json``) at Stop;
- ``degrade.Degrader``: when recognition falls behind, less work on purpose (``Adapted``
  events; each switch is also kept in the autosaved transcript's ``live.adaptations``).
The state (``LiveState``) changes only under a lock, so a ``stop()`` during start-up is never
overwritten by "recording".

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

from ...audio.devices import InputDevice
from ...audio.recorder import RecorderError
from ...audio_format import SAMPLE_RATE
from ...speakers.encoder import SpeakerEncoder
from ...speakers.growing import live_options
from ...speakers.online import LiveSpeakerLabeller
from ...transcript import Transcript
from ...whisper.model import WhisperModel
from ...whisper.streaming import OnlineTranscriber, StreamingOptions, StreamUpdate
from ..speakers import participants_options
from .degrade import LABELS_AT_STOP, DegradeOptions, Degrader
from .events import (
    Event,
    EventQueue,
    LiveState,
    Problem,
    Relabelled,
    Started,
    Stopped,
    TextUpdate,
)
from .health import HealthLog, HealthMonitor
from .pacing import KeepingUp, live_model
from .recording import Recording
from .refine import refine_speakers
from .relabel import LabelReviser, ReviseOptions
from .store import TranscriptStore

log = logging.getLogger(__name__)


@dataclass
class LiveOptions:
    source: str = "mic"  # "mic", "system" or "both" (meeting)
    mic: InputDevice | None = None  # None: the default device of that kind
    system: InputDevice | None = None
    streaming: StreamingOptions = field(default_factory=StreamingOptions)
    autosave_seconds: float = 3.0
    title: str | None = None
    health_every_s: float = 1.0
    # A small CPU model decodes live on one thread (pacing.live_model): the other cores stay
    # free for the meeting app, and one thread uses its CPU time better (the passes adapt
    # their step to its speed). 0: the model's own sessions.
    cpu_threads: int = 1
    degrade: DegradeOptions | None = field(default_factory=DegradeOptions)  # None: never
    # Revise the voice labels while recording (``relabel``); None: only at Stop.
    revise: ReviseOptions | None = field(default_factory=ReviseOptions)
    # "How many people spoke?": "" (not said), "3" or "2-4"; meeting mode counts "You" in it.
    participants: str = ""

    @property
    def tracks(self) -> list[str]:
        if self.source not in ("mic", "system", "both"):
            raise ValueError(f"unknown source {self.source!r}: use mic, system or both")
        return ["mic", "system"] if self.source == "both" else [self.source]


_ACTIVE = (LiveState.STARTING, LiveState.RECORDING, LiveState.PAUSED)


class LiveSession(KeepingUp):
    """``on_event``: the caller's sink, called on a session thread (set it before ``start``);
    without one, events wait in ``events``, a bounded ``EventQueue``. ``capture``: the audio
    source, any ``audio.devices.LiveAudio`` (default: the devices of ``options``; the tests
    push recordings through one). ``fallback_models``: loaders of the models to
    decode with when the session is behind and has stepped down to ``FASTER_MODEL`` or
    ``SMALLER_MODEL`` (``degrade.fallback_models``), called on the transcriber thread when
    first needed; the session returns to ``model`` once it has caught up."""

    def __init__(
        self,
        model: WhisperModel,
        options: LiveOptions | None = None,
        on_event: Callable[[Event], None] | None = None,
        speaker_encoder: SpeakerEncoder | None = None,
        capture=None,
        fallback_models: dict[str, Callable[[], WhisperModel]] | None = None,
    ) -> None:
        self.options = options or LiveOptions()
        self.model = model = live_model(model, self.options.cpu_threads)
        self.tracks = self.options.tracks
        # The count asked for, for the revisions and the pass at Stop (ValueError: bad text).
        self.diarize_options = live_options(
            participants_options(
                self.options.participants, beside_you=self.tracks == ["mic", "system"]
            )
        )
        self.on_event = on_event
        self.events = EventQueue()
        self._state = LiveState.IDLE
        self._state_lock = threading.Lock()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        self._reviser_thread: threading.Thread | None = None
        self.refined = False  # whether the speaker pass at Stop relabelled the transcript
        self._fed = 0  # samples the transcriber has taken
        self._reason: str | None = None
        self._transcript: Transcript | None = None
        self.store = TranscriptStore()
        self.labeller = LiveSpeakerLabeller(self.tracks, speaker_encoder)
        self.transcriber = OnlineTranscriber(
            model,
            self.options.streaming,
            label_words=self.labeller.label if self.labeller.active else None,
        )
        self.health = HealthMonitor(model.name, model.runtime.label)
        self._health_log: HealthLog | None = None
        self._last_health = 0.0
        self._fallbacks = dict(fallback_models or {})
        self._loaded: dict[str, WhisperModel] = {}  # fallback models by step, once loaded
        # Voice labels can wait for Stop only where the speaker pass at Stop redoes them.
        deferrable = self.labeller.active and speaker_encoder is not None and len(self.tracks) == 1
        self.degrader = Degrader(
            labels=deferrable, models=tuple(self._fallbacks), options=self.options.degrade
        )
        self.adaptations: list[dict] = []  # every switch (also in the autosaved transcript)
        self._committed_end = 0.0  # stream time (s) of the newest committed word
        meta = {"title": self.options.title, "model": model.name, "source": self.options.source}
        self.recording = Recording(
            self.options, self.tracks, meta, self.labeller, self._emit, capture
        )
        self.reviser = LabelReviser(
            self.store, self.transcript, self.labeller, self.tracks,
            recorded=lambda: self.recording.samples,
            allowed=lambda: not self.degrader.active(LABELS_AT_STOP),
            on_revised=lambda segments: self._emit(Relabelled(segments)),
            options=self.options.revise, diarize_options=self.diarize_options,
        )  # fmt: skip

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> LiveState:
        return self._state

    def _move(self, to: LiveState, *, only_from: tuple[LiveState, ...] | None = None) -> bool:
        """Change the state (atomically); with ``only_from``, only from one of those."""
        with self._state_lock:
            if only_from is not None and self._state not in only_from:
                return False
            self._state = to
            return True

    @property
    def folder(self):
        return self.recording.folder

    # ------------------------------------------------------------------ control

    def start(self) -> None:
        if not self._move(LiveState.STARTING, only_from=(LiveState.IDLE,)):
            raise RuntimeError("a session can be started once")
        recorder = threading.Thread(target=self._record, name="live-recorder", daemon=True)
        self._threads = [recorder]
        recorder.start()

    def pause(self) -> None:
        if self._move(LiveState.PAUSED, only_from=(LiveState.RECORDING,)):
            self.recording.pause()

    def resume(self) -> None:
        if self._move(LiveState.RECORDING, only_from=(LiveState.PAUSED,)):
            self.recording.resume()

    def stop(self) -> None:
        self._move(LiveState.STOPPING, only_from=_ACTIVE)
        self._stop.set()

    def wait(self, timeout: float | None = None) -> Transcript | None:
        """Block until the session has stopped (not for the UI thread); the final transcript."""
        self._done.wait(timeout)
        return self._transcript

    def switch_device(self, track: str, device: InputDevice) -> None:
        """Replace one track's input while recording; the session and its timeline go on."""
        if self.recording.capture is None:
            raise RuntimeError("the session is not recording")
        self.recording.capture.switch_device(track, device)

    @property
    def queued_seconds(self) -> float:
        """Audio recorded but not yet taken by the transcriber."""
        return max(0, self.recording.samples - self._fed) / SAMPLE_RATE

    @property
    def behind_seconds(self) -> float:
        """How far recognition trails the recording: audio not yet taken by the transcriber
        plus speech it holds but has not decoded."""
        return self.queued_seconds + self.transcriber.behind_seconds

    @property
    def late_seconds(self) -> float:
        """``behind_seconds`` less the speech the transcriber leaves undecoded by choice (fewer
        passes after a step down): what the degradation steps on. Counting that choice as
        lag kept a session down for as long as someone spoke, and a 23 s utterance of the
        real call then showed as 23 s behind with the CPU idle."""
        t = self.transcriber
        return self.queued_seconds + max(0.0, t.behind_seconds - t.chosen_wait_seconds)

    def edit_segment(self, segment_id: int, text: str) -> None:
        """The user corrected a committed segment; the session keeps the correction."""
        self.store.edit(segment_id, text)

    def transcript(self) -> Transcript:
        """The committed transcript so far (a copy; safe from any thread)."""
        return self.store.snapshot(
            language=self.transcriber.language,
            duration=self.recording.samples / SAMPLE_RATE,
            source=str(self.folder) if self.folder else None,
            model=self.model.name,
        )

    # ------------------------------------------------------------------ threads

    def _emit(self, event: Event) -> None:
        if self.on_event is None:
            self.events.put(event)
            return
        try:
            self.on_event(event)
        except Exception:  # a broken listener must not kill the recording
            log.exception("live session listener failed on %s", type(event).__name__)

    def _record(self) -> None:
        try:
            folder = self.recording.open()
        except Exception as exc:  # no device, no permission, no disk: say so and end
            self._fail_to_start(exc)
            return
        transcriber = threading.Thread(
            target=self._transcribe_loop, name="live-transcriber", daemon=True
        )
        self._threads.append(transcriber)
        transcriber.start()
        if self.options.revise is not None and self.reviser.active:
            self._reviser_thread = threading.Thread(
                target=self.reviser.run, args=(folder, self._stop), name="live-relabel",
                daemon=True,
            )  # fmt: skip
            self._threads.append(self._reviser_thread)
            self._reviser_thread.start()
        self._move(LiveState.RECORDING, only_from=(LiveState.STARTING,))
        self._emit(Started(folder, self.tracks, self.model.name, self.model.runtime.label))
        self._health_log = HealthLog(folder)
        self.recording.run(self._stop, lambda: self.behind_seconds, self._tick)

    def _transcribe_loop(self) -> None:
        try:
            self._transcribe_until_stop()
        finally:
            self._finish()

    def _transcribe_until_stop(self) -> None:
        inbox = self.recording.inbox
        last_save = time.monotonic()
        ended = False
        failures = 0
        while not ended:
            items = [inbox.get()]
            while True:  # take everything waiting: one decode covers it all
                try:
                    items.append(inbox.get_nowait())
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
            keeping_up = fed <= 2 * self.transcriber.step_samples
            self._apply_level()
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
            self._measure(update)
            since = time.monotonic() - last_save
            closed = any(seg.id != update.open_id for seg in update.segments)
            if ended or since >= self.options.autosave_seconds or (closed and since >= 1.0):
                self._autosave()
                last_save = time.monotonic()

    def _publish(self, update: StreamUpdate) -> None:
        if self.store.publish(update):
            self._emit(TextUpdate(update.segments, update.tentative, update.open_id))

    def _autosave(self) -> None:
        data = self.transcript().to_dict()
        data["tentative"] = self.store.tentative_text()
        data["live"] = {"adaptations": list(self.adaptations), "level": self.degrader.level}
        try:
            self.recording.save_transcript(data)
        except (RecorderError, OSError) as exc:
            self._emit(Problem(f"could not autosave the transcript: {exc}"))

    def _finish(self) -> None:
        """Close the recording and send ``Stopped``, whatever fails on the way (a window
        waiting for it must always be able to close)."""
        try:
            self._write_health_summary()
            try:
                self.recording.close()
            except (RecorderError, OSError) as exc:
                self._emit(Problem(f"could not finish the session files: {exc}"))
            if self._reviser_thread is not None:  # a revision must not land after the pass
                self._reviser_thread.join(timeout=30)
            try:
                self.refined = refine_speakers(
                    self.store, self.transcript, self.labeller.encoder, self.folder,
                    self.tracks, self.recording.samples, growing=self.reviser.growing,
                    decoded=self.reviser.decoded, options=self.diarize_options,
                )  # fmt: skip
                if self.refined:
                    self._autosave()
            except Exception:  # the live labels and the autosaved text stay
                log.exception("finishing the speaker labels failed")
        finally:
            self.reviser.decoded = {}  # held only while recording (115 MB per hour)
            self._end()

    def _fail_to_start(self, exc: Exception) -> None:
        self._reason = str(exc)
        self._emit(Problem(str(exc), fatal=True))
        with contextlib.suppress(RecorderError, OSError):
            self.recording.close()
        self._end()

    def _end(self) -> None:
        self._reason = self._reason or self.recording.failure
        self._transcript = self.transcript()
        self._move(LiveState.STOPPED)
        self._emit(Stopped(self._transcript, self.folder, self._reason))
        self._done.set()
