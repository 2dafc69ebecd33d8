"""A transcript as each of OpenAI's response formats, field for field as the SDK reads them.

``json``: ``{"text", "usage"}`` (+ ``logprobs`` with ``include[]=logprobs``); ``text``;
``srt`` / ``vtt`` (our exporters); ``verbose_json``: language, duration, text, and
``segments`` / ``words`` as ``timestamp_granularities[]`` asks (segments by default); and
``diarized_json``: segments with speakers (A, B, ... unless profiles named them).

Fields we compute differently from OpenAI: ``seek`` is the segment's start in 10 ms frames
(our windows do not start at multiples of 30 s); ``logprobs`` are per word (``token`` is the
word, ``logprob`` the log of its probability), not per BPE token.
"""

from __future__ import annotations

import math
import string

from ..transcript import Transcript
from ..transcript.export import render
from ..transcript.model import default_speaker_name
from ..whisper.languages import language_name

FORMATS = ("json", "text", "srt", "vtt", "verbose_json", "diarized_json")
MEDIA_TYPES = {"text": "text/plain", "srt": "application/x-subrip", "vtt": "text/vtt"}


def text_of(transcript: Transcript) -> str:
    return " ".join(s.text.strip() for s in transcript.segments if s.text.strip())


def usage(transcript: Transcript) -> dict:
    return {"type": "duration", "seconds": math.ceil(transcript.duration or 0.0)}


def word_logprob(w) -> dict:
    """A word's logprob entry: the token is the word as it is in the text, the logprob that of
    its probability (per word, not per BPE token), the bytes its UTF-8."""
    return {
        "token": w.text,
        "logprob": math.log(max(w.probability, 1e-12)),
        "bytes": list(w.text.encode("utf-8")),
    }


def logprobs(transcript: Transcript) -> list[dict]:
    return [word_logprob(w) for s in transcript.segments for w in s.words]


def speaker_letters(transcript: Transcript) -> dict[str, str]:
    """Speaker ids (S1, S2, ...) as OpenAI labels them: A, B, ...; a name given by a voice
    profile is kept."""
    out: dict[str, str] = {}
    for seg in transcript.segments:
        sid = seg.speaker
        if sid is None or sid in out:
            continue
        named = transcript.speakers.get(sid)
        if named == default_speaker_name(sid):
            named = None
        n = len(out)
        letter = string.ascii_uppercase[n % 26] + (str(n // 26) if n >= 26 else "")
        out[sid] = named or letter
    return out


def verbose(transcript: Transcript, granularities: set[str], task: str = "transcribe") -> dict:
    body: dict = {
        "task": task,
        "language": language_name(transcript.language).lower() if transcript.language else "",
        "duration": float(transcript.duration or 0.0),
        "text": text_of(transcript),
        "usage": usage(transcript),
    }
    if "segment" in granularities or not granularities:
        body["segments"] = [
            {
                "id": i,
                "seek": round(s.start * 100),
                "start": float(s.start),
                "end": float(s.end),
                "text": s.text if s.text.startswith(" ") else " " + s.text,
                "tokens": list(s.tokens),
                "temperature": float(s.temperature),
                "avg_logprob": float(s.avg_logprob),
                "compression_ratio": float(s.compression_ratio),
                "no_speech_prob": float(s.no_speech_prob),
            }
            for i, s in enumerate(transcript.segments)
        ]
    if "word" in granularities:
        body["words"] = [
            {"word": w.text.strip(), "start": float(w.start), "end": float(w.end)}
            for s in transcript.segments
            for w in s.words
            if w.text.strip()
        ]
    return body


def diarized(transcript: Transcript) -> dict:
    letters = speaker_letters(transcript)
    return {
        "task": "transcribe",
        "duration": float(transcript.duration or 0.0),
        "text": text_of(transcript),
        "segments": [
            {
                "type": "transcript.text.segment",
                "id": f"seg_{i}",
                "start": float(s.start),
                "end": float(s.end),
                "text": s.text.strip(),
                "speaker": letters.get(s.speaker or "", "A"),
            }
            for i, s in enumerate(transcript.segments)
            if s.text.strip()
        ],
        "usage": usage(transcript),
    }


def body(
    transcript: Transcript,
    fmt: str,
    *,
    granularities: set[str] = frozenset(),  # type: ignore[assignment]
    include_logprobs: bool = False,
    task: str = "transcribe",
) -> dict | str:
    """The response body: a dict for the JSON formats, text for the others."""
    if fmt == "json":
        out: dict = {"text": text_of(transcript), "usage": usage(transcript)}
        if include_logprobs:
            out["logprobs"] = logprobs(transcript)
        return out
    if fmt == "verbose_json":
        return verbose(transcript, granularities, task)
    if fmt == "diarized_json":
        return diarized(transcript)
    if fmt == "text":
        return text_of(transcript) + "\n"
    rendered = render(transcript, fmt)
    return rendered if isinstance(rendered, str) else rendered.decode("utf-8")
