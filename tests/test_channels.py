"""Channels as speakers (``--channels split``, the app's "By channel"): real voices on their own
channels, with crosstalk, transcribed per channel and merged without doubled text."""

from __future__ import annotations

import json
import os
import wave
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.register_assert_rewrite("files_support")
pytest_plugins = ["files_support"]  # fixtures: ctx, window (the app, for "By channel")

from conftest import espeak, load, normalize, run_cli, wer  # noqa: E402
from deskscribe.audio.decode import decode_blocks  # noqa: E402
from deskscribe.speakers.channels import transcribe_channels  # noqa: E402
from deskscribe.transcript.export import render  # noqa: E402
from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_blocks  # noqa: E402
from files_support import run_queue  # noqa: E402
from media import write_media  # noqa: E402

SR = 16000
EVAL = Path(__file__).resolve().parents[2] / "shared" / "eval"
CROSSTALK = 0.1  # each channel hears the other at -20 dB

JFK = (
    "And so my fellow Americans, ask not what your country can do for you, ask what you can "
    "do for your country."
)
# Sheila's turns in the real phone call (two-speakers.stm), cut out of it.
SHEILA_A = (14.30, 17.78, "And I'm Sheila in Texas, originally from Chicago.")
SHEILA_B = (
    21.80,
    27.55,
    "Well, there isn't that much difference. At least you know, they all call me a Yankee "
    "down here,",
)
# (channel, where it is placed in the stereo file, the speech in it: start, end in file time)
SPEECH = [(0, 0.10, 4.60), (1, 5.64, 8.97), (0, 9.76, 15.15), (1, 16.64, 22.25)]
# Words said once (or twice) in all: a copy from crosstalk would add to their count.
COUNTED = ["fellow", "americans", "country", "sheila", "texas", "chicago", "originally",
           "difference", "yankee"]  # fmt: skip


def write_wav(path: Path, channels: np.ndarray) -> Path:
    """16-bit PCM WAV at 16 kHz with one row of ``channels`` per channel."""
    pcm = (np.clip(channels.T, -1, 1) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels.shape[0])
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes(pcm.tobytes())
    return path


def with_crosstalk(tracks: np.ndarray) -> np.ndarray:
    """Every channel also hears every other one, ``CROSSTALK`` as loud."""
    return tracks + CROSSTALK * (tracks.sum(axis=0, keepdims=True) - tracks)


def place(n: int, pieces: list[tuple[int, float, np.ndarray]], channels: int) -> np.ndarray:
    tracks = np.zeros((channels, n), np.float32)
    for channel, at, audio in pieces:
        audio = audio * (0.08 / np.sqrt(np.mean(audio**2)))  # both voices at one level
        i = round(at * SR)
        tracks[channel, i : i + len(audio)] += audio[: n - i]
    return tracks


@pytest.fixture(scope="module")
def stereo_call(tmp_path_factory) -> Path:
    """JFK on the left, Sheila from the real phone call on the right, turns alternating."""
    assert (EVAL / "jfk.flac").is_file(), f"the real recordings are missing: {EVAL}"
    jfk = load(EVAL / "jfk.flac")
    call = load(EVAL / "two-speakers.wav")
    cut = round(4.85 * SR)  # the pause after "ask not"
    pieces = [
        (0, 0.0, jfk[:cut]),
        (1, 5.5, call[round(SHEILA_A[0] * SR) : round(SHEILA_A[1] * SR)]),
        (0, 9.5, jfk[cut:]),
        (1, 16.5, call[round(SHEILA_B[0] * SR) : round(SHEILA_B[1] * SR)]),
    ]
    tracks = with_crosstalk(place(round(23.5 * SR), pieces, 2))
    path = tmp_path_factory.mktemp("channels") / "call.flac"
    return write_media(path, tracks, rate=SR, codec="flac")


def by_speaker(transcript) -> dict[str, str]:
    return {
        sid: " ".join(s.text.strip() for s in transcript.segments if s.speaker == sid)
        for sid in transcript.speaker_ids()
    }


