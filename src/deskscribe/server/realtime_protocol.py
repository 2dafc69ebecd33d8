"""OpenAI's Realtime transcription protocol, without the socket: the session settings both
shapes of it carry (GA ``session.update`` with ``session.audio.input.*``, beta
``transcription_session.update`` with ``input_audio_*``), checked field by field with messages
that name the field, the ``session`` objects sent back, and the ``error`` event. The
connection lives in ``realtime.py``, the decoding in ``realtime_decoder.py``."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from .errors import ApiError

RATES = (24000, 16000)  # what clients may send; 24 kHz is the protocol's own
LOGPROBS = "item.input_audio_transcription.logprobs"  # the one ``include`` there is
DEFAULT_VAD = {"threshold": 0.5, "prefix_padding_ms": 250, "silence_duration_ms": 600}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def clip(text: str, n: int = 64) -> str:
    """A client's string as echoed back in a message: at most ``n`` characters."""
    return text if len(text) <= n else text[:n] + "…"


def error_event(
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    client_event_id: str | None = None,
    type: str = "invalid_request_error",
) -> dict:
    """OpenAI's error event (``RealtimeErrorEvent``). What a client sent is echoed clipped
    (an event id, a value in a message): an error never costs more than the event did."""
    event_id = clip(client_event_id, 128) if client_event_id is not None else None
    return {"type": "error", "error": {"type": type, "code": code, "message": clip(message, 1024),
                                       "param": clip(param, 128) if param else param,
                                       "event_id": event_id}}  # fmt: skip


# --------------------------------------------------------------------------- settings


@dataclass
class Settings:
    """A session's effective configuration (what ``session.updated`` reports)."""

    rate: int = 24000
    model: str | None = None  # as the client named it; None: the server's default
    language: str | None = None
    prompt: str | None = None  # given to the model in every pass (prompt.py's vocabulary)
    vad: dict | None = field(default_factory=lambda: dict(DEFAULT_VAD))  # None: client commits
    logprobs: bool = False  # include: deltas and completed items carry per-word logprobs

    def streaming(self):
        from ..whisper.streaming import StreamingOptions

        vad = self.vad or DEFAULT_VAD
        return StreamingOptions(
            language=self.language,
            vocabulary=self.prompt,
            vad_threshold=vad["threshold"],
            end_of_utterance_ms=vad["silence_duration_ms"],
            speech_pad_ms=vad["prefix_padding_ms"],
        )

    def apply(self, patch: dict) -> Settings:
        new = replace(self, vad=dict(self.vad) if self.vad else None)
        if "rate" in patch:
            new.rate = patch["rate"]
        if "transcription" in patch:
            t = patch["transcription"]
            if t is None:  # "null turns it off": here it goes back to the defaults
                new.model = new.language = new.prompt = None
            else:
                for key, value in t.items():
                    setattr(new, key, value)
        if "vad" in patch:
            new.vad = None if patch["vad"] is None else {**(self.vad or DEFAULT_VAD),
                                                         **patch["vad"]}  # fmt: skip
        if "logprobs" in patch:
            new.logprobs = patch["logprobs"]
        return new

    def changes_engine(self, other: Settings) -> bool:
        return (self.model, self.language, self.prompt, self.vad) != (
            other.model, other.language, other.prompt, other.vad)  # fmt: skip


def _transcription(s: Settings, model_name: str | None) -> dict:
    return {"model": s.model or model_name, "language": s.language, "prompt": s.prompt}


def _include(s: Settings) -> list[str]:
    return [LOGPROBS] if s.logprobs else []


def _include_patch(include, param: str) -> bool:
    """``include``: null or a list of which only the logprobs entry is known."""
    if include is None:
        return False
    if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise invalid(f"{param} must be a list of strings", param, "invalid_type")
    unknown = [x for x in include if x != LOGPROBS]
    if unknown:
        raise invalid(f"{param}: {unknown[0]!r} is not supported; the one value is "
                      f"{LOGPROBS!r}", param)  # fmt: skip
    return bool(include)


def _turn(s: Settings) -> dict | None:
    return None if s.vad is None else {"type": "server_vad", **s.vad}


def ga_session(sid: str, s: Settings, model_name: str | None) -> dict:
    """``RealtimeTranscriptionSessionCreateRequest`` (GA)."""
    return {
        "type": "transcription",
        "id": sid,
        "object": "realtime.transcription_session",
        "audio": {"input": {"format": {"type": "audio/pcm", "rate": s.rate},
                            "transcription": _transcription(s, model_name),
                            "turn_detection": _turn(s), "noise_reduction": None}},
        "include": _include(s),
    }  # fmt: skip


