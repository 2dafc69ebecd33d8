"""Speaker labels in live sessions, through real capture (PulseAudio null sink) and the real
speaker encoder (resemblyzer's weights, converted to ONNX) and tiny.en."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import replace

import numpy as np
import pytest

from conftest import EVAL, espeak, load, wer
from conversations import build, clip_offset, commit_batches, read_rttm, write_wav
from deskscribe.audio.devices import find_device
from deskscribe.audio.recorder import SessionRecorder
from deskscribe.audio.sessions import read_track
from deskscribe.service.live import (
    Adapted,
    LiveOptions,
    LiveSession,
    Relabelled,
    Started,
    Stopped,
    TextUpdate,
)
from deskscribe.service.live.refine import refine_speakers
from deskscribe.service.live.store import TranscriptStore
from deskscribe.speakers.diarize import diarize
from deskscribe.speakers.encoder import SpeakerEncoder
from deskscribe.speakers.growing import GrowingTrack, live_options
from deskscribe.speakers.online import LiveSpeakerLabeller
from deskscribe.speakers.profiles import save_profile
from deskscribe.transcript import Segment, Transcript, Word
from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_file
from live_replay import BATCHINGS, replay_labels
from speaker_metrics import der, word_accuracy

SR = 16000
TURN = "Good morning everyone. Thank you for joining the weekly planning meeting."


def gap(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SR), dtype=np.float32)


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


def scores(conv, segments, offset: float) -> tuple[float, object, set]:
    """(word accuracy, DER of the segment spans, labels). The DER's missed speech and false
    alarm measure the transcript's segment spans (a sentence the live recogniser dropped is
    missed speech); its confusion is the speaker labels' own error."""
    words = [(w.start - offset, w.end - offset, w.speaker) for s in segments for w in s.words]
    turns = [(s.start - offset, s.end - offset, s.speaker) for s in segments]
    return word_accuracy(conv.turns, words), der(conv.turns, turns), {w[2] for w in words}


def parts(d) -> str:
    return (
        f"DER {d.error:.3f} (missed {d.rate('missed'):.3f}, false alarm "
        f"{d.rate('false_alarm'):.3f}, confusion {d.rate('confusion'):.3f})"
    )


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path / "data"))


