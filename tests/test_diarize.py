"""Speaker diarization end to end: espeak-ng conversations with known turns, the real
Resemblyzer encoder converted to ONNX, real Whisper word timestamps; no mocks.

Thresholds come from measurement (bench/speakers.py, 12 conversations: these three scripts
with the voices rotated and the pauses shifted, docs/architecture.md "Speakers"): DER with a
0.25 s collar was 0.1-4.5 % (mean 1.8 %), the speaker count right in all of them; the three
asserted here measured 1.2 %, 1.3 % and 0.8 %. The issue's target, DER <= 5 %, is asserted.
Word accuracy with tiny.en measured 1.00 on all three; >= 0.97 allows four wrong words of
about 160 (Whisper's word times move a little between versions).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import conversations as cv
import speaker_metrics as metrics
from conftest import CACHE, EVAL, run_cli
from deskscribe.audio.vad import SileroVAD, regions_from_probabilities
from deskscribe.audio_format import SAMPLE_RATE
from deskscribe.speakers import cluster
from deskscribe.speakers.diarize import (
    DiarizeOptions,
    diarize,
    diarize_file,
    sliding_windows,
)
from deskscribe.speakers.encoder import SpeakerEncoder
from deskscribe.speakers.profiles import apply_profiles, save_profile
from deskscribe.transcript import Transcript, render

COUNTS = {"two": 2, "three": 3, "four": 4}


@pytest.fixture(scope="module")
def encoder(speaker_model: Path) -> SpeakerEncoder:
    return SpeakerEncoder(speaker_model, device="cpu")


@pytest.fixture(scope="module")
def convs() -> dict[str, cv.Conversation]:
    folder = CACHE / "conversations"
    try:
        return {name: cv.build(name, folder) for name in COUNTS}
    except RuntimeError as err:  # no espeak-ng
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def diarized(tiny_model, encoder, convs) -> dict:
    """Each conversation transcribed (tiny.en, word timestamps), diarized and assigned."""
    return {name: diarize_file(tiny_model, c.path, encoder) for name, c in convs.items()}


def _words(transcript: Transcript) -> list[tuple[float, float, str | None]]:
    return [(w.start, w.end, w.speaker) for s in transcript.segments for w in s.words]


@pytest.mark.parametrize("name", list(COUNTS))
def test_conversation_speakers_turns_and_words(name: str, convs, diarized) -> None:
    conv, (transcript, result) = convs[name], diarized[name]
    assert result.speakers == [f"S{i + 1}" for i in range(COUNTS[name])]
    score = metrics.der(conv.turns, result.turns, collar=0.25)
    assert score.error <= 0.05, score
    accuracy = metrics.word_accuracy(conv.turns, _words(transcript))
    assert accuracy >= 0.97
    # Every segment holds one speaker; segments follow the turns in time order.
    assert all(w.speaker == s.speaker for s in transcript.segments for w in s.words)
    starts = [s.start for s in transcript.segments]
    assert starts == sorted(starts)
    # The first speaker is S1, and the export reads like a conversation.
    txt = render(transcript, "txt").splitlines()
    assert txt[0].startswith("Speaker 1: ")
    expected_lines = sum(
        1 for i, (who, _) in enumerate(conv.texts) if i == 0 or conv.texts[i - 1][0] != who
    )
    assert len(txt) == expected_lines


@pytest.mark.parametrize("lead", [0.2, 0.45])
def test_changes_without_a_heard_pause_make_no_voice_of_their_own(encoder, convs, lead) -> None:
    """The three-voice conversation with a -80 dBFS noise floor in its gaps (as a live
    capture or any real recording has) and a little silence before it: the 0.2 s gaps
    between two voices are no longer pauses the VAD hears, so the windows straddling those
    changes gathered into a fourth "voice" (3.0 s of 51, in three runs, each between B and C;
    cosine 0.81 and 0.80 to them). It made a live test with three voices end with four
    labels in one run of three. Those windows are folded into their neighbours."""
    conv = convs["three"]
    rng = np.random.default_rng(0)
    audio = np.concatenate([np.zeros(int(lead * SAMPLE_RATE), np.float32), conv.audio])
    audio = audio + rng.normal(0, 1e-4, audio.shape).astype(np.float32)
    result = diarize(audio, encoder)
    assert result.speakers == ["S1", "S2", "S3"], result.turns
    turns = [(a - lead, b - lead, who) for a, b, who in result.turns]
    assert metrics.der(conv.turns, turns, collar=0.25).error <= 0.05


def test_short_interjection_gets_its_speaker(convs, diarized) -> None:
    # "Right, of course." (about 1.2 s) from the second voice, between two long turns.
    conv, (transcript, result) = convs["two"], diarized["two"]
    start, end, who = next(t for t in conv.turns if t[1] - t[0] < 1.5)
    mapping = metrics.der(conv.turns, result.turns).mapping
    words = [w for s in transcript.segments for w in s.words if start - 0.1 < w.start < end]
    assert [w.text.strip(" ,.").lower() for w in words][:1] == ["right"]
    assert {mapping[w.speaker] for w in words} == {who}


def test_two_short_turns_keep_two_voices(encoder) -> None:
    """Two voices, one turn each (about 10 s), as a short live recording ends up at Stop.
    Every window of one voice held a pause, and windows with a pause were left out of the
    clustering, so both voices got one label in 32 of 35 paddings (before the fix)."""
    conv = cv.build("two-turns", CACHE / "conversations", script=[cv.SCRIPT_2[0], cv.SCRIPT_2[7]])
    audio, sr = conv.audio, SAMPLE_RATE
    rng = np.random.default_rng(0)
    for lead, tail in rng.uniform(0, 2.5, (6, 2)):
        padded = np.concatenate(
            [np.zeros(int(lead * sr), np.float32), audio, np.zeros(int(tail * sr), np.float32)]
        )
        result = diarize(padded, encoder)
        assert len(result.speakers) == 2, (lead, tail, result.turns)
        error = metrics.der([(a + lead, b + lead, w) for a, b, w in conv.turns], result.turns)
        assert error.error <= 0.1, (lead, tail, error)


def test_real_call_two_voices_each_get_their_words(tiny_model, encoder) -> None:
    """The real phone call (two women on a phone line, ../shared/eval): two speakers, and
    each reference turn's words mostly carry that voice's label; a labeller that gave every
    word one label would get one of the two voices entirely wrong. Measured (tiny.en,
    Resemblyzer): DER 3.2 %, 95 % of Diane's 38 words and 97 % of Sheila's 32 right, every
    turn of three words or more right; only the opening one-word "Hello?"s (0.5 s each) swap
    labels."""
    transcript, result = diarize_file(tiny_model, EVAL / "two-speakers.wav", encoder)
    assert result.speakers == ["S1", "S2"]
    assert metrics.der(cv.read_rttm(EVAL / "two-speakers.rttm"), result.turns).error <= 0.08
    rows = cv.read_stm(EVAL / "two-speakers.stm")  # (speaker, start, end, words)
    mapping = metrics.der([(a, b, who) for who, a, b, _ in rows], result.turns).mapping
    words = [w for s in transcript.segments for w in s.words]
    right: dict[str, list[bool]] = {}
    for who, a, b, text in rows:
        said = [mapping.get(w.speaker) == who for w in words if a <= (w.start + w.end) / 2 <= b]
        right.setdefault(who, []).extend(said)
        if len(text.split()) >= 3:
            assert sum(said) > len(said) / 2, (who, a, b, text, said)
    print({who: f"{np.mean(r):.2f} of {len(r)}" for who, r in right.items()})
    assert sorted(right) == ["Diane", "Sheila"]
    for who, r in right.items():
        assert len(r) >= 10 and np.mean(r) >= 0.85, (who, r)


def test_fixed_count_and_range(encoder, convs) -> None:
    four = convs["four"]
    assert len(diarize(four.audio, encoder, DiarizeOptions(num_speakers=2)).speakers) == 2
    ranged = diarize(four.audio, encoder, DiarizeOptions(min_speakers=2, max_speakers=4))
    assert len(ranged.speakers) == 4
    capped = diarize(four.audio, encoder, DiarizeOptions(max_speakers=3))
    assert len(capped.speakers) == 3
    three = convs["three"]
    fixed = diarize(three.audio, encoder, DiarizeOptions(num_speakers=3))
    assert metrics.der(three.turns, fixed.turns).error <= 0.05


def test_one_voice_is_one_speaker(encoder) -> None:
    mono = cv.build("mono", CACHE / "conversations", script=[("A", t) for _, t in cv.SCRIPT_3])
    result = diarize(mono.audio, encoder)
    assert result.speakers == ["S1"]
    assert metrics.der(mono.turns, result.turns).error <= 0.03


def test_silence_has_no_speakers(encoder) -> None:
    assert diarize(np.zeros(16000 * 3, np.float32), encoder).turns == []


def test_profiles_name_a_known_voice_in_another_conversation(
    encoder, convs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", str(tmp_path))
    two = convs["two"]
    first = diarize(two.audio, encoder)
    mapping = {v: k for k, v in metrics.der(two.turns, first.turns).mapping.items()}
    save_profile("Alice", first.centroids[mapping["A"]], model=encoder.name)  # voice A
    save_profile("Bea", first.centroids[mapping["B"]], model=encoder.name)  # voice B
    # The four-speaker meeting has voices A-D: A and B get their names, C and D do not.
    four = convs["four"]
    second = diarize(four.audio, encoder)
    t = Transcript(segments=[], speakers={s: f"Speaker {s[1:]}" for s in second.speakers})
    named = apply_profiles(t, second.centroids, model=encoder.name)
    ref = metrics.der(four.turns, second.turns).mapping
    assert {ref[sid]: name for sid, name in named.items()} == {"A": "Alice", "B": "Bea"}


def test_online_clusterer_gives_stable_labels(encoder, convs) -> None:
    """Window embeddings of the three-speaker conversation, one at a time, as live would."""
    conv = convs["three"]
    probs = SileroVAD().probabilities(conv.audio)
    regions = regions_from_probabilities(probs, conv.audio.shape[0], DiarizeOptions().vad)
    windows = [w for w in sliding_windows(regions, 25600, 12800) if w[1] - w[0] >= 16000]
    emb = encoder.embed_windows(conv.audio, windows)
    online = cluster.OnlineClusterer(cluster.threshold_for(encoder.kind, online=True))
    given = [online.assign(e) for e in emb]
    assert len(online) == 3 and sum(online.counts) == len(windows)
    ref = [
        (i, i + 1, metrics.speaker_at(conv.turns, a / 16000, b / 16000))
        for i, (a, b) in enumerate(windows)
    ]
    accuracy = metrics.word_accuracy(ref, [(i, i + 1, str(g)) for i, g in enumerate(given)])
    assert accuracy >= 0.9
    # Stable: with everything heard, the centroids still give (nearly) every window the label
    # it got when it arrived, and a look without update changes nothing.
    now = [online.assign(e, update=False) for e in emb]
    assert np.mean(np.array(now) == np.array(given)) >= 0.95
    assert sum(online.counts) == len(windows)
    assert online.merge_close() == {0: 0, 1: 1, 2: 2}  # three real voices stay three


def test_cli_speakers_with_profiles(
    tiny_fp32: Path, speaker_model: Path, convs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    shutil.copytree(tiny_fp32, store / "tiny.en")
    audio = tmp_path / "meeting.wav"
    shutil.copyfile(convs["two"].path, audio)
    data = str(tmp_path / "data")
    # No speaker model yet: a clear error naming the install command, nothing written.
    res = run_cli(["transcribe", str(audio), "--speakers", "auto"], store, DESKSCRIBE_DATA_DIR=data)
    assert res.returncode == 2 and "install-speaker-starter" in res.stderr, res.stderr
    assert not (tmp_path / "meeting.txt").exists()
    res = run_cli(["transcribe", str(audio), "--speakers", "two"], store, DESKSCRIBE_DATA_DIR=data)
    assert res.returncode == 2 and "auto, a count" in res.stderr

    shutil.copytree(speaker_model, store / "speaker-resemblyzer")
    # A profile for voice A from another conversation: the CLI names that speaker.
    enc = SpeakerEncoder(speaker_model)
    three = convs["three"]
    other = diarize(three.audio, enc)
    a_id = {v: k for k, v in metrics.der(three.turns, other.turns).mapping.items()}["A"]
    monkeypatch.setenv("DESKSCRIBE_DATA_DIR", data)
    save_profile("Alice", other.centroids[a_id], model=enc.name)
    res = run_cli(
        ["transcribe", str(audio), "--speakers", "2", "--format", "txt,srt,json", "--quiet"],
        store,
        DESKSCRIBE_DATA_DIR=data,
    )
    assert res.returncode == 0, res.stderr
    lines = (tmp_path / "meeting.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("Alice: Good morning")
    assert lines[1].startswith("Speaker 2: No problem")
    assert len(lines) == 9  # nine turns, one line each
    srt = (tmp_path / "meeting.srt").read_text(encoding="utf-8")
    assert "\nAlice: " in srt and "\nSpeaker 2: " in srt
    saved = json.loads((tmp_path / "meeting.json").read_text(encoding="utf-8"))
    assert saved["speakers"] == {"S1": "Alice", "S2": "Speaker 2"}
    words = [w for s in saved["segments"] for w in s["words"]]
    assert words and all(w["speaker"] in ("S1", "S2") for w in words)


def test_cli_profiles_save_from_a_transcript_name_the_voice_later_and_delete(
    tiny_fp32: Path, speaker_model: Path, convs, tmp_path: Path
) -> None:
    """The user's path: transcribe a meeting, save one speaker's voice under a name from the
    JSON transcript and its recording, and a later meeting with that voice names it; then
    forget the profile."""
    store = tmp_path / "store"
    store.mkdir()
    shutil.copytree(tiny_fp32, store / "tiny.en")
    shutil.copytree(speaker_model, store / "speaker-resemblyzer")
    data = str(tmp_path / "data")
    first = tmp_path / "first.wav"
    shutil.copyfile(convs["three"].path, first)
    res = run_cli(
        ["transcribe", str(first), "--speakers", "auto", "--format", "json", "--quiet"],
        store,
        DESKSCRIBE_DATA_DIR=data,
    )
    assert res.returncode == 0, res.stderr
    saved = Transcript.from_json((tmp_path / "first.json").read_bytes())
    turns = [(seg.start, seg.end, seg.speaker) for seg in saved.segments]
    a_id = {v: k for k, v in metrics.der(convs["three"].turns, turns).mapping.items()}["A"]

    res = run_cli(
        ["profiles", "save", str(tmp_path / "first.json"), "S9"], store, DESKSCRIBE_DATA_DIR=data
    )
    assert res.returncode == 1 and "no speaker 'S9'" in res.stderr and a_id in res.stderr
    res = run_cli(
        ["profiles", "save", str(tmp_path / "first.json"), a_id, "--name", "Alice"],
        store,
        DESKSCRIBE_DATA_DIR=data,
    )
    assert res.returncode == 0 and "'Alice'" in res.stdout, res.stderr
    res = run_cli(["profiles", "list"], store, DESKSCRIBE_DATA_DIR=data)
    assert res.stdout.startswith("Alice\tspeaker-resemblyzer\t1 sample"), res.stdout
    assert json.loads((tmp_path / "data" / "voice-profiles.json").read_text())  # no audio in it
    assert (tmp_path / "data" / "voice-profiles.json").stat().st_size < 20_000

    second = tmp_path / "second.wav"
    shutil.copyfile(convs["two"].path, second)  # voice A opens this meeting too
    res = run_cli(
        ["transcribe", str(second), "--speakers", "2", "--format", "txt", "--quiet"],
        store,
        DESKSCRIBE_DATA_DIR=data,
    )
    assert res.returncode == 0, res.stderr
    lines = (tmp_path / "second.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("Alice: Good morning") and lines[1].startswith("Speaker 2: ")

    res = run_cli(["profiles", "delete", "alice"], store, DESKSCRIBE_DATA_DIR=data)
    assert res.returncode == 0, res.stderr
    res = run_cli(["profiles", "delete", "Alice"], store, DESKSCRIBE_DATA_DIR=data)
    assert res.returncode == 1 and "no voice profile named 'Alice'" in res.stderr
    res = run_cli(["profiles", "list"], store, DESKSCRIBE_DATA_DIR=data)
    assert res.stdout.strip() == "no voice profiles saved"


# --------------------------------------------------------------------------- building blocks


def test_der_counts_missed_false_alarm_and_confusion() -> None:
    ref = [(0.0, 10.0, "a"), (10.0, 20.0, "b")]
    assert metrics.der(ref, [(0, 10, "x"), (10, 20, "y")]).error == 0.0  # names don't matter
    swapped = metrics.der(ref, [(0, 10, "y"), (10, 20, "x")])
    assert swapped.error == 0.0 and swapped.mapping == {"y": "a", "x": "b"}
    r = metrics.der(ref, [(0, 8, "x"), (10, 20, "x"), (20, 22, "x")], collar=0.0)
    assert r.missed == pytest.approx(2.0) and r.false_alarm == pytest.approx(2.0)
    # x is mapped to b (10 s together, against 8 s with a): 0-8 s is confusion.
    assert r.confusion == pytest.approx(8.0) and r.error == pytest.approx(0.6)
    # The collar forgives 0.25 s either side of every reference boundary.
    assert metrics.der(ref, [(0.2, 10.2, "x"), (10.2, 19.8, "y")]).error == 0.0


def test_cpwer_pairs_speakers_by_least_errors() -> None:
    ref = {"a": "hello there friend", "b": "good morning"}
    assert metrics.cpwer(ref, {"2": "good morning", "1": "hello there friend"}) == 0.0
    assert metrics.cpwer(ref, {"1": "hello there", "2": "good morning friend"}) == pytest.approx(
        2 / 5
    )


def test_agglomerative_matches_brute_force_average_linkage() -> None:
    def naive(x: np.ndarray, k: int) -> list[set[int]]:
        x = cluster.normalize(x)
        dist = 1 - x @ x.T
        groups = [[i] for i in range(len(x))]
        while len(groups) > k:
            pairs = [(a, b) for a in range(len(groups)) for b in range(a + 1, len(groups))]
            a, b = min(pairs, key=lambda p: dist[np.ix_(groups[p[0]], groups[p[1]])].mean())
            groups[a] += groups.pop(b)
        return sorted(map(set, groups), key=min)

    rng = np.random.default_rng(7)
    for _ in range(10):
        x = np.repeat(rng.normal(size=(4, 16)), 6, axis=0) + rng.normal(scale=0.8, size=(24, 16))
        for k in (1, 2, 3, 5):
            labels = cluster.agglomerative(x, num=k)
            got = sorted(({i for i in range(24) if labels[i] == c} for c in set(labels)), key=min)
            assert got == naive(x, k)
            assert labels[0] == 0  # renumbered by first appearance


def test_agglomerative_small_clusters_are_not_speakers() -> None:
    rng = np.random.default_rng(3)
    a, b, odd = rng.normal(size=(3, 32))
    x = np.vstack(
        [a + 0.1 * rng.normal(size=(10, 32)), odd[None], b + 0.1 * rng.normal(size=(10, 32))]
    )
    assert len(set(cluster.agglomerative(x, threshold=0.3))) == 3  # the odd one stands alone
    labels = cluster.agglomerative(x, threshold=0.3, min_size=3)
    assert len(set(labels)) == 2 and labels[10] in (labels[0], labels[11])
    # A fixed count counts large clusters only.
    assert len(set(cluster.agglomerative(x, num=2, min_size=3))) == 2
    assert (cluster.agglomerative(x, num=2, min_size=3)[:10] == 0).all()


def test_sliding_windows_cover_each_region() -> None:
    assert sliding_windows([(0, 100), (200, 1000)], 300, 150) == [
        (0, 100),
        (200, 500),
        (350, 650),
        (500, 800),
        (650, 950),
        (700, 1000),
    ]
