"""The service layer with real parts: the model cache on a real store, a real engine process,
and live sessions on the real tiny.en model fed real speech through ``PushedCapture``."""

from __future__ import annotations

import queue
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import EVAL, espeak, load, normalize, wer
from deskscribe.models.store import ModelNotInstalledError
from deskscribe.service.engine import EngineProcess
from deskscribe.service.jobs import FileJob
from deskscribe.service.live import (
    EventQueue,
    Levels,
    LiveOptions,
    LiveSession,
    LiveState,
    Problem,
    Started,
    Stopped,
    TextUpdate,
)
from deskscribe.service.models import ModelCache, pick_model, queued_model_name
from pushed import PushedCapture

SR = 16000
JFK = "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country."


@pytest.fixture()
def store(tmp_path, monkeypatch, tiny_fp32) -> Path:
    """A model store holding the real tiny.en build (linked, not copied)."""
    root = tmp_path / "models"
    root.mkdir()
    (root / "tiny.en-fp32").symlink_to(tiny_fp32, target_is_directory=True)
    monkeypatch.setenv("DESKSCRIBE_MODELS_DIR", str(root))
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DESKSCRIBE_SETTINGS", str(tmp_path / "settings.json"))
    return root


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    from deskscribe.audio.decode import decode_audio

    return decode_audio(EVAL / "jfk.flac")


# --------------------------------------------------------------------------- model cache


