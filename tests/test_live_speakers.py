"""Speaker labels in live sessions, through real capture (PulseAudio null sink) and the real
speaker encoder (resemblyzer's weights, converted to ONNX) and tiny.en."""

from __future__ import annotations

import time

import pytest

from conversations import build, clip_offset
from deskscribe.audio.devices import find_device
from deskscribe.audio.sessions import read_track
from deskscribe.live import LiveOptions, LiveSession, Started, Stopped, TextUpdate
from deskscribe.speakers.encoder import SpeakerEncoder
from deskscribe.speakers.metrics import der, word_accuracy

SR = 16000


def next_event(session: LiveSession, kind: type, timeout: float, seen: list | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            event = session.events.get(timeout=0.5)
        except Exception:
            continue
        if seen is not None:
            seen.append(event)
        if isinstance(event, kind):
            return event
    raise AssertionError(f"no {kind.__name__} within {timeout} s")


def scores(conv, segments, offset: float) -> tuple[float, float, set]:
    words = [(w.start - offset, w.end - offset, w.speaker) for s in segments for w in s.words]
    turns = [(s.start - offset, s.end - offset, s.speaker) for s in segments]
    return word_accuracy(conv.turns, words), der(conv.turns, turns).error, {w[2] for w in words}


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))


def test_three_voices_get_three_stable_labels_live(
    pulse, tiny_model, speaker_model, speech_dir, data_dir
):
    conv = build("three", speech_dir / "conversations")
    monitor = pulse.add_null_sink("live_three")
    session = LiveSession(
        tiny_model,
        LiveOptions(source="system", system=find_device("system", monitor)),
        speaker_encoder=SpeakerEncoder(speaker_model),
    )
    session.start()
    next_event(session, Started, 30)
    player = pulse.play(conv.path, "live_three")
    assert player.wait(timeout=300) == 0
    time.sleep(1.5)
    session.stop()
    events: list = []
    stopped = next_event(session, Stopped, 180, events)

    offset = clip_offset(read_track(stopped.folder, "system"), conv.audio)
    # Labels as committed live (the last version of each segment the window was sent) ...
    live = {s.id: s for e in events if isinstance(e, TextUpdate) for s in e.segments}
    live_accuracy, live_der, live_labels = scores(conv, list(live.values()), offset)
    # ... and after the offline pass over the whole session at Stop.
    accuracy, final_der, labels = scores(conv, stopped.transcript.segments, offset)
    print(
        f"live 3 voices: committed live: word accuracy {live_accuracy:.3f}, DER {live_der:.3f}, "
        f"{len(live_labels)} labels; after Stop: {accuracy:.3f}, DER {final_der:.3f}, {len(labels)}"
    )
    # Live labels are given once, when words are committed, from a few seconds of speech;
    # on a busy machine the commit timing changes the runs, and one short run sometimes
    # starts a fourth label (measured: 3 or 4 labels, word accuracy 0.945-0.97).
    assert 3 <= len(live_labels) <= 4, live_labels
    assert live_accuracy >= 0.85, live_accuracy
    assert live_der <= 0.25, live_der
    # The pass at Stop sees the whole session: as good as the offline file path.
    assert len(labels) == 3, labels
    assert accuracy >= 0.93, accuracy
    assert final_der <= 0.10, final_der
