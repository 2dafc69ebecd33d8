"""The live window with real capture (a PulseAudio null sink's monitor as system audio), the real
tiny.en model and real session files; and recovery after the app is killed mid-session."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt

from conftest import espeak, load, normalize
from conversations import SCRIPT_2, build
from deskscribe.audio.sessions import find_interrupted, list_sessions, read_track
from deskscribe.gui.app import MainWindow
from deskscribe.gui.context import AppContext
from deskscribe.gui.live_panel import LivePanel
from deskscribe.gui.recovery import RecoveryDialog
from deskscribe.gui.widgets import clock
from deskscribe.service.queue import job_options
from gui_support import UiLag, app_env, install_test_model  # noqa: F401 (fixture)
from test_live import TURNS, gap, write_wav

SR = 16000
RECORD_SYSTEM_AUDIO = Path(__file__).parent / "drivers" / "record_system_audio.py"


@pytest.fixture(scope="module")
def talk(speech_dir, tmp_path_factory) -> Path:
    """Three sentences with pauses, as a WAV to play into a null sink."""
    turns = [load(espeak(t, speech_dir / f"turn{i}.wav")) for i, t in enumerate(TURNS)]
    audio = np.concatenate([gap(0.5), turns[0], gap(1.2), turns[1], gap(1.2), turns[2], gap(1.0)])
    return write_wav(tmp_path_factory.mktemp("talk") / "talk.wav", audio)


def play(pulse, wav: Path, sink: str) -> subprocess.Popen:
    return pulse.play(wav, sink)


def open_panel(qtbot, source: str, **devices: str) -> LivePanel:
    """The live page of a new app, with ``source`` and its devices (kind=name) picked."""
    panel = LivePanel(AppContext())
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitUntil(lambda: panel.devices_known, timeout=20_000)
    panel.set_source(source)
    for kind, name in devices.items():
        assert panel.select_device(kind, name), f"no {kind} device {name!r}"
    return panel


def recorded(panel: LivePanel):
    """Samples the panel's live session has recorded (for `pulse.Played`)."""
    session = panel.session
    assert session is not None, "no live session"
    return lambda: session.recording.samples


def side_words(reference: dict[str, str], heard: dict[str, str]) -> dict[str, dict[str, float]]:
    """Word by word: for each side of ``reference`` (side -> what it said), the share of its
    own words (those the other sides do not say) found in each label's text of ``heard``
    (label -> what was labelled so), as normalized words."""
    words = {side: set(normalize(text).split()) for side, text in reference.items()}
    own = {
        side: w - set().union(*(v for other, v in words.items() if other != side))
        for side, w in words.items()
    }
    said = {label: set(normalize(text).split()) for label, text in heard.items()}
    return {
        side: {label: len(w & got) / len(w) for label, got in said.items()}
        for side, w in own.items()
    }