def test_three_voices_get_three_stable_labels_live(
    pulse, tiny_model, speaker_model, speech_dir, data_dir
):
    conv = build("three", speech_dir / "conversations")
    # Voice A saved as a profile from another meeting: the pass at Stop names that voice.
    other = build("two", speech_dir / "conversations")
    encoder = SpeakerEncoder(speaker_model)
    found = diarize(other.audio, encoder)
    a_id = {v: k for k, v in der(other.turns, found.turns).mapping.items()}["A"]
    save_profile("Alice", found.centroids[a_id], model=encoder.name)
    monitor = pulse.add_null_sink("live_three")
    session = LiveSession(
        tiny_model,
        LiveOptions(source="system", system=find_device("system", monitor)),
        speaker_encoder=encoder,
    )
    session.start()
    next_event(session, Started, 30)
    # Stop once every sample played is recorded (see pulse.Played).
    played = pulse.play_recorded(conv.path, "live_three", lambda: session.recording.samples)
    played.wait(timeout=300)
    session.stop()
    events: list = []
    stopped = next_event(session, Stopped, 180, events)

    offset = clip_offset(read_track(stopped.folder, "system"), conv.audio)
    # Labels as committed live (the last version of each segment in a text update) ...
    committed = {}
    for e in events:
        if isinstance(e, TextUpdate):
            committed.update({s.id: s for s in e.segments})
    live_accuracy, live_der, live_labels = scores(conv, list(committed.values()), offset)
    # ... as the window showed them before Stop (revisions included) ...
    shown_accuracy, shown_der, shown_labels = scores(
        conv, list(shown_live(events).values()), offset
    )
    # ... and after the offline pass over the whole session at Stop.
    accuracy, final_der, labels = scores(conv, stopped.transcript.segments, offset)
    print(
        f"live 3 voices: committed: word accuracy {live_accuracy:.3f}, {parts(live_der)}, "
        f"{len(live_labels)} labels; shown before Stop: {shown_accuracy:.3f}, "
        f"{parts(shown_der)}, {len(shown_labels)}; after Stop: {accuracy:.3f}, "
        f"{parts(final_der)}, {len(labels)} (pass at Stop ran: {session.refined}); "
        f"adaptations {[e.level for e in events if isinstance(e, Adapted)]}"
    )
    # What the window shows before Stop: commit-time labels, revised by the offline pass
    # over the recording so far every few seconds.
    assert 3 <= len(shown_labels) <= 4, shown_labels
    assert shown_accuracy >= 0.9, shown_accuracy
    # Labels given at commit time alone (printed, not bounded here): from a few seconds of
    # speech, between revisions whose centroids the labeller takes, they vary with the
    # commit timing: 0.92-0.99 here, 0.842 and 0.699 (4 labels) in two CI runs, while the
    # window showed 0.98-0.99 in all of them. Before the revisions fed their centroids back:
    # 0.994-1.0. The labeller alone is bounded on replayed commit batches
    # (test_committed_batches_get_the_right_live_labels).
    assert 3 <= len(live_labels) <= 4, live_labels
    # The pass at Stop sees the whole session: as good as the offline file path. It started
    # from what the revisions computed (their VAD state and embeddings).
    assert session.refined
    growing = session.reviser.growing
    assert growing.seen == read_track(stopped.folder, "system").shape[0]
    assert growing.encoder.reused > 0
    assert len(labels) == 3, labels
    assert accuracy >= 0.93, accuracy
    assert final_der.rate("confusion") <= 0.05, parts(final_der)
    # Segment spans against the turns: missed speech here is the recogniser's (one CI run
    # measured 0.159 with every word's speaker right; 0.04-0.07 otherwise).
    assert final_der.error <= 0.25, parts(final_der)
    names = stopped.transcript.speakers
    a_turn = next(t for t in conv.turns if t[2] == "A")
    a_label = next(
        s.speaker
        for s in stopped.transcript.segments
        if s.start - offset < a_turn[1] and s.end - offset > a_turn[0]
    )
    assert names[a_label] == "Alice", names
    assert all(n.startswith("Speaker ") for k, n in names.items() if k != a_label), names


@pytest.mark.parametrize("name", ["two", "three", "four"])
def test_committed_batches_get_the_right_live_labels(name, tiny_model, speaker_model, speech_dir):
    """The live labeller, fed the real words (tiny.en, word timestamps) of a conversation in
    the batches a live session commits, with the audio heard so far (up to 1 s past the
    batch). Two faults this catches: one commit holding two turns got one embedding of two
    voices (word accuracy down to 0.64 on region batches), and commits of a word or two could
    never start a speaker, so a new voice took the last one's label (down to 0.59)."""
    conv = build(name, speech_dir / "conversations")
    transcript = transcribe_file(
        tiny_model, conv.path, TranscribeOptions(language="en", word_timestamps=True)
    )
    words = [(w.start, w.end, w.text) for s in transcript.segments for w in s.words]
    encoder = SpeakerEncoder(speaker_model)
    for how, seed in [("regions", 0), ("prefixes", 1), ("words", 1), ("words", 2)]:
        labeller = LiveSpeakerLabeller(["system"], encoder)
        fed, labelled = 0, []
        batches = commit_batches(
            [Word(text=t, start=a, end=b, probability=1.0) for a, b, t in words], how, seed
        )
        for batch in batches:
            heard = min(len(conv.audio), int((batch[-1].end + 1.0) * SR))
            if heard > fed:
                labeller.add_audio({"system": conv.audio[fed:heard]})
                fed = heard
            labeller.label(batch)
            labelled += batch
        accuracy = word_accuracy(conv.turns, [(w.start, w.end, w.speaker) for w in labelled])
        count = len({w.speaker for w in labelled})
        print(f"{name} {how} {seed}: word accuracy {accuracy:.3f}, {count} labels")
        # Measured on 9 conversations x 7 batchings: mean 0.996, lowest 0.964; a fifth of
        # the runs have one extra label from a short run.
        assert accuracy >= 0.9, (how, seed, accuracy)
        assert len(conv.speakers) <= count <= len(conv.speakers) + 1, (how, seed, count)


