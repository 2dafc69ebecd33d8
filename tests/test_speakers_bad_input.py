"""Speaker labels on bad input, as a user meets it: real models, real files, no mocks.

- a recording with no speech at all: no speakers, no error, the transcript written;
- ``--speakers 5`` on the real two-person phone call: the two voices, not five labels made of
  noise, and the user is told fewer were found than asked;
- a speaker model file that is corrupt (cut short) or of a kind this version does not know:
  a clear error naming the file, and the transcript still written, without labels.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import conversations as cv
from conftest import EVAL, run_cli
from deskscribe.audio_format import SAMPLE_RATE
from deskscribe.service.speakers import label_file
from deskscribe.speakers.diarize import DiarizeOptions, diarize
from deskscribe.speakers.encoder import SpeakerEncoder, SpeakerModelError

CALL = EVAL / "two-speakers.wav"


@pytest.fixture(scope="module")
def encoder(speaker_model: Path) -> SpeakerEncoder:
    return SpeakerEncoder(speaker_model, device="cpu")


def _room_tone(path: Path, seconds: float = 8.0) -> Path:
    """A recording of an empty room: low hiss, mains hum and a door-like thump, no voice."""
    rng = np.random.default_rng(7)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    audio = 0.003 * rng.standard_normal(t.shape) + 0.004 * np.sin(2 * np.pi * 50 * t)
    thump = int(3.0 * SAMPLE_RATE)
    audio[thump : thump + 800] += 0.2 * np.exp(-np.arange(800) / 120) * rng.standard_normal(800)
    return cv.write_wav(path, audio.astype(np.float32))


def test_no_speech_gives_no_speakers_and_no_error(tiny_model, encoder, tmp_path: Path) -> None:
    path = _room_tone(tmp_path / "empty-room.wav")
    warnings: list[str] = []
    transcript = label_file(tiny_model, path, encoder, DiarizeOptions(), warn=warnings.append)
    assert transcript.turns == []
    assert transcript.speaker_ids() == []
    assert warnings == []
    # asked for speakers explicitly: still nothing invented, nothing to complain about
    assert diarize(cv.read_wav(path), encoder, DiarizeOptions(num_speakers=3)).turns == []


def test_five_speakers_asked_of_a_two_person_call(tiny_model, encoder) -> None:
    """The call has two voices. Asked for five, diarization used to split each voice until it
    had five clusters (labels made of line noise and breaths); now clusters closer than
    ``same_voice`` x the threshold stay one voice."""
    warnings: list[str] = []
    transcript = label_file(
        tiny_model, CALL, encoder, DiarizeOptions(num_speakers=5), warn=warnings.append
    )
    found = {t.speaker for t in transcript.turns}
    assert len(found) == 2, transcript.turns
    assert set(transcript.speaker_ids()) <= found
    assert len(warnings) == 1 and "asked for 5 speakers" in warnings[0], warnings
    assert "only 2" in warnings[0]
    # Asking for the count that is there still gives it, without a warning.
    warnings.clear()
    two = label_file(
        tiny_model, CALL, encoder, DiarizeOptions(num_speakers=2), warn=warnings.append
    )
    assert len({t.speaker for t in two.turns}) == 2 and warnings == []


def _broken_models(speaker_model: Path, root: Path) -> tuple[Path, Path]:
    corrupt = root / "speaker-corrupt"
    shutil.copytree(speaker_model, corrupt)
    onnx = corrupt / "encoder.onnx"
    onnx.write_bytes(onnx.read_bytes()[:4096])  # a download cut short
    unknown = root / "speaker-unknown"
    shutil.copytree(speaker_model, unknown)
    manifest = json.loads((unknown / "manifest.json").read_text(encoding="utf-8"))
    manifest["kind"] = "xvector-2031"
    (unknown / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return corrupt, unknown


def test_broken_speaker_model_is_named(speaker_model: Path, tmp_path: Path) -> None:
    corrupt, unknown = _broken_models(speaker_model, tmp_path)
    with pytest.raises(SpeakerModelError) as info:
        SpeakerEncoder(corrupt)
    assert str(corrupt / "encoder.onnx") in str(info.value)
    assert "--overwrite" in str(info.value)
    with pytest.raises(SpeakerModelError) as info:
        SpeakerEncoder(unknown)
    assert "xvector-2031" in str(info.value) and str(unknown / "manifest.json") in str(info.value)


def test_cli_with_a_corrupt_speaker_model_still_writes_the_transcript(
    tiny_fp32: Path, speaker_model: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    shutil.copytree(tiny_fp32, store / "tiny.en")
    corrupt, _ = _broken_models(speaker_model, tmp_path)
    audio = tmp_path / "call.wav"
    shutil.copyfile(CALL, audio)
    res = run_cli(
        ["transcribe", str(audio), "--speakers", "auto", "--speaker-model", str(corrupt),
         "--format", "txt,json,rttm", "--quiet"],
        store, DESKSCRIBE_DATA_DIR=str(tmp_path / "data"),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert str(corrupt / "encoder.onnx") in res.stderr
    assert "without" in res.stderr  # ... the transcripts are written without them
    text = (tmp_path / "call.txt").read_text(encoding="utf-8")
    assert "Speaker" not in text and len(text.split()) > 40  # the words are all there
    saved = json.loads((tmp_path / "call.json").read_text(encoding="utf-8"))
    assert saved["speakers"] == {} and "turns" not in saved
    assert (tmp_path / "call.rttm").read_text(encoding="utf-8") == ""