def test_live_window_shows_committed_text_from_system_audio(
    qtbot,
    app_env,  # noqa: F811
    tiny_fp32,
    pulse,
    talk,
):
    install_test_model(app_env, tiny_fp32)
    pulse.add_null_sink("gui_speakers")
    ctx = AppContext()
    panel = LivePanel(ctx)
    qtbot.addWidget(panel)
    panel.resize(900, 600)
    panel.show()
    qtbot.waitUntil(lambda: panel.devices_known, timeout=20_000)
    panel.set_source("system")
    assert panel.select_device("system", "gui_speakers.monitor")
    assert panel.picker.sys_combo.isVisible() and not panel.picker.mic_combo.isVisible()

    # The app loads the default model at start-up, before anything is transcribed.
    preload = ctx.preload()
    qtbot.waitUntil(lambda: preload.finished, timeout=60_000)
    lag = UiLag(lambda: f"live {panel.state}, {panel.model.rowCount()} lines")
    lag.start()
    qtbot.mouseClick(panel.start_btn, Qt.MouseButton.LeftButton)  # the model loads on a worker
    qtbot.waitUntil(lambda: panel.state == "recording", timeout=60_000)
    assert panel.start_btn.text() == "Stop"
    assert "tiny.en-fp32 on CPU" in panel.engine.text()
    played = pulse.play_recorded(talk, "gui_speakers", recorded(panel))
    # Committed lines appear while the audio plays; the growing line shows tentative words.
    qtbot.waitUntil(lambda: (panel.model.rowCount() >= 2 and panel.model.open_id is not None)
                    or panel.model.rowCount() >= 3, timeout=60_000)  # fmt: skip
    first = panel.model.segments[0]
    assert "morning" in normalize(first.text)
    assert panel.picker.sys_meter.active
    assert panel.elapsed.text() != "0:00"

    # Correct a finished line while recording goes on.
    index = panel.model.index(0)
    assert panel.model.flags(index) & Qt.ItemFlag.ItemIsEditable
    panel.model.setData(index, "Good morning, everybody.")

    # Until all of it is recorded (see pulse.Played); never block the loop.
    qtbot.waitUntil(played.heard, timeout=120_000)
    assert played.proc.returncode == 0
    # The health figures the session measured: compact next to the model, in detail on demand.
    details = panel.health
    qtbot.waitUntil(lambda: details.health is not None and details.health.decodes > 0,
                    timeout=10_000)  # fmt: skip
    assert "keeping up" in panel.engine.text() or "s behind" in panel.engine.text()
    assert not details.isVisible() and details.button.isEnabled()
    qtbot.mouseClick(details.button, Qt.MouseButton.LeftButton)
    assert details.isVisible()
    shown = details.text()
    assert "Decode time P50 / P95 / P99" in shown and "Lost input" in shown, shown
    assert f"({details.health.decodes} passes)" in shown
    assert 0 < details.health.decodes <= panel.session.transcriber.decode_count
    # The session transcribes in this process: its CPU share is not nothing, and it is shown.
    assert details.health.cpu_peak_percent > 0 and details.health.cpu_avg_percent > 0
    assert f"{details.health.cpu_peak_percent:.0f} % peak" in details.text()
    if details.health.warnings:  # a budget broken (a busy machine): said in red
        assert "c01c28" in panel.engine.styleSheet() and "Over budget" in shown
    # Pause: nothing is recorded while paused (the devices deliver 1.5 s meanwhile, all of it
    # dropped); resume goes on.
    session = panel.session
    qtbot.mouseClick(panel.pause_btn, Qt.MouseButton.LeftButton)
    assert panel.state == "paused" and panel.pause_btn.text() == "Resume"
    read_at_pause = session.recording.capture.position
    # Once the devices are read again, a read from before the pause has been recorded or not.
    qtbot.waitUntil(lambda: session.recording.capture.position > read_at_pause, timeout=30_000)
    kept = session.recording.samples
    # The clock shows what was recorded: it reaches the recorded length at its next tick and
    # stays there. (Read before that tick, it could show 0:19 and then 0:20 for a block read
    # before the pause and recorded just after the click: a race in the test, not a clock
    # that runs while paused.)
    paused_at = clock(kept / SR)
    qtbot.waitUntil(lambda: panel.elapsed.text() == paused_at, timeout=10_000)
    qtbot.waitUntil(lambda: session.recording.capture.position > read_at_pause + 1.5 * SR,
                    timeout=30_000)  # fmt: skip
    assert session.recording.samples == kept
    assert panel.elapsed.text() == paused_at
    qtbot.mouseClick(panel.pause_btn, Qt.MouseButton.LeftButton)
    assert panel.state == "recording"

    with qtbot.waitSignal(panel.saved, timeout=120_000) as saved:
        qtbot.mouseClick(panel.start_btn, Qt.MouseButton.LeftButton)  # Stop
    worst = lag.stop()
    assert panel.state == "stopped"
    item = ctx.library.get(saved.args[0])
    assert item.kind == "live"
    text = normalize(ctx.library.load_transcript(item.id).text)
    assert text.startswith("good morning everybody"), text  # the correction was kept
    assert "thursday" in text.split()[-3:], text  # the last words, committed at Stop
    assert read_track(Path(item.source), "system").shape[0] > 8 * SR
    assert panel.open_btn.isEnabled()
    with qtbot.waitSignal(ctx.open_transcript, timeout=5_000) as opened:
        qtbot.mouseClick(panel.open_btn, Qt.MouseButton.LeftButton)
    assert opened.args == [item.id]
    # The responsiveness bound: the UI thread never stalled while transcribing live.
    lag.check()
    print(f"UI lag: worst {worst:.0f} ms (largest raw gap {lag.worst_raw_ms:.0f} ms)")