def test_a_broken_profile_file_at_stop_still_stops_with_the_text(
    pulse, tiny_model, speaker_model, speech_dir, data_dir, tmp_path
):
    """The pass at Stop reads the voice profiles; a file that is not UTF-8 used to escape it,
    so Stopped never came and the window could not close. Now: Stopped, the text kept, and
    the file left as it was."""
    from deskscribe.speakers.profiles import profiles_path

    broken = b"\xff\xfe\x80 not a profile file"
    profiles_path().parent.mkdir(parents=True, exist_ok=True)
    profiles_path().write_bytes(broken)
    # Its first 12 s (a few turns of both voices) are enough: the pass at Stop runs on them.
    conv = build("two", speech_dir / "conversations")
    clip = write_wav(tmp_path / "first-turns.wav", conv.audio[: 12 * 16000])
    monitor = pulse.add_null_sink("live_broken_profiles")
    session = LiveSession(
        tiny_model,
        LiveOptions(source="system", system=find_device("system", monitor)),
        speaker_encoder=SpeakerEncoder(speaker_model),
    )
    session.start()
    next_event(session, Started, 30)
    # Stop once every sample played is recorded (see pulse.Played).
    played = pulse.play_recorded(clip, "live_broken_profiles", lambda: session.recording.samples)
    played.wait(timeout=300)
    session.stop()
    stopped = next_event(session, Stopped, 180)
    words = " ".join(s.text for s in stopped.transcript.segments).split()
    assert len(words) >= 10, stopped.transcript.segments
    assert (stopped.folder / "transcript.json").is_file()
    assert profiles_path().read_bytes() == broken


@pytest.fixture(scope="module")
def call_words(tiny_model):
    """The real call's segments with word timestamps (tiny.en, the file path), the live
    transcript a session would have committed for it."""
    transcript = transcribe_file(
        tiny_model, EVAL / "two-speakers.wav", TranscribeOptions(word_timestamps=True)
    )
    return transcript.segments


def test_revisions_lift_the_real_calls_live_labels_in_every_commit_batching(
    call_words, speaker_model
):
    """The real call's words (tiny.en) fed to the live labeller in four batchings a live
    session commits, with the label revisions at the session's pace (``live_replay``: the
    real labeller, encoder, revision pass and store; no sound device, so every run is the
    same). Labelled at commit alone, the two phone voices are one label in most batchings
    (word accuracy 0.535-0.577 in bench/speakers.py --live-replay); the revisions are what
    makes them two. Measured here: 0.873-0.958 at the end and 0.874-0.958 while recording
    (the shown labels after each batch, averaged); the bound 0.83 leaves three of the 71
    words for word timings that differ on another CPU."""
    encoder = SpeakerEncoder(speaker_model)
    audio = load(EVAL / "two-speakers.wav")
    turns = read_rttm(EVAL / "two-speakers.rttm")
    words = [(w.start, w.end, w.text) for s in call_words for w in s.words]
    for how, seed in BATCHINGS:
        alone = replay_labels(encoder, audio, turns, words, how, seed, revise=False)
        revised = replay_labels(encoder, audio, turns, words, how, seed, revise=True)
        print(f"call {how} {seed}: at commit alone {alone.at_commit:.3f} ({alone.labels} "
              f"labels); revised: {revised}")  # fmt: skip
        assert revised.passes >= 1, revised
        assert revised.labels == 2, revised
        assert revised.at_end >= 0.83, (how, seed, revised)
        assert revised.while_recording >= 0.83, (how, seed, revised)
        assert revised.while_recording >= alone.at_commit + 0.2, (how, seed, alone, revised)
        # Between revisions the labeller labels new words with the voices the last revision
        # found (it adopts their centroids): 0.79-0.85 at commit where revisions ran while
        # recording. Without that, the shown labels still pass the bounds above (0.832)
        # while each new line comes out with the wrong label until the next revision:
        # 0.54-0.58 at commit. ("regions" commits in few large batches: one pass, at the
        # end, so nothing to adopt before the last commit: 0.577 either way.)
        if revised.passes >= 3:
            assert revised.at_commit >= 0.7, (how, seed, revised)


