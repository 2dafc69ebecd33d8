"""Real recordings (``../shared/eval``) and long files with a term spoken late, for the tests
that show a feature makes a difference (each runs with and without it).

The phone call's reference words and the contraction helpers come from ``bench/common.py``,
so the tests and the benches read the recordings the same way.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from conftest import EVAL, bench_module, espeak, load

SR = 16000


_common = bench_module("common")
call_recording = _common.call_recording  # (wav, reference words, seconds)
contractions = _common.contractions  # "didn't", "i'm", ... in order, lower case


def real_three_windows() -> tuple[np.ndarray, str]:
    """About 73 s of real speech over three 30 s windows: the phone call, JFK, the call again
    (1 s of silence between), and its reference words. The call alone is one window, where
    previous-text conditioning has nothing to condition on."""
    wav, call_words, _ = call_recording(EVAL)
    call, jfk = load(wav), load(EVAL / "jfk.flac")
    jfk_words = (EVAL / "jfk.txt").read_text(encoding="utf-8").strip()
    gap = np.zeros(SR, np.float32)
    audio = np.concatenate([call, gap, jfk, gap, call])
    assert audio.shape[0] > 70 * SR
    return audio, " ".join([call_words, jfk_words, call_words])


# Meeting talk before the term: about 22 s a round (tiny.en gets it right without help).
FILLER = [
    "Good morning everyone. Thank you for joining the weekly planning meeting.",
    "The release is on track for Friday, and the installer builds are green.",
    "We still need someone to review the speaker labelling changes before Thursday.",
    "After lunch we will look at the budget for the next quarter and the hiring plan.",
]


def late_term(speech_dir: Path, sentence: str, name: str, rounds: int) -> tuple[np.ndarray, float]:
    """``rounds`` rounds of ``FILLER`` (0.6 s pauses), then ``sentence``: the audio and where
    the sentence starts (s)."""
    pause = np.zeros(int(0.6 * SR), np.float32)
    filler = [load(espeak(t, speech_dir / f"vocab-filler{i}.wav")) for i, t in enumerate(FILLER)]
    lead = np.concatenate([x for _ in range(rounds) for f in filler for x in (f, pause)])
    spoken = load(espeak(sentence, speech_dir / f"late-{name}.wav"))
    return np.concatenate([lead, spoken]), lead.shape[0] / SR