@pytest.fixture(scope="module")
def two_voices(speech_dir):
    """Two voices the speaker model tells apart (conversations.VOICES A and B), a turn each."""
    return build("gui-two", speech_dir / "conversations", script=[SCRIPT_2[0], SCRIPT_2[7]])


def test_live_window_labels_voices_when_a_speaker_model_is_installed(
    qtbot,
    app_env,  # noqa: F811
    tiny_fp32,
    speaker_model,
    pulse,
    two_voices,
):
    """With a speaker model installed the live window labels speakers as they speak (before,
    only the tests gave the live session a speaker model; the app never did): two voices, two
    labels, each voice's words under its own (one label for everything would fail)."""
    install_test_model(app_env, tiny_fp32)
    (app_env.store / "speaker-resemblyzer").symlink_to(speaker_model, target_is_directory=True)
    pulse.add_null_sink("gui_voices")
    panel = open_panel(qtbot, "system", system="gui_voices.monitor")
    qtbot.mouseClick(panel.start_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.state == "recording", timeout=60_000)
    assert panel.session is not None and panel.session.labeller.active
    live: dict[int, tuple[str, str]] = {}  # segment id -> (label, text), as given live

    def note(*_) -> None:
        if panel.state != "stopped":  # Stopped sets the state before it shows the final labels
            live.update({s.id: (s.speaker, s.text) for s in panel.model.segments})

    panel.model.rowsInserted.connect(note)
    panel.model.dataChanged.connect(note)
    played = pulse.play_recorded(two_voices.path, "gui_voices", recorded(panel))
    qtbot.waitUntil(played.heard, timeout=120_000)
    qtbot.mouseClick(panel.start_btn, Qt.MouseButton.LeftButton)  # Stop
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=60_000)
    final = [(s.speaker, s.text) for s in panel.model.segments]
    assert final and all(who for who, _ in final), final
    reference = two_voices.text_by_speaker()
    live_found = side_words(reference, by_label(live.values()))
    found = side_words(reference, by_label(final))
    print(f"two voices, words by label: live {live_found}; after Stop {found}")
    # Live: each voice's words under a label of its own.
    two_labels_apart(live_found, list(live.values()))
    two_labels_apart(found, final)


def by_label(said) -> dict[str, str]:
    """(label, text) pairs -> label -> all its text."""
    heard: dict[str, str] = {}
    for who, text in said:
        heard[who] = heard.get(who, "") + " " + text
    return heard


def two_labels_apart(found: dict[str, dict[str, float]], said) -> None:
    """Voices A and B (`side_words` of their labels' text): two labels, each voice's own words
    mostly under its label and few under the other's. A labeller that gives everyone the same
    label fails this; one that splits a voice in two does too. Measured on `two_voices` live:
    A 0.93 under its label, B 0.8-1.0 (tiny.en's hearing), 0.0 under the other label."""
    assert len(found["A"]) == 2, said  # two voices, two labels
    a, b = (max(found[v], key=found[v].get) for v in ("A", "B"))
    assert a != b, (found, said)
    assert found["A"][a] >= 0.7 and found["B"][b] >= 0.7, (found, said)
    assert found["A"][b] <= 0.15 and found["B"][a] <= 0.15, (found, said)