def shifted(segments, by: float, first_id: int) -> list[Segment]:
    out = []
    for i, s in enumerate(segments):
        words = [replace(w, start=w.start + by, end=w.end + by, speaker="S1") for w in s.words]
        out.append(replace(s, start=s.start + by, end=s.end + by, words=words, speaker="S1",
                           id=first_id + i))  # fmt: skip
    return out


def test_a_session_over_20_minutes_is_refined_at_stop_within_its_budget(
    call_words, speaker_model, data_dir
):
    # 21 minutes: the real call, 20 minutes of silence, the call again (its voices come
    # back after a long gap). Live, every word had one label ("S1"). Sessions over 20
    # minutes used to keep their live labels; now the pass at Stop runs, bounded in time.
    call = load(EVAL / "two-speakers.wav")
    later = call.shape[0] / SR + 20 * 60
    audio = np.concatenate([call, np.zeros(20 * 60 * SR, np.float32), call])
    recorder = SessionRecorder(None, ["system"])
    for i in range(0, audio.shape[0], 60 * SR):
        recorder.write("system", audio[i : i + 60 * SR])
    recorder.close()
    store = TranscriptStore()
    first = shifted(call_words, 0.0, 0)
    store.replace(Transcript(segments=first + shifted(call_words, later, len(first))))

    def snapshot():
        return store.snapshot(language="en", duration=audio.shape[0] / SR, source=None, model="t")

    encoder = SpeakerEncoder(speaker_model)
    args = (store, snapshot, encoder, recorder.folder, ["system"], audio.shape[0])
    # A pass that cannot finish within its budget is given up: the live labels stay.
    live = live_options()  # as a session passes them (LiveSession.diarize_options)
    assert not refine_speakers(*args, budget=0.01, options=live)
    assert {w.speaker for s in snapshot().segments for w in s.words} == {"S1"}
    assert refine_speakers(*args, options=live)
    refined = snapshot().segments
    reference = read_rttm(EVAL / "two-speakers.rttm")
    # Measured: 2 labels on each copy, word accuracy 0.972 on both.
    for at in (0.0, later):
        words = [(w.start - at, w.end - at, w.speaker) for s in refined for w in s.words
                 if at <= w.start < at + 31]  # fmt: skip
        labels = {w[2] for w in words}
        print(f"call at {at:.0f} s of a 21-minute session: {len(labels)} labels, word accuracy "
              f"{word_accuracy(reference, words):.3f}")  # fmt: skip
        assert len(labels) == 2, labels
        assert word_accuracy(reference, words) >= 0.85, (at, word_accuracy(reference, words))
    # The same two voices after 20 minutes: the same two labels.
    assert {w.speaker for s in refined for w in s.words if w.start < 31} == {
        w.speaker for s in refined for w in s.words if w.start >= later
    }
    # The revisions' passes ran while recording (here: one, 25 s into the second call): the
    # pass at Stop starts from their VAD state and embeddings, embeds only windows reaching
    # into the last 5 s, and labels every word as the pass from scratch did.
    growing = GrowingTrack(encoder)
    growing.diarize(audio[: int((later + 25) * SR)])
    before = growing.encoder.embedded
    store.replace(Transcript(segments=first + shifted(call_words, later, len(first))))
    assert refine_speakers(*args, growing=growing)
    reach = int((later + 25 - encoder.window_seconds) * SR)
    assert growing.encoder.regained == 0
    new = growing.encoder.embedded - before
    assert 0 < new <= sum(b > reach for _, b in growing.encoder._kept), new
    assert [w.speaker for s in snapshot().segments for w in s.words] == [
        w.speaker for s in refined for w in s.words
    ]