def test_each_channel_is_a_speaker_and_crosstalk_is_not_doubled(tiny_model, stereo_call):
    options = TranscribeOptions(batched=True)
    # The crosstalk is loud enough that the right channel alone also writes JFK's words.
    with decode_blocks(stereo_call, keep_channels=True) as blocks:
        right_alone = list(transcribe_blocks(tiny_model, (b[1] for b in blocks), options))
    heard = normalize(" ".join(s.text for s in right_alone)).split()
    assert "fellow" in heard, heard

    t = transcribe_channels(tiny_model, stereo_call, options)
    assert t.speakers == {"S1": "Left", "S2": "Right"}
    said = by_speaker(t)
    assert set(said) == {"S1", "S2"}
    sheila = f"{SHEILA_A[2]} {SHEILA_B[2]}"
    assert wer(JFK, said["S1"]) < 0.25 and wer(sheila, said["S2"]) < 0.3, said

    # No doubled text: each word is written as often as it was said, under its speaker.
    reference = normalize(f"{JFK} {sheila}").split()
    words = normalize(t.text).split()
    for word in COUNTED:
        assert words.count(word) == reference.count(word), (word, said)
        owner = "S1" if word in normalize(JFK).split() else "S2"
        assert word in normalize(said[owner]).split(), (word, said)
    assert len(words) <= len(reference) + 3, said

    # Times: every segment lies where its own channel speaks, and each turn starts and ends
    # within a second of where it does.
    assert [s.start for s in t.segments] == sorted(s.start for s in t.segments)
    for seg in t.segments:
        channel = int(seg.speaker[1:]) - 1
        assert all(w.speaker == seg.speaker for w in seg.words)
        assert any(
            c == channel and lo - 1 <= seg.start and seg.end <= hi + 1 for c, lo, hi in SPEECH
        ), (seg.speaker, seg.start, seg.end, seg.text)
    for channel, lo, hi in SPEECH:
        turn = [s for s in t.segments if s.speaker == f"S{channel + 1}" and lo - 1 < s.end < hi + 1]
        assert turn, (channel, lo, hi)
        assert abs(turn[0].start - lo) <= 1.0 and abs(turn[-1].end - hi) <= 1.0, (lo, hi, turn)

    # The channels are speakers like any other: renamed, exports follow.
    t.rename_speaker("S2", "Sheila")
    assert t.speaker_name("S2") == "Sheila" and t.speaker_name("S1") == "Left"


def test_double_talk_keeps_both_and_a_third_channel_is_named(tiny_model, speech_dir, tmp_path):
    """Two people talking at once each keep their words; channel 3 is "Channel 3"."""
    texts = [
        "Please call me back tomorrow afternoon.",
        "Remember to water the plants on Sunday.",
        "The quick brown fox jumps over the lazy dog.",
    ]
    voices = [("en", 50), ("en-gb", 40), ("en", 75)]  # (voice, pitch)
    audio = [
        load(espeak(text, speech_dir / f"channels-{i}.wav", voice=voice, pitch=pitch))
        for i, (text, (voice, pitch)) in enumerate(zip(texts, voices, strict=True))
    ]
    # Channels 1 and 2 overlap for most of their sentences; channel 3 speaks after them.
    pieces = [(0, 0.5, audio[0]), (1, 1.5, audio[1]), (2, 5.5, audio[2])]
    path = write_wav(tmp_path / "three.wav", with_crosstalk(place(9 * SR, pieces, 3)))

    t = transcribe_channels(tiny_model, path, TranscribeOptions(batched=True))
    assert t.speakers == {"S1": "Left", "S2": "Right", "S3": "Channel 3"}
    said = by_speaker(t)
    # tiny.en mishears a word or two of a sentence with another voice over it (without the
    # crosstalk it writes all three right); what matters here is that none is lost or doubled.
    for i, text in enumerate(texts):
        assert wer(text, said.get(f"S{i + 1}", "")) < 0.45, said
    words = normalize(t.text).split()
    owners = {"S1": ["call", "tomorrow", "afternoon"], "S2": ["remember", "water"],
              "S3": ["quick", "fox", "lazy"]}  # fmt: skip
    for sid, owned in owners.items():
        for word in owned:
            assert words.count(word) == 1 and word in normalize(said[sid]).split(), (word, said)

    # Double talk is marked on both parties' words, and only there: channel 1 speaks alone
    # until channel 2 starts at 1.5 s, channel 3 alone after both.
    spoken = [w for seg in t.segments for w in seg.words]
    marked = [w for w in spoken if w.overlap]
    assert {w.speaker for w in marked} == {"S1", "S2"}, marked
    assert all(w.end > 1.4 for w in marked), marked  # nothing before channel 2 began
    assert not any(w.overlap for w in spoken if w.speaker == "S3")
    assert not any(w.overlap for w in spoken if w.speaker == "S1" and w.end < 1.4)
    others = {sid: [w for w in spoken if w.speaker != sid] for sid in ("S1", "S2")}
    for w in marked:  # each marked word really shares time with another party's word
        assert any(min(w.end, o.end) - max(w.start, o.start) >= 0.1 for o in others[w.speaker])
    data = json.loads(render(t, "json"))
    flagged = [w for seg in data["segments"] for w in seg["words"] if w.get("overlap")]
    assert len(flagged) == len(marked)


