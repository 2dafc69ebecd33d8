"""A file from someone else turned into audio we wrote ourselves before any other code reads
it: `transcode` decodes it with ``untrusted=True`` (`untrusted.SAFE_DEMUXERS` only: never a
playlist or anything else that opens other files by name) and stops at ``max_seconds`` of
decoded audio, whatever the container claims, writing 16 kHz mono 16-bit PCM WAV.
Everything after that (VAD, Whisper, the speaker pass, which may read the file more than
once) reads that WAV, so the untrusted file is parsed by FFmpeg exactly once, under those
rules.
"""

from __future__ import annotations

import contextlib
import os
import threading
import wave
from pathlib import Path

import numpy as np

from ..audio_format import SAMPLE_RATE
from ..errors import Cancelled
from .decode import decode_blocks
from .media_errors import StrPath


class TranscodeCancelled(Cancelled):
    """The caller stopped a transcode (a client hung up, a job was deleted)."""


def transcode(
    src: StrPath,
    dst: Path,
    *,
    max_seconds: float | None,
    cancel: threading.Event | None = None,
) -> float:
    """Decode the untrusted ``src`` into ``dst`` (created, readable by this user only; it must
    not exist) and return the seconds of audio written. Raises the decoder's `MediaError`s
    (`UnsupportedMediaError` for a refused container, `MediaTooLongError` past
    ``max_seconds``), `TranscodeCancelled`; ``dst`` is removed on any failure."""
    fd = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    samples = 0
    try:
        with os.fdopen(fd, "wb") as raw, wave.open(raw, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(SAMPLE_RATE)
            with decode_blocks(src, 10.0, untrusted=True, max_seconds=max_seconds) as blocks:
                for block in blocks:
                    if cancel is not None and cancel.is_set():
                        raise TranscodeCancelled("stopped while reading the upload")
                    pcm = np.round(np.clip(block, -1.0, 1.0) * 32767.0).astype("<i2")
                    out.writeframes(pcm.tobytes())
                    samples += pcm.shape[0]
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(dst)
        raise
    return samples / SAMPLE_RATE