def shown_live(events) -> dict:
    """The committed segments the window showed before Stop, by id (text updates and label
    revisions, in order)."""
    shown = {}
    for e in events:
        if isinstance(e, TextUpdate | Relabelled):
            shown.update({s.id: s for s in e.segments})
    return shown


def test_the_real_call_gets_two_right_labels_before_stop(
    pulse, tiny_model, speaker_model, data_dir, tmp_path
):
    # The real phone call (two voices), played into a null sink, one source. Live labels
    # alone, from a few seconds each, gave word accuracy 0.57-0.73: the shipped encoder does
    # not tell these two phone voices apart from that little. The labels are now revised
    # while recording by the offline pass over the recording so far (``live.relabel``).
    call = load(EVAL / "two-speakers.wav")
    wav = write_wav(tmp_path / "call.wav", np.concatenate([gap(0.5), call, gap(2.0)]))
    system = find_device("system", pulse.add_null_sink("revise_call"))
    session = LiveSession(
        tiny_model,
        LiveOptions(source="system", system=system),
        speaker_encoder=SpeakerEncoder(speaker_model),
    )
    session.start()
    events: list = []
    next_event(session, Started, 30, events)
    played = pulse.play_recorded(wav, "revise_call", lambda: session.recording.samples)
    played.wait(timeout=300)
    session.stop()
    stopped = next_event(session, Stopped, 180, events)
    offset = clip_offset(read_track(stopped.folder, "system"), call)
    reference = read_rttm(EVAL / "two-speakers.rttm")
    live = [(w.start - offset, w.end - offset, w.speaker)
            for s in shown_live(events).values() for w in s.words]  # fmt: skip
    revisions = [e for e in events if isinstance(e, Relabelled)]
    print(
        f"the call live: word accuracy {word_accuracy(reference, live):.3f}, "
        f"{len({w[2] for w in live})} labels, {len(revisions)} revisions, passes "
        f"{session.reviser.passes}"
    )
    # Measured over 7 runs: word accuracy 0.857-0.955, 2 labels in 6 and 3 in one (words
    # after the last revision labelled live alone); without the revisions 0.71 and 4 labels,
    # which fails this. The target is 0.85: the bound leaves the spread room.
    assert revisions and session.reviser.passes
    assert 2 <= len({w[2] for w in live}) <= 3, live
    assert word_accuracy(reference, live) >= 0.8, live


