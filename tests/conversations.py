"""Synthetic conversations with known turns, spoken by espeak-ng voices.

Shared by the speaker tests and ``bench/speakers.py`` (which puts this folder on sys.path).
Each utterance is synthesised, trimmed to its voiced part, resampled to 16 kHz and laid end to
end with varied pauses (some shorter than the VAD's minimum silence, so speech regions hold
more than one speaker). The reference turns are the exact sample spans of the utterances.
Files are cached by content (script, voices, pauses) in the given folder.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class Voice:
    name: str  # espeak-ng voice, with +variant
    speed: int = 160  # words per minute
    pitch: int = 50


# Voices the resemblyzer encoder tells apart. Accent-only variants (en-us, en-gb+m3,
# en-gb-scotland) are NOT told apart (cross-voice cosine 0.96-0.985, above same-voice 0.91);
# these four voice variants are: same-voice utterance cosine >= 0.90, different <= 0.63.
VOICES = {
    "A": Voice("en-us+edward", 165, 45),
    "B": Voice("en-us+steph", 150, 60),
    "C": Voice("en-us+zac", 175, 50),
    "D": Voice("en-us+travis", 155, 40),
}

# (speaker, text): varied lengths, one short interjection in each.
SCRIPT_2 = [
    (
        "A",
        "Good morning. Thanks for joining the call so early, I know it is not easy with the time difference.",
    ),
    ("B", "No problem at all. I had my coffee already, so I am ready to go."),
    (
        "A",
        "Great. I wanted to go over the launch plan for the new reading app, and then talk about the budget for the spring campaign.",
    ),
    ("B", "Right, of course."),
    (
        "A",
        "The first version goes out to a small group of schools in March. We collect feedback for six weeks and then decide on the wider release.",
    ),
    ("B", "That sounds sensible. How many schools are we talking about, and who picks them?"),
    (
        "A",
        "About twenty. The regional teams suggest them, and we check that they have the tablets they need.",
    ),
    (
        "B",
        "Okay. For the budget, I think we should keep some money back in case the feedback asks for big changes. Maybe a fifth of the total.",
    ),
    ("A", "I agree. Let us write that down and share it with the board on Friday."),
]

SCRIPT_3 = [
    ("A", "Welcome back, everyone. Today we are planning the community garden for the summer."),
    (
        "B",
        "I brought the map of the plot. The north side gets the most sun, so I would put the vegetables there.",
    ),
    (
        "C",
        "What about water? The only tap is at the far end, next to the shed, and the hose is too short.",
    ),
    ("A", "We could buy a longer hose, or put two rain barrels near the beds."),
    (
        "C",
        "Rain barrels are cheaper in the long run, and the children can help fill the watering cans.",
    ),
    ("B", "Oh yes, exactly."),
    (
        "A",
        "Good. Then the flowers go along the fence on the south side, where the soil is dry and sandy.",
    ),
    (
        "B",
        "I can ask the shop on the corner whether they will give us seeds at a discount. They helped the school last year.",
    ),
    (
        "C",
        "And I will make a rota for the weekends, so that nobody has to come every single Saturday.",
    ),
    ("A", "Perfect. Let us meet again in two weeks and see how far we got."),
]

SCRIPT_4 = [
    ("A", "Let us start the quarterly review. Sales first, then support, then the new office."),
    (
        "B",
        "Sales grew by eight percent over the last three months, mostly from the small business plans. The big accounts stayed flat.",
    ),
    (
        "C",
        "Support tickets went down a little, but the average answer time went up, because two people were on leave in August.",
    ),
    (
        "D",
        "Do we know why the big accounts stayed flat? Last quarter we expected them to grow the most.",
    ),
    ("B", "Two of them are waiting for the new reporting features before they renew."),
    ("A", "I see, thanks."),
    (
        "C",
        "On the office, the move is planned for the second week of November. The movers come on a Friday evening.",
    ),
    (
        "D",
        "Will the meeting rooms be ready by then? We have three workshops with customers that month.",
    ),
    (
        "C",
        "The builder says yes, but I would book a hotel room as a backup for the first workshop, just in case.",
    ),
    ("B", "Good idea. I will take care of that today."),
    ("A", "Thank you all. Let us send the notes around by tomorrow morning."),
]

SCRIPTS = {"two": SCRIPT_2, "three": SCRIPT_3, "four": SCRIPT_4}
# Pauses between turns (seconds), cycled: 0.15-0.3 s is below the VAD's minimum silence, so
# such neighbours share one speech region and only the embeddings can tell them apart.
PAUSES = (0.4, 0.2, 0.7, 0.3, 0.15, 0.5, 0.9, 0.25)


def variant(rotation: int) -> tuple[dict[str, Voice], tuple[float, ...]]:
    """Voices rotated over the roles and pauses shifted by ``rotation`` (0: the defaults):
    more conversations from the same scripts, for measuring (bench/speakers.py)."""
    keys = list(VOICES)
    voices = {k: VOICES[keys[(i + rotation) % len(keys)]] for i, k in enumerate(keys)}
    r = rotation % len(PAUSES)
    return voices, PAUSES[r:] + PAUSES[:r]


@dataclass
class Conversation:
    path: Path
    audio: np.ndarray
    turns: list[tuple[float, float, str]]  # reference (start s, end s, speaker)
    texts: list[tuple[str, str]]  # (speaker, text) in order

    @property
    def speakers(self) -> list[str]:
        return list(dict.fromkeys(s for _, _, s in self.turns))

    def text_by_speaker(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for who, text in self.texts:
            out[who] = (out.get(who, "") + " " + text).strip()
        return out


def synthesize(text: str, voice: Voice) -> np.ndarray:
    """espeak-ng speech at 16 kHz, trimmed to where the voice is heard."""
    from deskscribe.audio.decode import decode_audio

    if shutil.which("espeak-ng") is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "u.wav"
        subprocess.run(
            [
                "espeak-ng",
                "-v",
                voice.name,
                "-s",
                str(voice.speed),
                "-p",
                str(voice.pitch),
                "-w",
                str(wav),
                text,
            ],
            check=True,
            capture_output=True,
        )
        audio = decode_audio(wav)
    return trim(audio)


def trim(audio: np.ndarray, frame: int = 160) -> np.ndarray:
    n = audio.shape[0] // frame
    rms = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1))
    loud = np.flatnonzero(rms > 0.01 * rms.max())
    if loud.size == 0:
        return audio[:0]
    return audio[loud[0] * frame : (loud[-1] + 1) * frame]


def build(
    name: str,
    folder: Path,
    script: list[tuple[str, str]] | None = None,
    voices: dict[str, Voice] | None = None,
    pauses: tuple[float, ...] = PAUSES,
) -> Conversation:
    """The conversation ``name`` (a key of SCRIPTS unless ``script`` is given), cached."""
    script = script or SCRIPTS[name]
    voices = voices or VOICES
    key = json.dumps([script, {k: v.__dict__ for k, v in voices.items()}, pauses])
    digest = hashlib.sha256(key.encode()).hexdigest()[:10]
    wav_path = folder / f"conversation-{name}-{digest}.wav"
    ref_path = wav_path.with_suffix(".json")
    if not (wav_path.exists() and ref_path.exists()):
        folder.mkdir(parents=True, exist_ok=True)
        pieces, turns, pos = [], [], 0.5
        pieces.append(np.zeros(int(0.5 * SAMPLE_RATE), dtype=np.float32))
        for i, (who, text) in enumerate(script):
            speech = synthesize(text, voices[who])
            speech = 0.5 * speech / max(float(np.max(np.abs(speech))), 1e-6)
            turns.append((round(pos, 4), round(pos + speech.shape[0] / SAMPLE_RATE, 4), who))
            pause = pauses[i % len(pauses)] if i < len(script) - 1 else 0.6
            gap = np.zeros(int(pause * SAMPLE_RATE), dtype=np.float32)
            pieces += [speech.astype(np.float32), gap]
            pos += (speech.shape[0] + gap.shape[0]) / SAMPLE_RATE
        write_wav(wav_path, np.concatenate(pieces))
        ref_path.write_text(json.dumps({"turns": turns, "texts": script}), encoding="utf-8")
    ref = json.loads(ref_path.read_text(encoding="utf-8"))
    return Conversation(
        path=wav_path,
        audio=read_wav(wav_path),
        turns=[(float(a), float(b), str(s)) for a, b, s in ref["turns"]],
        texts=[(str(s), str(t)) for s, t in ref["texts"]],
    )


def write_wav(path: Path, audio: np.ndarray) -> Path:
    """16-bit mono WAV at 16 kHz, written atomically; returns ``path``."""
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    tmp = path.with_suffix(".tmp")
    with wave.open(str(tmp), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(pcm.tobytes())
    tmp.replace(path)
    return path


def clip_offset(recorded: np.ndarray, clip: np.ndarray) -> float:
    """Where ``clip`` starts in ``recorded`` (s), from their 10 ms loudness envelopes
    (for speech played into a sink and captured from its monitor)."""

    def envelope(x: np.ndarray) -> np.ndarray:
        n = x.shape[0] // 160
        return np.sqrt(np.mean(x[: n * 160].reshape(n, 160) ** 2, axis=1))

    a, b = envelope(recorded), envelope(clip)
    size = 1 << int(np.ceil(np.log2(a.shape[0] + b.shape[0])))
    corr = np.fft.irfft(np.fft.rfft(a, size) * np.conj(np.fft.rfft(b, size)), size)
    return int(np.argmax(corr[: a.shape[0]])) * 160 / SAMPLE_RATE


def best_match(near: np.ndarray, piece: np.ndarray) -> tuple[int, float]:
    """(offset in ``near``, score) where ``piece`` matches best: the normalized
    cross-correlation at every offset where it fits whole (score 1.0: the same waveform)."""
    near, piece = near.astype(np.float64), piece.astype(np.float64)
    size = piece.shape[0]
    dots = np.correlate(near, piece, mode="valid")
    energy = np.concatenate([[0.0], np.cumsum(near**2)])
    scores = dots / (
        np.sqrt(np.maximum(energy[size:] - energy[:-size], 1e-12)) * np.linalg.norm(piece)
    )
    best = int(np.argmax(scores))
    return best, float(scores[best])


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return data.astype(np.float32) / 32768.0


def read_rttm(path: Path) -> list[tuple[float, float, str]]:
    turns = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        f = line.split()
        if f and f[0] == "SPEAKER":
            start, dur = float(f[3]), float(f[4])
            turns.append((start, start + dur, f[7]))
    return turns


def read_stm(path: Path) -> list[tuple[str, float, float, str]]:
    """(speaker, start, end, text) rows of an STM file."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        f = line.split(maxsplit=5)
        if len(f) >= 5 and not line.startswith(";;"):
            rows.append((f[2], float(f[3]), float(f[4]), f[5] if len(f) > 5 else ""))
    return rows


def commit_batches(words: list, how: str, seed: int) -> list[list]:
    """Words grouped as the live transcriber may commit them: whole speech regions (cut at
    0.6 s of silence, as the VAD ends an utterance; such a region often holds the end of one
    turn and the start of the next), runs of 1-12 words cut anywhere (a slow machine commits
    more at once), or of 1-4 words (LocalAgreement on a fast one: a word or two per pass)."""
    if how == "regions":
        out: list[list] = [[]]
        for w in words:
            if out[-1] and w.start - out[-1][-1].end >= 0.6:
                out.append([])
            out[-1].append(w)
        return out
    rng = np.random.default_rng(seed)
    most = 4 if how == "words" else 12
    cuts = np.cumsum(rng.integers(1, most + 1, size=len(words)))
    return [words[a:b] for a, b in zip(np.r_[0, cuts[:-1]], cuts, strict=True) if a < len(words)]