def test_a_model_is_loaded_once_for_every_thread_and_name(store) -> None:
    cache = ModelCache(default=lambda: "base-int8")  # the default was removed since
    got: list = []
    threads = [
        threading.Thread(target=lambda n=n: got.append(cache.model(n, "cpu")))
        for n in ("tiny.en", "tiny.en-fp32", None, "tiny.en")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and all(m is got[0] for m in got)
    assert cache.loads == 1
    assert pick_model(None, "base-int8")[0] == "tiny.en-fp32"  # the newest installed
    assert queued_model_name(None, "base-int8") == "tiny.en-fp32"
    assert queued_model_name("tiny.en", None) == "tiny.en"


def test_keep_idle_release_and_forget(store, tiny_fp32) -> None:
    (store / "second-fp32").symlink_to(tiny_fp32, target_is_directory=True)
    cache = ModelCache(keep=1, idle_seconds=60.0)
    first = cache.model("tiny.en-fp32", "cpu")
    second = cache.model("second-fp32", "cpu")
    assert first is not second and cache.loaded() == [second]  # one at a time: they are big
    assert cache.release_idle() == 0  # just used
    assert cache.release_idle(now=time.monotonic() + 61) == 1
    assert cache.loaded() == []
    cache.model("second-fp32", "cpu")
    cache.forget(store / "second-fp32")
    assert cache.loaded() == [] and cache.loads == 3


def test_no_speaker_model_says_how_to_get_one(store) -> None:
    cache = ModelCache()
    with pytest.raises(ModelNotInstalledError, match="speaker model"):
        cache.speaker_encoder("cpu")
    with pytest.raises(ModelNotInstalledError):
        cache.model("nothing-like-this")


def test_engine_process_returns_the_result_and_writes_no_library(store, tmp_path) -> None:
    wav = espeak("Please send the quarterly report to the whole team.", tmp_path / "job.wav")
    engine = EngineProcess()
    try:
        seen: list = []
        result = engine.run(
            FileJob(wav, model="tiny.en", device="cpu", batched=True),
            progress=lambda *values: seen.append(values),
        )
    finally:
        engine.close()
    assert result.status == "done", result.error
    assert wer("Please send the quarterly report to the whole team.", result.transcript.text) < 0.2
    assert result.duration == pytest.approx(load(wav).shape[0] / SR, abs=0.05)
    assert seen and all(len(v) == 3 for v in seen)  # (done, total, stage) over the pipe
    assert not list((tmp_path / "data").glob("library*"))  # the caller stores it, not the engine


def test_a_broken_speaker_model_is_said_on_the_file_and_its_words_are_kept(
    store, speaker_model, tmp_path
) -> None:
    """The app's file queue (the engine process) with an installed speaker model whose ONNX
    file was cut short: the file is transcribed without labels and its note says why and how
    to mend it. Before, the labels were quietly off."""
    broken = store / "speaker-resemblyzer"
    shutil.copytree(speaker_model, broken)
    onnx_file = broken / "encoder.onnx"
    onnx_file.write_bytes(onnx_file.read_bytes()[:1000])
    said = "Please send the quarterly report to the whole team."
    wav = espeak(said, tmp_path / "job.wav")
    engine = EngineProcess()
    try:
        result = engine.run(FileJob(wav, model="tiny.en", device="cpu", speakers="auto"))
    finally:
        engine.close()
    assert result.status == "done", result.error
    assert wer(said, result.transcript.text) < 0.2
    assert all(seg.speaker is None for seg in result.transcript.segments)
    note = " ".join(result.notes)
    assert "without speaker labels" in note and str(onnx_file) in note, note


# --------------------------------------------------------------------------- live


class _SlowToOpen(PushedCapture):
    """A source that takes its time to open, as a Bluetooth headset does."""

    def __init__(self, tracks) -> None:
        super().__init__(tracks)
        self.opening = threading.Event()
        self.may_open = threading.Event()

    def start(self) -> None:
        self.opening.set()
        assert self.may_open.wait(10)


def test_stop_while_starting_is_never_overwritten_by_recording(store, tiny_model) -> None:
    capture = _SlowToOpen(["system"])
    session = LiveSession(tiny_model, LiveOptions(source="system"), capture=capture)
    states_at_start: list = []
    session.on_event = lambda e: (
        states_at_start.append(session.state) if isinstance(e, Started) else None
    )
    session.start()
    assert capture.opening.wait(10)
    session.stop()  # the user changed their mind while the device was opening
    capture.may_open.set()
    assert session.wait(30) is not None
    assert states_at_start == [LiveState.STOPPING]  # before: "recording", with Stop pressed
    assert session.state == LiveState.STOPPED == "stopped"


def _push_paced(capture: PushedCapture, session: LiveSession, audio: np.ndarray, speed: float):
    """Push ``audio`` in 0.5 s blocks at ``speed`` times real time, never more than 4 s
    of audio waiting for recognition (a fast sender waits, as a network client does)."""
    block = SR // 2
    for i in range(0, audio.shape[0], block):
        capture.push(audio[i : i + block])
        time.sleep(0.5 / speed)
        while capture.waiting_seconds() + session.queued_seconds > 4.0:
            time.sleep(0.05)


def test_pushed_real_speech_is_transcribed_and_kept(store, tiny_model, jfk) -> None:
    capture = PushedCapture(["system"])
    session = LiveSession(tiny_model, LiveOptions(source="system"), capture=capture)
    session.start()
    audio = np.concatenate([jfk, np.zeros(SR, dtype=np.float32)])
    _push_paced(capture, session, audio, speed=4.0)
    time.sleep(0.5)
    session.stop()
    transcript = session.wait(120)
    assert transcript is not None and session.state == "stopped"
    assert wer(JFK, transcript.text) < 0.25, transcript.text
    assert "ask not what your country" in normalize(transcript.text)
    assert transcript.duration == pytest.approx(audio.shape[0] / SR, abs=0.2)
    # Every pushed sample is on disk, in the session folder.
    from deskscribe.audio.sessions import read_track

    assert read_track(session.folder, "system").shape[0] == audio.shape[0]


def test_events_nobody_reads_cannot_grow(store, tiny_model, jfk) -> None:
    capture = PushedCapture(["system"])
    session = LiveSession(tiny_model, LiveOptions(source="system"), capture=capture)
    session.events = EventQueue(maxlen=40)
    session.start()
    _push_paced(capture, session, np.concatenate([jfk, jfk]), speed=3.0)
    session.stop()
    transcript = session.wait(120)
    assert transcript is not None and transcript.segments
    left = []
    while not session.events.empty():
        left.append(session.events.get_nowait())
    assert len(left) <= 40 and session.events.dropped > 0
    assert isinstance(left[-1], Stopped) and isinstance(left[0], Started | TextUpdate | Problem)
    # Meter readings went first: every text update of the session is still there.
    updated = {seg.id for e in left if isinstance(e, TextUpdate) for seg in e.segments}
    assert {seg.id for seg in transcript.segments} <= updated


def test_event_queue_alone() -> None:
    q = EventQueue(maxlen=3)
    for i in range(5):
        q.put(Levels({"mic": float(i)}, {"mic": 0}, float(i), 0.0))
    q.put(Problem("disk"))
    assert q.qsize() == 3 and q.dropped == 3
    assert [type(q.get_nowait()) for _ in range(3)] == [Levels, Levels, Problem]
    with pytest.raises(queue.Empty):  # as queue.Queue raises
        q.get(timeout=0.05)
