"""Every way a transcription can fail, said once: ``describe_failure(err)`` turns an exception
into a `UserMessage` (what kind of failure, a message fit for the user, the HTTP status and
OpenAI error code a server answers with). The file queue, ``deskscribe transcribe``, the
team server and its Ray replicas all ask here, so a new error class is one edit.

Errors raised on purpose are `DeskScribeError`s whose text already says what to do; the
engine's, memory and unexpected ones get a sentence around their first line.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import Enum

from ..audio.decode import MediaError, MediaTooLongError
from ..errors import Cancelled, EngineError, first_line
from ..models.store import ModelNotInstalledError
from ..speakers.encoder import SpeakerModelError
from ..whisper.decoding import DecodingError
from ..whisper.model import ModelNotBuiltError
from ..whisper.runtime import DeviceError

log = logging.getLogger(__name__)


class Kind(str, Enum):
    MEDIA = "media"  # the file: not media, damaged, empty, too long, changed while read
    DECODING = "decoding"  # the request: a language the model lacks, a bad option
    MODEL_MISSING = "model_missing"
    MODEL_BROKEN = "model_broken"
    SPEAKER_MODEL = "speaker_model"
    DEVICE = "device"
    ENGINE = "engine"  # the runtime failed while running the model
    MEMORY = "memory"
    CANCELLED = "cancelled"
    BUG = "bug"  # anything else: a bug, logged with its traceback


@dataclass(frozen=True)
class UserMessage:
    kind: Kind
    text: str  # fit for the user: what went wrong and, where there is one, what to do
    status: int  # what a server answers with
    code: str | None = None  # OpenAI's error code, where one fits

    def __str__(self) -> str:
        return self.text


def describe_failure(err: BaseException) -> UserMessage:
    """The `UserMessage` for ``err`` (logged with its traceback when it is a bug)."""
    if isinstance(err, Cancelled):
        return UserMessage(Kind.CANCELLED, "Cancelled.", 499, "cancelled")
    if isinstance(err, MediaTooLongError):
        return UserMessage(Kind.MEDIA, str(err), 413, "audio_too_long")
    if isinstance(err, MediaError):
        return UserMessage(Kind.MEDIA, str(err), 400, "invalid_file")
    if isinstance(err, DecodingError):
        return UserMessage(Kind.DECODING, str(err), 400, "invalid_value")
    if isinstance(err, ModelNotInstalledError):
        return UserMessage(Kind.MODEL_MISSING, str(err), 404, "model_not_found")
    if isinstance(err, ModelNotBuiltError):
        return UserMessage(Kind.MODEL_BROKEN, str(err), 500, "model_broken")
    if isinstance(err, SpeakerModelError):
        return UserMessage(Kind.SPEAKER_MODEL, str(err), 400, "speaker_model")
    if isinstance(err, DeviceError):
        return UserMessage(Kind.DEVICE, f"The chosen device cannot be used: {err}", 500,
                           "device_unavailable")  # fmt: skip
    if isinstance(err, EngineError):
        return UserMessage(Kind.ENGINE, "The transcription engine failed on this file: "
                           f"{first_line(err)}", 500, "engine_failed")  # fmt: skip
    if isinstance(err, MemoryError):
        return UserMessage(Kind.MEMORY, "Not enough memory for this file; close other programs "
                           "or choose a smaller model.", 503, "out_of_memory")  # fmt: skip
    log.error("unexpected failure", exc_info=err)
    return UserMessage(Kind.BUG, f"Unexpected error ({type(err).__name__}: {first_line(err)})",
                       500, "internal")  # fmt: skip