def test_double_talk_in_meeting_mode_is_marked_overlap(tiny_model, speech_dir):
    """Meeting mode: recognition runs on the mix of the two tracks, so when the user and the
    remote side talk at once there is one word stream. Each word goes to the louder track;
    when the other track also held speech within 6 dB, the word is marked ``overlap`` (and
    keeps the mark through the pass at Stop's relabelling). The user's sentence and the real
    phone call, the call starting 2.5 s before the sentence ends."""
    from deskscribe.speakers.assign import assign_speakers
    from deskscribe.speakers.diarize import Turn
    from deskscribe.speakers.online import YOU

    you = load(espeak(TURN, speech_dir / "meeting-you.wav"))
    call = load(EVAL / "two-speakers.wav")[int(6.5 * SR) : int(16 * SR)]  # its first turns
    both_from, you_end = 0.5 + you.shape[0] / SR - 2.5, 0.5 + you.shape[0] / SR
    n = int((both_from + call.shape[0] / SR + 0.5) * SR)
    mic, system = np.zeros(n, np.float32), np.zeros(n, np.float32)
    mic[int(0.5 * SR) : int(0.5 * SR) + you.shape[0]] = you
    system[int(both_from * SR) : int(both_from * SR) + call.shape[0]] = call
    mix = write_wav(speech_dir / "double-talk-mix.wav", np.clip(mic + system, -1, 1))
    transcript = transcribe_file(
        tiny_model, mix, TranscribeOptions(language="en", word_timestamps=True)
    )
    words = [w for seg in transcript.segments for w in seg.words]
    labeller = LiveSpeakerLabeller(["mic", "system"])
    for i in range(0, n, SR // 2):  # as the recorder hands it over, both tracks in step
        labeller.add_audio({"mic": mic[i : i + SR // 2], "system": system[i : i + SR // 2]})
    labeller.label(words)
    row = [(round(w.start, 2), w.text, w.speaker, w.overlap) for w in words]
    print(f"both talk {both_from:.2f}-{you_end:.2f} s:", row)
    alone = [w for w in words if w.end < both_from - 0.3 or w.start > you_end + 0.3]
    during = [w for w in words if w.start >= both_from + 0.2 and w.end <= you_end - 0.2]
    assert alone and during, row
    assert not [w.text for w in alone if w.overlap], row  # one side talking: never marked
    assert sum(w.overlap for w in during) >= len(during) / 2, row
    assert {w.speaker for w in words if w.end < both_from - 0.3} == {YOU}, row
    # Loudspeakers instead of a headset: the microphone hears the call 15 dB down. That is
    # not the user talking: the call's words alone stay unmarked, and the double talk is
    # still found.
    leaky = LiveSpeakerLabeller(["mic", "system"])
    heard = mic + np.float32(10 ** (-15 / 20)) * system
    for i in range(0, n, SR // 2):
        leaky.add_audio({"mic": heard[i : i + SR // 2], "system": system[i : i + SR // 2]})
    copies = [dataclasses.replace(w, overlap=False) for w in words]
    leaky.label(copies)
    assert [w.speaker for w in copies] == [w.speaker for w in words]
    assert not [w.text for w in copies if w.overlap and w.start > you_end + 0.3]
    both = [c.overlap for c, w in zip(copies, words, strict=True) if w in during]
    print(f"double talk marked with the call in the mic 15 dB down: {sum(both)} of {len(both)}")
    assert len(both) == len(during) and sum(both) >= len(during) / 2, both
    # The pass at Stop gives the words new speakers; the mark stays.
    relabelled = assign_speakers(transcript, [Turn(0.0, n / SR, "S1")])
    marks = [w.overlap for seg in relabelled.segments for w in seg.words]
    assert marks == [w.overlap for w in words]


def test_meeting_mode_is_refined_at_stop_and_you_stays_you(
    pulse, tiny_model, speaker_model, speech_dir, data_dir, tmp_path
):
    # The user says a sentence into the microphone, then the real phone call (two remote
    # voices) plays as system audio. Live, the call's voices are told apart from a few
    # seconds each; the pass at Stop used to run for one source only. Now it runs in meeting
    # mode on the system-audio track: its voices among themselves, the microphone's words
    # "You" as they were.
    you = load(espeak(TURN, speech_dir / "meeting-you.wav"))
    call = load(EVAL / "two-speakers.wav")
    lead = you.shape[0] + SR
    mic_wav = write_wav(tmp_path / "mic.wav", np.concatenate([gap(0.5), you]))
    sys_wav = write_wav(tmp_path / "sys.wav", np.concatenate([gap(0.5 + lead / SR), call]))
    mic = dataclasses.replace(
        find_device("system", pulse.add_null_sink("refine_headset")), kind="mic"
    )
    system = find_device("system", pulse.add_null_sink("refine_call"))
    session = LiveSession(
        tiny_model,
        LiveOptions(source="both", mic=mic, system=system),
        speaker_encoder=SpeakerEncoder(speaker_model),
    )
    session.start()
    next_event(session, Started, 30)
    recorded = lambda: session.recording.samples  # noqa: E731 (both tracks, in step)
    a = pulse.play_recorded(mic_wav, "refine_headset", recorded)
    b = pulse.play_recorded(sys_wav, "refine_call", recorded)
    a.wait(timeout=300)
    b.wait(timeout=300)
    session.stop()
    events: list = []
    stopped = next_event(session, Stopped, 180, events)
    live = shown_live(events)
    offset = clip_offset(read_track(stopped.folder, "system"), call)
    reference = read_rttm(EVAL / "two-speakers.rttm")

    def call_words(segments):
        return [(w.start - offset, w.end - offset, w.speaker)
                for s in segments if s.speaker != "You" for w in s.words]  # fmt: skip

    before, after = call_words(live.values()), call_words(stopped.transcript.segments)
    print(
        f"meeting, the call as system audio: live word accuracy "
        f"{word_accuracy(reference, before):.3f} ({len({w[2] for w in before})} labels), "
        f"after Stop {word_accuracy(reference, after):.3f} ({len({w[2] for w in after})})"
    )
    yours = " ".join(s.text for s in stopped.transcript.segments if s.speaker == "You")
    assert wer(TURN, yours) < 0.25, yours
    assert "You" in {t.speaker for t in stopped.transcript.turns}
    # Measured: after Stop 2 labels, word accuracy 0.934 and 0.935 in two runs (live: 0.57
    # with 2 labels, 0.73 with 3).
    assert len({w[2] for w in after}) == 2, after
    assert word_accuracy(reference, after) >= 0.85, after
    saved = json.loads((stopped.folder / "transcript.json").read_text())
    assert {s["speaker"] for s in saved["segments"]} == {w[2] for w in after} | {"You"}


def test_revised_labels_keep_the_names_on_screen_and_survive_the_next_commit():
    from deskscribe.service.live.relabel import match_names
    from deskscribe.service.live.store import word_key
    from deskscribe.whisper.streaming import StreamUpdate

    def seg(sid, speaker, *spans):
        words = [Word(a, b, f" w{a:g}", speaker=speaker) for a, b in spans]
        return Segment(start=words[0].start, end=words[-1].end, text="", words=words,
                       speaker=speaker, id=sid)  # fmt: skip

    store = TranscriptStore()
    first, second = seg(0, "S1", (0, 1), (1, 2), (2, 3)), seg(1, "S1", (4, 5), (5, 6))
    store.publish(StreamUpdate(segments=[first, second], open_id=1))
    # The offline pass calls the voices by its own names: "S2" for the first one (most of
    # the words shown as S1), "S1" for a voice the live labels had merged into it.
    found = {word_key(w): "S2" for w in first.words} | {word_key(w): "S1" for w in second.words}
    shown = {word_key(w): w.speaker for s in (first, second) for w in s.words}
    names = match_names(shown, found, {"S1"})
    assert names == {"S2": "S1", "S1": "S2"}  # the bigger voice keeps the name on screen
    changed = store.relabel({k: names[v] for k, v in found.items()})
    assert [(s.id, s.speaker) for s in changed] == [(1, "S2")]
    # The transcriber does not know: the next commit sends the growing segment with its old
    # labels and a new word. The revision stays, and the update itself carries it.
    grown = seg(1, "S1", (4, 5), (5, 6), (6, 7))
    grown.words[-1].speaker = "S2"  # labelled after the revision (the labeller adopted it)
    update = StreamUpdate(segments=[grown], open_id=1)
    store.publish(update)
    assert [w.speaker for w in update.segments[0].words] == ["S2", "S2", "S2"]
    snap = store.snapshot(language="en", duration=7.0, source=None, model="m")
    assert [s.speaker for s in snap.segments] == ["S1", "S2"]
    # A segment the user corrected is never relabelled.
    store.edit(0, "corrected")
    assert store.relabel({word_key(first.words[0]): "S9"}) == []
