"""One transcription request: its fields as OpenAI's SDK sends them (multipart form), checked
with messages that name the field, and the work itself, run on a worker thread.

Shared by ``POST /v1/audio/transcriptions`` / ``translations`` and the job API.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..audio.decode import MediaError, MediaTooLongError, probe
from ..audio.transcode import transcode
from ..audio.vad import VadOptions
from ..errors import Cancelled
from ..service.failures import Kind, describe_failure
from ..transcript import Segment, Transcript
from ..whisper.options import TranscribeOptions
from .errors import ApiError, bad_request
from .formats import FORMATS

log = logging.getLogger(__name__)

TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
GRANULARITIES = ("word", "segment")


@dataclass
class Fields:
    """The form fields of a transcription (or translation) request."""

    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    response_format: str = "json"
    temperature: float = 0.0
    granularities: set[str] = field(default_factory=set)
    stream: bool = False
    chunking: dict | None = None  # None: our choice (batched on VAD chunks)
    include_logprobs: bool = False
    task: str = "transcribe"
    speakers: str | None = None  # our extension for diarized_json: auto / N / MIN-MAX
    # Our extension: detect the language among these codes only (the app's "Languages").
    languages: list[str] = field(default_factory=list)
    filename: str = "file"  # the upload's name, for messages (not a form field)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["granularities"] = sorted(self.granularities)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Fields:
        data = json.loads(text)
        data["granularities"] = set(data.get("granularities", ()))
        return cls(**data)


def _one(form, name: str) -> str | None:
    values = [v for v in form.getlist(name) if isinstance(v, str)]
    return values[-1].strip() if values else None


def _many(form, name: str) -> list[str]:
    """An array field: OpenAI's SDK sends ``name[]`` once per item; plain ``name`` (repeated
    or comma-separated) is taken too."""
    out: list[str] = []
    for key in (f"{name}[]", name):
        for v in form.getlist(key):
            if isinstance(v, str):
                out.extend(p.strip() for p in v.split(",") if p.strip())
    return out


def _flag(form, name: str) -> bool:
    value = (_one(form, name) or "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise bad_request(f"{name} must be true or false, not {value!r}", name)
    return value in ("true", "1")


def parse_fields(form, task: str = "transcribe") -> Fields:
    f = Fields(task=task)
    f.model = _one(form, "model") or None
    f.language = (_one(form, "language") or "").lower() or None
    f.prompt = _one(form, "prompt") or None
    f.response_format = (_one(form, "response_format") or "json").lower()
    allowed = FORMATS if task == "transcribe" else tuple(x for x in FORMATS if x != "diarized_json")
    if f.response_format not in allowed:
        raise bad_request(
            f"response_format {f.response_format!r} is not supported; use one of "
            + ", ".join(allowed),
            "response_format",
        )
    raw_t = _one(form, "temperature")
    if raw_t:
        try:
            f.temperature = float(raw_t)
        except ValueError:
            raise bad_request(
                f"temperature must be a number, not {raw_t!r}", "temperature"
            ) from None
        if not 0.0 <= f.temperature <= 1.0:
            raise bad_request("temperature must be between 0 and 1", "temperature")
    grains = _many(form, "timestamp_granularities")
    unknown = [g for g in grains if g not in GRANULARITIES]
    if unknown:
        raise bad_request(
            f"timestamp_granularities: {unknown[0]!r} is not one of word, segment",
            "timestamp_granularities",
        )
    f.granularities = set(grains)
    if f.granularities and f.response_format != "verbose_json":
        raise bad_request(
            "timestamp_granularities needs response_format=verbose_json",
            "timestamp_granularities",
        )
    f.stream = _flag(form, "stream")
    if f.stream and f.response_format not in ("json", "text"):
        raise bad_request(
            "stream=true gives text events; use response_format json or text with it",
            "stream",
        )
    include = _many(form, "include")
    bad = [x for x in include if x != "logprobs"]
    if bad:
        raise bad_request(f"include: {bad[0]!r} is not supported (only logprobs)", "include")
    f.include_logprobs = "logprobs" in include
    f.chunking = _chunking(_one(form, "chunking_strategy"))
    f.speakers = _one(form, "speakers") or None
    f.languages = [c.lower() for c in _many(form, "languages") if c]
    if f.languages and f.language:
        raise bad_request("give either language or languages, not both", "languages")
    return f


def _chunking(raw: str | None) -> dict | None:
    if raw is None or raw == "":
        return None
    if raw == "auto":
        return {"type": "auto"}
    try:
        value = json.loads(raw)
    except ValueError:
        raise bad_request(
            'chunking_strategy must be "auto" or {"type": "server_vad", ...}',
            "chunking_strategy",
        ) from None
    if value == "auto":
        return {"type": "auto"}
    if not isinstance(value, dict) or value.get("type") != "server_vad":
        raise bad_request('chunking_strategy.type must be "server_vad"', "chunking_strategy")
    for key in ("threshold", "prefix_padding_ms", "silence_duration_ms"):
        if key in value and not isinstance(value[key], int | float):
            raise bad_request(f"chunking_strategy.{key} must be a number", "chunking_strategy")
    return value


def transcribe_options(f: Fields) -> TranscribeOptions:
    vad = None
    if f.chunking and f.chunking.get("type") == "server_vad":
        c = f.chunking
        vad = VadOptions(
            threshold=float(c.get("threshold", 0.5)),
            min_silence_ms=int(c.get("silence_duration_ms", 500)),
            speech_pad_ms=int(c.get("prefix_padding_ms", 200)),
        )
    return TranscribeOptions(
        language=f.language,
        languages=tuple(f.languages),
        task=f.task,
        temperatures=tuple(t for t in TEMPERATURES if t >= f.temperature) or (f.temperature,),
        initial_prompt=f.prompt,
        # Subtitles are cut at words, by their times (transcript.subtitles).
        word_timestamps="word" in f.granularities
        or f.include_logprobs
        or f.response_format in ("srt", "vtt"),
        batched=True,
        vad=vad,
    )


def check_media(path: Path, filename: str, max_seconds: float, what: str = "request"):
    """The stored upload's ``MediaInfo`` from its headers, for an answer before the request
    waits for a worker: 400 when it is no audio or video container the server takes (a
    playlist is refused; the message names the file as the client called it), 413 when it
    claims to be longer than ``max_seconds``. A claim only: `decoded` measures."""
    try:
        info = probe(path, untrusted=True)
    except MediaError as e:
        raise _unreadable(e, path, filename, "read") from None
    if info.duration is not None and info.duration > max_seconds:
        raise too_long(info.duration, max_seconds, what)
    return info


def _unreadable(e: MediaError, path: Path, filename: str, how: str) -> ApiError:
    message = str(e).replace(path.name, filename)
    return bad_request(f"the uploaded file could not be {how}: {message}", "file")


@contextlib.contextmanager
def decoded(path: Path, filename: str, max_seconds: float, cancel=None, what="request"):
    """The upload decoded once, safely (``audio.transcode``: real media only, at most
    ``max_seconds`` of decoded audio) into a WAV of ours beside it, which every later step
    reads; removed afterwards. 400 / 413 as `check_media`, on what was decoded."""
    wav = path.with_name(path.name + ".decoded.wav")
    wav.unlink(missing_ok=True)  # left by a server killed mid-job
    try:
        transcode(path, wav, max_seconds=max_seconds, cancel=cancel)
    except MediaTooLongError as e:
        raise too_long(e.seconds, max_seconds, what) from None
    except MediaError as e:
        raise _unreadable(e, path, filename, "decoded") from None
    try:
        yield wav
    finally:
        with contextlib.suppress(OSError):
            wav.unlink()


def too_long(seconds: float, max_seconds: float, what: str = "request") -> ApiError:
    hint = " (use the job API, or split it)" if what == "request" else " (split it)"
    return ApiError(
        413,
        f"the audio is over {_minutes(min(seconds, max_seconds + 0.1))} long; this server "
        f"takes at most {_minutes(max_seconds)} per {what}{hint}",
        param="file",
        code="audio_too_long",
    )


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.1f} s"


def _transcribe(state, model, path, f: Fields, options, cancel, on_segment, progress, shared):
    from ..service.files import transcribe_media
    from ..whisper.transcribe import transcribe_file

    if f.response_format == "diarized_json":
        encoder = state.models.speaker_encoder(state.config.device)
        transcript = transcribe_media(
            model, path, options, speakers=f.speakers or "auto", encoder=encoder,
            progress=progress, cancel=cancel,
        )  # fmt: skip
        if on_segment is not None:
            for seg in transcript.segments:
                on_segment(seg)
        return transcript
    return transcribe_file(model, path, options, progress=progress, cancel=cancel,
                           on_segment=on_segment, shared=shared)  # fmt: skip


@dataclass
class Outcome:
    transcript: Transcript
    seconds: float  # processing time
    model: str


def run(
    state,
    path: Path,
    f: Fields,
    *,
    cancel: threading.Event | None = None,
    on_segment: Callable[[Segment], None] | None = None,
    progress=None,
    resolved: tuple[str, Path] | None = None,
    kind: str = "request",
) -> Outcome:
    """Transcribe the stored upload ``path`` (on a worker thread). Raises ``ApiError`` with a
    message that says what is wrong, or ``Cancelled``. ``resolved``, the model's name and
    folder from a handler that has also checked the media (``check_media``), spares the
    request the lookup and the probe done already."""
    t0 = time.monotonic()
    config = state.config
    what = "file" if kind == "job" else "request"
    if resolved is None:
        check_media(path, f.filename, config.max_audio_seconds, what)
    name, folder = resolved or state.model_folder(f.model)
    try:
        model = state.models.model(str(folder), config.device)
        options = transcribe_options(f)
        # Chunks of requests running at the same time are decoded in shared batches.
        with (
            decoded(path, f.filename, config.max_audio_seconds, cancel, what) as audio,
            state.shared_member() as shared,
        ):
            transcript = _transcribe(state, model, audio, f, options, cancel, on_segment,
                                     progress, shared)  # fmt: skip
    except (Cancelled, ApiError):
        raise
    except Exception as e:
        raise api_error(e, f, name, path) from None
    transcript.model = name
    return Outcome(transcript, time.monotonic() - t0, name)


def api_error(e: BaseException, f: Fields, name: str, path: Path | None = None) -> ApiError:
    """The server's answer for a failed transcription: ``service.failures``' message, in the
    request's terms (the client's file name, the field to fix, the model's name)."""
    m = describe_failure(e)
    param = {Kind.MEDIA: "file", Kind.DECODING: "language" if f.language else "model",
             Kind.MODEL_MISSING: "model", Kind.SPEAKER_MODEL: "response_format"}.get(m.kind)  # fmt: skip
    text, status = m.text, m.status
    if m.kind is Kind.MEDIA and path is not None:
        text = "the uploaded file could not be decoded: " + text.replace(path.name, f.filename)
    elif m.kind in (Kind.MODEL_MISSING, Kind.SPEAKER_MODEL) and (
        f.speakers or f.response_format == "diarized_json"
    ):
        text, status = "diarized_json needs a speaker model on the server: " + text, 400
        param = "response_format"
    elif m.kind is Kind.MODEL_BROKEN:
        text = f"the model {name!r} is broken on the server: {text}"
    elif m.kind is Kind.MEMORY:
        text = "the server ran out of memory; retry later"
    return ApiError(status, text, param=param, code=m.code)