def test_cli_splits_channels_and_says_so_for_a_mono_file(tiny_fp32, stereo_call, tmp_path):
    store = tmp_path / "models"
    store.mkdir()
    (store / "tiny.en").symlink_to(tiny_fp32, target_is_directory=True)
    mono = espeak("Please call me back tomorrow afternoon.", tmp_path / "mono.wav", voice="en")
    args = ["transcribe", str(mono), "--channels", "split", "--format", "json", "--quiet"]
    res = run_cli(args, store, tmp_path)
    assert res.returncode == 0, res.stderr
    assert "has one channel" in res.stderr and "mono.wav" in res.stderr
    out = json.loads((tmp_path / "mono.json").read_text())
    text = " ".join(s["text"] for s in out["segments"])
    assert wer("Please call me back tomorrow afternoon.", text) < 0.2
    assert out["speakers"] == {} and all(s["speaker"] is None for s in out["segments"])

    both = ["transcribe", str(mono), "--channels", "split", "--speakers", "2"]
    res = run_cli(both, store, tmp_path)
    assert res.returncode == 2 and "--channels split" in res.stderr

    args = ["transcribe", str(stereo_call), "--channels", "split", "--format", "json,txt"]
    res = run_cli([*args, "--output-dir", str(tmp_path), "--quiet"], store, tmp_path)
    assert res.returncode == 0 and "channel" not in res.stderr, res.stderr
    out = json.loads((tmp_path / "call.json").read_text())
    assert out["speakers"] == {"S1": "Left", "S2": "Right"}
    lines = [line for line in (tmp_path / "call.txt").read_text().splitlines() if line]
    assert [line.split(":")[0] for line in lines] == ["Left", "Right", "Left", "Right"], lines


def test_by_channel_in_the_app(qtbot, window, ctx, stereo_call):
    """The Speakers choice offers "By channel" without any speaker model, remembers it, and a
    queued file comes back labelled Left and Right."""
    from deskscribe.gui.file_options import FileOptions

    _win, files, view, _lib = window
    choice = files.options.speakers
    qtbot.waitUntil(choice.isEnabled, timeout=20_000)  # the speaker-model check is done
    by_voice = choice.mode.model().item(choice.mode.findData("auto"))
    assert not by_voice.isEnabled() and not choice.people.isEnabled()  # no speaker model
    choice.set_value("2")  # as an older setting could hold
    assert files.options.speakers_choice() == "off"
    choice.mode.setCurrentIndex(choice.mode.findData("channels"))
    assert files.options.speakers_choice() == "channels" and ctx.get("speakers") == "channels"
    again = FileOptions(ctx)  # the next start of the app
    qtbot.addWidget(again)
    qtbot.waitUntil(again.speakers.isEnabled, timeout=20_000)
    assert again.speakers.value() == "channels" and again.speakers_choice() == "channels"

    row = run_queue(qtbot, files, [stereo_call], timeout=300_000)[stereo_call.name]
    assert row.status == "done", row.error
    files.select(row.item_id)
    with qtbot.waitSignal(view.loaded, timeout=20_000):
        files.open_selected()
    assert [view.speakers.item(i).text() for i in range(view.speakers.count())] == [
        "Left",
        "Right",
    ]
    said = by_speaker(view.transcript)
    assert wer(JFK, said["S1"]) < 0.25, said


def test_a_mono_file_job_by_channel_is_done_with_a_note(tiny_model, tmp_path):
    """The file queue's path (what the engine process runs): "By channel" on a mono file is
    transcribed as usual, and the finished item says why it has no channel labels."""
    from deskscribe.library import Library
    from deskscribe.service.files import local_runner
    from deskscribe.service.queue import job_options, run_queued_item

    mono = espeak("Please call me back tomorrow afternoon.", tmp_path / "mono.wav", voice="en")
    library = Library(tmp_path / "library.sqlite3")
    item = library.add_file(mono, job_options("tiny.en", None, "channels"))
    outcome = run_queued_item(library, item, local_runner(lambda *_: tiny_model))
    assert outcome.status == "done" and "has one channel" in (outcome.error or "")
    assert library.get(item).error == outcome.error
    saved = library.load_transcript(item)
    assert wer("Please call me back tomorrow afternoon.", saved.text) < 0.2
    assert saved.speaker_ids() == []
