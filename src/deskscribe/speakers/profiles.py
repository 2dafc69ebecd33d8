"""Voice profiles: a name and a few voice embeddings, kept on this computer, never audio.

A profile lets a known voice get its name in later transcripts. It holds unit vectors only
(one per saved session speaker, at most ``MAX_EMBEDDINGS``), tied to the speaker model that
made them (vectors of different models are not comparable, even when their sizes agree).
All profiles live in one JSON file in the user data folder (``voice-profiles.json``),
rewritten atomically under a file lock, so the GUI and the CLI can both use it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from filelock import FileLock

from ..errors import DeskScribeError
from ..fsutil import write_atomic
from ..paths import data_dir
from ..transcript import Transcript
from ..transcript.model import default_speaker_name
from .cluster import normalize

FORMAT_NAME = "deskscribe-voice-profiles"
FORMAT_VERSION = 1
MAX_EMBEDDINGS = 20
# Cosine similarity a speaker's centroid needs to a profile's to get its name. Resemblyzer:
# measured on the synthetic conversations (bench/speakers.py): the same voice's centroids in
# different conversations >= 0.95, different voices <= 0.69; 0.85 leaves room for a real
# voice on another microphone. WeSpeaker: a guess from its wider spread, not measured here.
MATCH_THRESHOLDS = {"resemblyzer": 0.85, "wespeaker": 0.5}
DEFAULT_MATCH_THRESHOLD = MATCH_THRESHOLDS["resemblyzer"]


def match_threshold_for(kind: str | None) -> float:
    """The profile match threshold for a speaker model kind (``SpeakerEncoder.kind``)."""
    return MATCH_THRESHOLDS.get(kind or "", DEFAULT_MATCH_THRESHOLD)


class ProfileError(DeskScribeError, ValueError):
    """A profile could not be saved or read (bad name, unreadable file); the message says why."""


@dataclass
class VoiceProfile:
    name: str
    model: str  # the speaker model the embeddings come from
    embeddings: np.ndarray  # [k, dim] unit vectors
    created: str
    updated: str

    @property
    def centroid(self) -> np.ndarray:
        return normalize(self.embeddings.mean(axis=0))

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "model": self.model,
            "created": self.created,
            "updated": self.updated,
            "embeddings": [[round(float(v), 6) for v in e] for e in self.embeddings],
        }

    @classmethod
    def from_dict(cls, data: dict) -> VoiceProfile:
        return cls(
            name=str(data["name"]),
            model=str(data.get("model", "")),
            embeddings=normalize(
                np.array(data["embeddings"], dtype=np.float64).reshape(len(data["embeddings"]), -1)
            ),
            created=str(data.get("created", "")),
            updated=str(data.get("updated", "")),
        )


def profiles_path() -> Path:
    return data_dir() / "voice-profiles.json"


def _read(path: Path) -> list[VoiceProfile]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON
        raise ProfileError(
            f"cannot read the voice profiles in {path} ({e}); move the file away to start afresh"
        ) from e
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise ProfileError(f"{path} is not a DeskScribe voice-profile file")
    version = data.get("version", 0)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ProfileError(
            f"{path} has an invalid version ({version!r}); move the file away to start afresh"
        )
    if version > FORMAT_VERSION:
        raise ProfileError(f"{path} was written by a newer DeskScribe; update to use it")
    try:
        return [VoiceProfile.from_dict(p) for p in data.get("profiles", [])]
    except (KeyError, TypeError, ValueError) as e:
        raise ProfileError(f"malformed voice profile in {path}: {e}") from e


def _write(path: Path, profiles: list[VoiceProfile]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "profiles": [p.to_dict() for p in profiles],
    }
    write_atomic(path, json.dumps(body, ensure_ascii=False, indent=1))


def _lock(path: Path) -> FileLock:
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path) + ".lock", timeout=30)


def list_profiles(model: str | None = None) -> list[VoiceProfile]:
    """All saved profiles (only those of ``model`` when given), in the order they were made."""
    profiles = _read(profiles_path())
    return [p for p in profiles if model is None or p.model == model]


def save_profile(
    name: str,
    embeddings: np.ndarray | Sequence[np.ndarray],
    *,
    model: str = "",
    replace: bool = False,
) -> VoiceProfile:
    """Save ``embeddings`` ([dim] or [k, dim]) under ``name`` for ``model``.

    An existing profile of the same name and model learns the new embeddings (the oldest are
    dropped beyond ``MAX_EMBEDDINGS``) unless ``replace``.
    """
    name = " ".join(str(name).split())
    if not name:
        raise ProfileError("a voice profile needs a name")
    emb = normalize(np.asarray(embeddings, dtype=np.float64))
    emb = emb.reshape(1, -1) if emb.ndim == 1 else emb
    if emb.size == 0 or not np.all(np.isfinite(emb)):
        raise ProfileError("a voice profile needs at least one finite embedding")
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    path = profiles_path()
    with _lock(path):
        profiles = _read(path)
        for p in profiles:
            if p.name.casefold() == name.casefold() and p.model == model:
                if p.embeddings.shape[1] != emb.shape[1]:
                    raise ProfileError(
                        f"the profile {p.name!r} holds {p.embeddings.shape[1]}-dim embeddings, "
                        f"not {emb.shape[1]}; delete it first"
                    )
                kept = emb if replace else np.concatenate([p.embeddings, emb])
                p.embeddings, p.updated, p.name = kept[-MAX_EMBEDDINGS:], now, name
                profile = p
                break
        else:
            profile = VoiceProfile(name, model, emb[-MAX_EMBEDDINGS:], now, now)
            profiles.append(profile)
        _write(path, profiles)
    return profile


def delete_profile(name: str, model: str | None = None) -> bool:
    """Delete the profile ``name`` (of every model unless ``model``); False when none was there."""
    path = profiles_path()
    with _lock(path):
        profiles = _read(path)
        kept = [
            p
            for p in profiles
            if not (p.name.casefold() == name.strip().casefold() and model in (None, p.model))
        ]
        if len(kept) == len(profiles):
            return False
        _write(path, kept)
    return True


def match(
    centroid: np.ndarray,
    threshold: float = DEFAULT_MATCH_THRESHOLD,
    *,
    model: str | None = None,
    profiles: list[VoiceProfile] | None = None,
) -> str | None:
    """The name of the profile most similar to ``centroid`` if at least ``threshold``."""
    scores = _scores(centroid, profiles if profiles is not None else list_profiles(model))
    if not scores:
        return None
    name, best = max(scores.items(), key=lambda kv: kv[1])
    return name if best >= threshold else None


def _scores(centroid: np.ndarray, profiles: list[VoiceProfile]) -> dict[str, float]:
    c = normalize(np.asarray(centroid, dtype=np.float64).reshape(-1))
    return {p.name: float(p.centroid @ c) for p in profiles if p.embeddings.shape[1] == c.shape[0]}


def apply_profiles(
    transcript: Transcript,
    centroids: dict[str, np.ndarray],
    threshold: float = DEFAULT_MATCH_THRESHOLD,
    *,
    model: str | None = None,
    profiles: list[VoiceProfile] | None = None,
) -> dict[str, str]:
    """Name the transcript's speakers whose voice matches a profile; returns {id: name}.

    Each profile names at most one speaker (the most similar); names the user already gave
    (anything but the default ``Speaker N``) are kept.
    """
    known = profiles if profiles is not None else list_profiles(model)
    pairs = sorted(
        (
            (score, sid, name)
            for sid, c in centroids.items()
            for name, score in _scores(c, known).items()
            if score >= threshold
        ),
        reverse=True,
    )
    named: dict[str, str] = {}
    used: set[str] = set()
    for _, sid, name in pairs:
        if sid in named or name in used or _user_named(transcript, sid):
            continue
        transcript.rename_speaker(sid, name)
        named[sid] = name
        used.add(name)
    return named


def _user_named(transcript: Transcript, speaker_id: str) -> bool:
    name = transcript.speakers.get(speaker_id)
    return bool(name) and name != default_speaker_name(speaker_id)


def save_speaker(
    transcript: Transcript,
    speaker_id: str,
    centroids: dict[str, np.ndarray],
    name: str | None = None,
    *,
    model: str = "",
) -> VoiceProfile:
    """Save a transcript speaker as a profile under ``name`` (default: their display name)."""
    if speaker_id not in centroids:
        raise ProfileError(f"no voice embedding for speaker {speaker_id!r} in this transcript")
    return save_profile(
        name or transcript.speaker_name(speaker_id), centroids[speaker_id], model=model
    )


def find_speaker(transcript: Transcript, who: str) -> str:
    """The speaker id for ``who``: an id ("S1") or a display name (case ignored)."""
    ids = transcript.speaker_ids()
    if who in ids:
        return who
    named = [s for s in ids if transcript.speaker_name(s).casefold() == who.strip().casefold()]
    if len(named) == 1:
        return named[0]
    listed = ", ".join(f"{s} ({transcript.speaker_name(s)})" for s in ids) or "none"
    raise ProfileError(f"no speaker {who!r} in this transcript; its speakers: {listed}")


def voice_of(
    audio: np.ndarray,
    transcript: Transcript,
    speaker_id: str,
    encoder,
    *,
    piece_seconds: float = 10.0,
    max_seconds: float = 180.0,
) -> np.ndarray:
    """The voice of ``speaker_id`` in ``audio`` (16 kHz, the transcript's timeline): the
    length-weighted mean embedding of their segments (1 s or longer, cut into pieces of at
    most ``piece_seconds``, the first ``max_seconds`` of their speech), as a unit vector."""
    sr = 16000
    windows: list[tuple[int, int]] = []
    total = 0.0
    for seg in transcript.segments:
        if seg.speaker != speaker_id or seg.end - seg.start < 1.0 or total >= max_seconds:
            continue
        start = seg.start
        while seg.end - start >= 1.0 and total < max_seconds:
            stop = min(seg.end, start + piece_seconds)
            a, b = int(start * sr), min(int(stop * sr), audio.shape[0])
            if b - a >= sr:
                windows.append((a, b))
                total += (b - a) / sr
            start = stop
    if not windows:
        raise ProfileError(
            f"{transcript.speaker_name(speaker_id)} has no stretch of speech of 1 s or more "
            "in this recording to learn the voice from"
        )
    embeddings = encoder.embed_windows(audio, windows)
    weights = np.array([b - a for a, b in windows], dtype=np.float64)
    return normalize(np.average(np.asarray(embeddings, np.float64), axis=0, weights=weights))


def remember_voice(
    transcript: Transcript,
    speaker_id: str,
    encoder,
    *,
    name: str | None = None,
    audio: np.ndarray | None = None,
) -> VoiceProfile:
    """Save the voice of a transcript's speaker as a profile (default name: their display
    name), from ``audio`` or else the transcript's source (a media file or a recorded
    session folder). Later transcripts then give that voice this name."""
    from ..audio.decode import MediaError
    from ..audio.playback import PlaybackError, load_audio

    if audio is None:
        if not transcript.source or not Path(transcript.source).exists():
            raise ProfileError(
                "the audio of this transcript is no longer where it was "
                f"({transcript.source or 'unknown'}); a voice is learnt from the recording"
            )
        try:
            audio = load_audio(transcript.source)
        except (MediaError, PlaybackError, OSError, ValueError) as err:
            raise ProfileError(f"cannot read the recording to learn the voice: {err}") from err
    vector = voice_of(audio, transcript, speaker_id, encoder)
    return save_profile(
        name or transcript.speaker_name(speaker_id), vector, model=getattr(encoder, "name", "")
    )