def beta_session(sid: str, s: Settings, model_name: str | None) -> dict:
    """``TranscriptionSession`` (beta)."""
    return {
        "id": sid,
        "object": "realtime.transcription_session",
        "modalities": ["text"],
        "input_audio_format": "pcm16",
        "input_audio_transcription": _transcription(s, model_name),
        "turn_detection": _turn(s),
        "input_audio_noise_reduction": None,
        "include": _include(s),
    }


def invalid(message: str, param: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _dict(value, param: str) -> dict:
    if not isinstance(value, dict):
        raise invalid(f"{param} must be an object", param, "invalid_type")
    return value


def _transcription_patch(t, param: str) -> dict | None:
    if t is None:
        return None
    t = _dict(t, param)
    out = {}
    for key in ("model", "language", "prompt"):
        if key in t:
            value = t[key]
            if value is not None and not isinstance(value, str):
                raise invalid(f"{param}.{key} must be a string", f"{param}.{key}", "invalid_type")
            value = (value or "").strip() or None
            out[key] = value.lower() if key == "language" and value else value
    if t.get("keywords"):  # gpt-transcribe's word list: our vocabulary does the same
        words = t["keywords"]
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise invalid(f"{param}.keywords must be a list of strings", f"{param}.keywords")
        out["prompt"] = ", ".join([*([out["prompt"]] if out.get("prompt") else []), *words])
    return out


def _number(d: dict, key: str, param: str, lo: float, hi: float, integer: bool):
    value = d[key]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and integer:
        ok = float(value).is_integer()
    if not ok or not lo <= value <= hi:
        kind = "an integer" if integer else "a number"
        raise invalid(f"{param}.{key} must be {kind} from {lo:g} to {hi:g}; got {value!r}",
                       f"{param}.{key}")  # fmt: skip
    return int(value) if integer else float(value)


def _vad_patch(td, param: str) -> dict | None:
    if td is None:
        return None
    td = _dict(td, param)
    kind = td.get("type") or "server_vad"
    if kind != "server_vad":
        raise invalid(f"turn detection {kind!r} is not supported: use \"server_vad\" (voice "
                       "activity detection) or null (the client commits)", f"{param}.type")  # fmt: skip
    out = {}
    for key, lo, hi, integer in (("threshold", 0.0, 1.0, False),
                                 ("prefix_padding_ms", 0, 10000, True),
                                 ("silence_duration_ms", 32, 10000, True)):  # fmt: skip
        if td.get(key) is not None:
            out[key] = _number(td, key, param, lo, hi, integer)
    return out


def parse_ga(session) -> dict:
    """The changes a GA ``session.update`` asks for (a patch); ``ApiError`` if one is invalid."""
    s = _dict(session, "session")
    if s.get("type") not in (None, "transcription"):
        raise invalid(f"this server runs transcription sessions only (session.type "
                       f"\"transcription\"); got {s['type']!r}", "session.type")  # fmt: skip
    inp = _dict(_dict(s.get("audio") or {}, "session.audio").get("input") or {},
                "session.audio.input")  # fmt: skip
    patch: dict = {}
    if inp.get("format") is not None:
        fmt = _dict(inp["format"], "session.audio.input.format")
        rate = fmt.get("rate") or 24000
        if fmt.get("type", "audio/pcm") != "audio/pcm" or rate not in RATES:
            raise invalid(
                f"unsupported audio format {fmt.get('type')!r} at {rate!r} Hz: this server "
                "takes {\"type\": \"audio/pcm\", \"rate\": 24000} (pcm16 mono little-endian; "
                "rate 16000 also works)", "session.audio.input.format")  # fmt: skip
        patch["rate"] = int(rate)
    if "transcription" in inp:
        patch["transcription"] = _transcription_patch(
            inp["transcription"], "session.audio.input.transcription"
        )
    if "turn_detection" in inp:
        patch["vad"] = _vad_patch(inp["turn_detection"], "session.audio.input.turn_detection")
    if "include" in s:
        patch["logprobs"] = _include_patch(s["include"], "session.include")
    return patch


def parse_beta(session) -> dict:
    """The changes a beta ``transcription_session.update`` asks for."""
    s = _dict(session, "session")
    patch: dict = {}
    if s.get("input_audio_format") is not None:
        if s["input_audio_format"] != "pcm16":
            raise invalid(f"unsupported input_audio_format {s['input_audio_format']!r}: this "
                           "server takes \"pcm16\" (16-bit mono little-endian at 24 kHz)",
                           "session.input_audio_format")  # fmt: skip
        patch["rate"] = 24000
    if "input_audio_transcription" in s:
        patch["transcription"] = _transcription_patch(
            s["input_audio_transcription"], "session.input_audio_transcription"
        )
    if "turn_detection" in s:
        patch["vad"] = _vad_patch(s["turn_detection"], "session.turn_detection")
    if "include" in s:
        patch["logprobs"] = _include_patch(s["include"], "session.include")
    return patch


# --------------------------------------------------------------------------- decoding thread