def test_a_broken_speaker_model_is_reported_and_live_runs_without_labels(
    qtbot,
    app_env,  # noqa: F811
    tiny_fp32,
    speaker_model,
    pulse,
):
    """An installed speaker model whose ONNX file was cut short (a full disk, a crash during
    the copy): the session starts and records unlabelled, and the window says why and where
    to fix it. Before, the labels were quietly off; "Remember this voice" said no model was
    installed."""
    install_test_model(app_env, tiny_fp32)
    broken = app_env.store / "speaker-resemblyzer"
    shutil.copytree(speaker_model, broken)
    onnx_file = broken / "encoder.onnx"
    onnx_file.write_bytes(onnx_file.read_bytes()[:1000])
    pulse.add_null_sink("gui_broken_voices")
    panel = open_panel(qtbot, "system", system="gui_broken_voices.monitor")
    qtbot.mouseClick(panel.start_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.state == "recording", timeout=60_000)
    assert panel.session is not None and not panel.session.labeller.active
    qtbot.waitUntil(lambda: panel.banner.isVisible(), timeout=10_000)
    said = panel.banner.text.text()
    assert panel.banner.kind == "warning" and "without speaker labels" in said, said
    assert str(onnx_file) in said and "--overwrite" in said, said
    with qtbot.waitSignal(panel.wants_models, timeout=5_000):
        qtbot.mouseClick(panel.banner.action, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(panel.start_btn, Qt.MouseButton.LeftButton)  # Stop
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=60_000)

    from deskscribe.gui.speakers_panel import _remember
    from deskscribe.speakers.profiles import ProfileError

    with pytest.raises(ProfileError, match="not a usable speaker model"):
        _remember(panel.ctx, panel.final, "A", "Ann")


def test_no_model_says_how_to_get_one(qtbot, app_env, pulse):  # noqa: F811
    pulse.add_null_sink("gui_nomodel")
    panel = open_panel(qtbot, "system", system="gui_nomodel.monitor")
    with qtbot.waitSignal(panel.wants_models, timeout=30_000):
        panel.start()
        qtbot.waitUntil(lambda: panel.banner.isVisible(), timeout=30_000)
        assert "No transcription model" in panel.banner.text.text()
        qtbot.mouseClick(panel.banner.action, Qt.MouseButton.LeftButton)
    assert panel.state == "idle" and panel.start_btn.text() == "Start"


def _session_text(data: Path) -> str:
    for f in data.glob("sessions/*/transcript.json"):
        try:
            saved = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        return " ".join(s["text"] for s in saved.get("segments", []))
    return ""


