"""A file job and its result, as typed values that cross threads, processes and the network.

Light on purpose (no engine imports): the window's process imports these to talk to the engine
process without loading the engine itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..transcript import Transcript

TRANSCRIBE_SHARE = 0.85  # of the progress bar, when speakers are labelled afterwards


@dataclass(frozen=True)
class FileJob:
    """What to do with one file; everything that makes two transcriptions of it the same."""

    source: Path
    model: str | None = None  # a name or folder; None: the default, else the newest installed
    device: str = "auto"  # auto / cpu / gpu / cuda / directml / coreml
    language: str | None = None  # None: detect
    languages: tuple[str, ...] = ()  # detect among these only
    speakers: str = "off"  # off / auto / N / MIN-MAX / channels
    batched: bool = True  # the faster batched path (same accuracy, bench/README.md)
    vocabulary: str | None = None  # names and jargon to spell as written
    # What ``deskscribe transcribe`` can ask for besides (the queue keeps the defaults).
    task: str = "transcribe"
    beam_size: int | None = 5
    word_timestamps: bool = False
    initial_prompt: str | None = None
    condition_on_previous_text: bool | None = None
    batch_size: int = 0
    # Not the user's own pick (a watched folder's): decoded only as real media, once, into a
    # WAV of ours (``audio.transcode``).
    untrusted: bool = False
    # The formats its transcript is exported to; SRT or VTT among them turn word timestamps on
    # (``service.files.transcribe_options``: subtitles are cut by word times).
    exports: tuple[str, ...] = ()


@dataclass
class FileJobResult:
    status: str  # done / failed / cancelled (/ running: stopped with the app, unfinished)
    error: str | None = None
    transcript: Transcript | None = None
    duration: float | None = None  # seconds of media, once known
    notes: list[str] = field(default_factory=list)  # e.g. "By channel" on a mono file