def test_app_killed_mid_session_is_restored_on_next_start(
    qtbot,
    app_env,  # noqa: F811
    tiny_fp32,
    pulse,
    talk,
):
    install_test_model(app_env, tiny_fp32)
    pulse.add_null_sink("gui_crash")
    env = {**os.environ, **app_env.env(), "QT_QPA_PLATFORM": "offscreen"}
    # The real window, recording the sink's monitor as system audio (tests/drivers/).
    app = subprocess.Popen([sys.executable, str(RECORD_SYSTEM_AUDIO), "gui_crash.monitor"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        # Play once the recorder writes samples, not when the session folder appears: under
        # load the stream can open a second later, and the first sentence would be cut off
        # (one CI run lost "good morning everyone" so).
        while not (found := list_sessions(app_env.data / "sessions")) or found[0].duration_s < 0.2:
            assert app.poll() is None, app.stderr.read().decode()
            assert time.monotonic() < deadline, "the app did not start recording"
            time.sleep(0.1)
        player = play(pulse, talk, "gui_crash")
        # Kill it once the first sentences are autosaved, while the speech goes on.
        while "planning" not in normalize(_session_text(app_env.data)):
            assert app.poll() is None, app.stderr.read().decode()
            assert time.monotonic() < deadline + 60, "no autosaved text"
            time.sleep(0.1)
        app.send_signal(signal.SIGKILL)
        app.wait(timeout=10)
        player.wait(timeout=60)
    finally:
        if app.poll() is None:
            app.kill()
    interrupted = find_interrupted()
    assert len(interrupted) == 1
    recorded = interrupted[0].duration_s
    # A file was also waiting in the queue when the app died.
    ctx = AppContext()
    waiting = ctx.library.add_file(talk, job_options("tiny.en-fp32", None, "off"))

    window = MainWindow(ctx)
    qtbot.addWidget(window)
    window.show()
    window.start_up()
    qtbot.waitUntil(lambda: getattr(window, "recovery_dialog", None) is not None, timeout=20_000)
    dialog: RecoveryDialog = window.recovery_dialog
    assert dialog.isVisible()
    assert dialog.list.count() == 2
    assert "recorded" in dialog.list.item(0).text()
    assert "talk.wav" in dialog.list.item(1).text()
    with qtbot.waitSignal(window.ctx.open_transcript, timeout=60_000) as opened:
        qtbot.mouseClick(dialog.restore_btn, Qt.MouseButton.LeftButton)
    item = window.ctx.library.get(opened.args[0])
    text = normalize(window.ctx.library.load_transcript(item.id).text)
    assert "good morning everyone" in text and "planning" in text, text
    # Every recorded sample is back, and the session is no longer "interrupted".
    assert read_track(Path(item.source), "system").shape[0] >= int(recorded * SR) - SR // 10
    assert find_interrupted() == []
    assert window.stack.currentWidget() is window.transcript_view
    # The waiting file went back into the queue and is transcribed.
    qtbot.waitUntil(lambda: window.ctx.library.get(waiting).status == "done", timeout=120_000)
    assert "planning" in normalize(window.ctx.library.load_transcript(waiting).text)
    # Nothing is offered again at the next start.
    again = MainWindow(AppContext())
    qtbot.addWidget(again)
    with qtbot.waitSignal(again.start_up_done, timeout=20_000):
        again.start_up()
    assert getattr(again, "recovery_dialog", None) is None


def test_transcript_follows_live_until_the_user_scrolls_up(qtbot):
    from deskscribe.gui.live_transcript import LiveTranscriptModel, LiveTranscriptView
    from deskscribe.transcript import Segment, Word

    model = LiveTranscriptModel()
    view = LiveTranscriptView(model)
    qtbot.addWidget(view)
    view.resize(500, 200)
    view.show()
    bar = view.verticalScrollBar()

    def say(i: int) -> None:
        seg = Segment(start=i * 2.0, end=i * 2.0 + 1.5, text=f" Sentence number {i} of the talk.",
                      id=i, speaker="Others" if i % 2 else "You")  # fmt: skip
        model.apply([seg], [Word(i * 2.0 + 1.6, i * 2.0 + 1.9, " and")], i)
        # The view has laid the line out (asking where it is lays the view out).
        qtbot.waitUntil(lambda: view.visualRect(model.index(i)).isValid(), timeout=5_000)

    for i in range(30):
        say(i)
    assert bar.maximum() > 0 and bar.value() == bar.maximum()  # following the live end
    assert model.data(model.index(29), Qt.ItemDataRole.DisplayRole).endswith("talk.")
    assert model.tentative == "and"
    assert not model.flags(model.index(29)) & Qt.ItemFlag.ItemIsEditable  # still growing
    assert model.flags(model.index(28)) & Qt.ItemFlag.ItemIsEditable

    # A corrected line keeps the correction whatever the engine sends later.
    assert model.setData(model.index(3), "Sentence number three, corrected.")
    say(3)
    assert (
        model.data(model.index(3), Qt.ItemDataRole.DisplayRole)
        == "Sentence number three, corrected."
    )

    bar.setValue(0)  # the user scrolls up to read
    assert not view.follow and view.jump.isVisible()
    for i in range(30, 35):
        say(i)
    assert bar.value() == 0, "new lines must not pull the view away from what the user reads"
    qtbot.mouseClick(view.jump, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=5_000)
    assert view.follow and not view.jump.isVisible()


def test_quitting_while_recording_saves_the_session_first(
    qtbot,
    app_env,  # noqa: F811
    tiny_fp32,
    pulse,
    monkeypatch,
):
    from PySide6.QtWidgets import QMessageBox

    install_test_model(app_env, tiny_fp32)
    pulse.add_null_sink("gui_quit")
    window = MainWindow(AppContext())
    qtbot.addWidget(window)
    window.show()
    live = window.live_panel
    qtbot.waitUntil(lambda: live.devices_known, timeout=20_000)
    live.set_source("system")
    assert live.select_device("system", "gui_quit.monitor")
    live.start()
    qtbot.waitUntil(lambda: live.state == "recording", timeout=60_000)
    qtbot.waitUntil(lambda: live.elapsed.text() >= "0:02", timeout=30_000)
    asked = []

    def question(*args, **kwargs):
        asked.append(args[2])
        return QMessageBox.StandardButton.Yes

    monkeypatch.setattr(QMessageBox, "question", question)
    window.close()
    assert "still recording" in asked[0]
    assert window.isVisible(), "the window waits for the session to be saved"
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=60_000)
    [item] = window.ctx.library.search(kind="live")
    assert read_track(Path(item.source), "system").shape[0] >= 2 * SR
    assert find_interrupted() == []


def test_meeting_mode_window_meters_both_sources_and_labels_you_and_others(
    qtbot,
    app_env,  # noqa: F811
    tiny_fp32,
    pulse,
    speech_dir,
    tmp_path,
):
    """Microphone and system audio at once, picked from the device menus: both meters move,
    and each side's words come out as "You" or "Others"."""
    install_test_model(app_env, tiny_fp32)
    room = pulse.add_microphone("gui_desk_mic")  # what is played into `room` the mic hears
    pulse.add_null_sink("gui_call")
    panel = open_panel(qtbot, "both", mic="gui_desk_mic", system="gui_call.monitor")
    assert panel.picker.mic_combo.isVisible() and panel.picker.sys_combo.isVisible()
    qtbot.mouseClick(panel.start_btn, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.state == "recording", timeout=60_000)
    you, others = TURNS[0], TURNS[1]
    mine = load(espeak(you, speech_dir / "turn0.wav"))
    theirs = load(espeak(others, speech_dir / "turn1.wav"))
    # Turns one after the other, as in a call: me, then them.
    me = write_wav(tmp_path / "me.wav", np.concatenate([gap(0.3), mine, gap(len(theirs) / SR + 2)]))
    them = write_wav(
        tmp_path / "them.wav", np.concatenate([gap(0.3 + len(mine) / SR + 1.0), theirs, gap(1.0)])
    )
    players = [
        pulse.play_recorded(me, room, recorded(panel)),
        pulse.play_recorded(them, "gui_call", recorded(panel)),
    ]
    qtbot.waitUntil(lambda: all(p.heard() for p in players), timeout=120_000)
    assert panel.picker.mic_meter.active and panel.picker.sys_meter.active
    qtbot.mouseClick(panel.start_btn, Qt.MouseButton.LeftButton)  # Stop
    qtbot.waitUntil(lambda: panel.state == "stopped", timeout=60_000)
    said = {"You": "", "Others": ""}
    for seg in panel.model.segments:
        said[seg.speaker] += " " + seg.text
    # Word by word: each side's own words (those the other side does not say) found in the
    # text labelled with that side's label, and in the other's. Measured: You 1.0 and 0.0,
    # Others 0.9 and 0.0 (tiny.en hears "builds" as "bill" every time). The bounds leave room
    # for tiny.en's hearing (test_live's meeting-mode test measures it; under CI load it once
    # heard "The release is on track" as "For release you soon. Bye bye.", every word on the
    # right side) but not for words on the wrong side: one stray word of 9-10 at most.
    found = side_words({"You": you, "Others": others}, said)
    print(f"meeting mode, words by label: {found}")
    assert found["You"]["You"] >= 0.7 and found["Others"]["Others"] >= 0.7, (found, said)
    assert found["You"]["Others"] <= 0.15 and found["Others"]["You"] <= 0.15, (found, said)
